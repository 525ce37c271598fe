"""Does the kernel's ``torch-reference`` compute what its numpy reference does? Run on CPU tensors of one test
shape (torch installed here), so a torch bar timed later on the GPU is a bar for the same computation."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...manifest.model import KernelSpec
from ...manifest.reference import load_reference
from .inputs import generate_inputs, reference_kwargs

__all__ = ["torch_disagreement"]


def torch_disagreement(root: Path, spec: KernelSpec, sizes: Mapping[str, int], *, seed: int = 0) -> str | None:
    """Why ``spec``'s ``torch-reference`` disagrees with its numpy reference at ``sizes`` (one line), or None
    where it agrees within the kernel's tolerance. Raises ImportError where torch is not installed."""
    if spec.torch_reference is None:
        raise ValueError(f"kernel {spec.name!r} names no torch-reference")
    torch: Any = importlib.import_module("torch")
    inputs = generate_inputs(spec, sizes, "signed", seed)
    want = np.asarray(load_reference(root, spec.reference)(**reference_kwargs(spec, sizes, inputs)))
    kwargs = {
        k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
        for k, v in reference_kwargs(spec, sizes, inputs).items()
    }
    try:
        got = load_reference(root, spec.torch_reference)(**kwargs)
        got = np.asarray(got.detach().cpu().numpy() if hasattr(got, "detach") else got)
    except Exception as exc:  # the user's code: say what it raised
        return f"the torch-reference {spec.torch_reference} failed on CPU tensors: {type(exc).__name__}: {exc}"[:300]
    if got.shape != want.shape:
        return f"the torch-reference {spec.torch_reference} returned shape {got.shape}, the reference {want.shape}"
    tol = spec.tolerance
    if not np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol.rtol, atol=tol.atol, equal_nan=True):
        worst = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        return (
            f"the torch-reference {spec.torch_reference} disagrees with the reference at {dict(sizes)} "
            f"(largest difference {worst:.3g}, tolerance rtol={tol.rtol:g} atol={tol.atol:g})"
        )
    return None
