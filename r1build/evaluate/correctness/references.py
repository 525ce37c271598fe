"""``r1build check``'s run of every kernel's numpy reference on the CPU, before any GPU sees a candidate.

At every test shape the reference is called on inputs from each of the evaluator's distributions
(:mod:`r1build.evaluate.correctness.inputs`: the inputs a GPU check feeds it), and what it returns is held to the
declared
outputs (:mod:`r1build.manifest.outputs`: count, shape, dtype). A reference that raises, returns the wrong number,
shape or dtype of outputs, or an output that is NaN in every element (of 16 or more; the evaluator wants NaN exactly
where the reference has one, so no honest kernel could pass there and one writing NaN everywhere would), is a
:class:`~r1build.errors.ManifestError` at the kernel's ``reference`` key naming the shape, so it is found here
rather than on a GPU.
"""

from __future__ import annotations

import importlib.util
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ...events import Note, emit
from ...manifest.load import located_error
from ...manifest.model import Manifest
from ...manifest.outputs import call_reference
from ...manifest.reference import ReferenceProblem, load_reference
from .cupy_hints import cupy_problems
from .inputs import DISTRIBUTIONS, generate_inputs, reference_kwargs
from .torch_check import torch_disagreement

__all__ = ["check_references", "library_problems", "torch_problems"]


def _shape_text(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


NAN_MIN_ELEMENTS = 16
"""Outputs this large that are NaN in every element are refused; a smaller one may be NaN by the kernel's own
rule (``NaN where x <= 0`` at one element)."""


def _all_nan(outputs: Mapping[str, NDArray[Any]]) -> str | None:
    """The first output of :data:`NAN_MIN_ELEMENTS` elements or more that is NaN in every one, if any."""
    for name, array in outputs.items():
        if array.size >= NAN_MIN_ELEMENTS and np.issubdtype(array.dtype, np.floating):
            with np.errstate(invalid="ignore"):
                if bool(np.isnan(array).all()):
                    return name
    return None


def check_references(manifest: Manifest) -> int:
    """Run each kernel's reference at each test shape and input distribution; returns the number of calls made.
    Kernels with bfloat16 arguments are skipped, with a warning, where ml_dtypes is not installed."""
    calls = 0
    has_bfloat16 = importlib.util.find_spec("ml_dtypes") is not None
    for i, spec in enumerate(manifest.kernels):
        key = ("kernel", i, "reference")
        if not has_bfloat16 and any(a.dtype == "bfloat16" for a in spec.args):
            emit(
                Note(
                    "warning",
                    "bfloat16 arguments: the reference is not run without the ml_dtypes package",
                    kernel=spec.name,
                )
            )
            continue
        try:
            reference = load_reference(manifest.root, spec.reference)
        except ReferenceProblem as exc:
            raise located_error(manifest, key, str(exc)) from None
        for j, sizes in enumerate(spec.test_shapes):
            for dist in DISTRIBUTIONS:
                inputs = generate_inputs(spec, sizes, dist, zlib.crc32(f"check:{spec.name}:{j}:{dist}".encode()))
                try:
                    outputs = call_reference(reference, spec, sizes, reference_kwargs(spec, sizes, inputs))
                    nan = _all_nan(outputs)
                    if nan is not None:
                        raise ReferenceProblem(
                            f"output {nan!r} is NaN in every element: no kernel can be checked against it (only one "
                            f"that writes NaN everywhere would match)"
                        )
                except ReferenceProblem as exc:
                    raise located_error(
                        manifest,
                        key,
                        f"the reference {spec.reference} of kernel {spec.name!r} at test shape {_shape_text(sizes)} "
                        f"({dist} inputs): {exc}",
                    ) from None
                calls += 1
    return calls


def library_problems(manifest: Manifest) -> dict[str, list[str]]:
    """Per kernel whose numpy reference likely cannot run on cupy arrays (read from its source: see
    :mod:`.cupy_hints`), what in it would fail, as ``file:line: what`` lines; a kernel that names a
    ``gpu-reference`` is never listed. Each is also said as a warning pointing to ``gpu-reference``."""
    found: dict[str, list[str]] = {}
    for spec in manifest.kernels:
        if spec.gpu_reference is not None:
            continue
        problems = cupy_problems(manifest.root, spec.reference)
        if problems:
            found[spec.name] = problems
            emit(
                Note(
                    "warning",
                    f"the reference {spec.reference} likely cannot run on cupy arrays, so the GPU would have no time "
                    f"of the library to set a winner against: {'; '.join(problems)}. Name a `gpu-reference` "
                    "written for cupy (the same computation on cupy arrays) to time the library",
                    kernel=spec.name,
                )
            )
    return found


def torch_problems(manifest: Manifest) -> int:
    """Each kernel's ``torch-reference`` (of a kernel with one ``out`` array and no ``inout``) run on CPU tensors of
    its first test shape against its numpy reference, where torch is installed here: one that computes something
    else is an error at its key (a torch bar for another computation would be a false figure); one that cannot
    run on the CPU (CUDA-only code) a warning. Returns the number of torch references checked (0 without torch)."""
    named = [
        (i, spec)
        for i, spec in enumerate(manifest.kernels)
        if spec.torch_reference is not None  # one output, returned: what the comparison reads
        and [a.role for a in spec.args if a.is_array and a.role != "in"] == ["out"]
    ]
    if not named or importlib.util.find_spec("torch") is None:
        return 0
    for i, spec in named:
        try:
            why = torch_disagreement(manifest.root, spec, spec.test_shapes[0])
        except ReferenceProblem as exc:
            raise located_error(manifest, ("kernel", i, "torch-reference"), str(exc)) from None
        if why is None:
            continue
        if "failed on CPU tensors" in why:
            emit(Note("warning", f"{why}: not checked against the reference", kernel=spec.name))
            continue
        raise located_error(manifest, ("kernel", i, "torch-reference"), why)
    return len(named)
