"""Calling a kernel's numpy reference and holding what it returns to the declared outputs: their count, their
shape and the kind of their dtype. Pure CPU and numpy; ``r1build check`` runs it at every test shape, and the
evaluator's reference call can share it.

The rules: one array for one output, a tuple or list in declaration order, or a dict by name, for the ``out``
and ``inout`` arrays; each with the declared shape (dimensions of length 1 aside: a one-element output may come
back as a scalar); floating-point values for float outputs, integers for integer outputs, booleans for bool.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .model import INTEGER_DTYPES, Arg, KernelSpec
from .reference import EXIT_GUARD, ReferenceProblem, failure_text

__all__ = ["call_reference", "declared_shape", "reference_outputs"]

_KINDS = {"integer": "iu", "bool": "b"}


def declared_shape(arg: Arg, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The concrete shape of an array argument at one shape (every size name must be in ``sizes``)."""
    assert arg.shape is not None
    return tuple(dim if isinstance(dim, int) else int(sizes[dim]) for dim in arg.shape)


def _family(dtype: str) -> str:
    if dtype == "bool":
        return "bool"
    return "integer" if dtype in INTEGER_DTYPES else "float"


def _dtype_fits(arr: NDArray[Any], dtype: str) -> bool:
    family = _family(dtype)
    if family == "float":
        # numpy float types, or a bfloat16 from ml_dtypes (a 2-byte type of kind 'V' named bfloat16)
        return arr.dtype.kind == "f" or arr.dtype.name == "bfloat16"
    return arr.dtype.kind in _KINDS[family]


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def reference_outputs(spec: KernelSpec, sizes: Mapping[str, int], result: object) -> dict[str, NDArray[Any]]:
    """The reference's ``out`` / ``inout`` arrays by name, each in its declared shape; :class:`ReferenceProblem`
    saying what is wrong otherwise."""
    outs = [a for a in spec.args if a.is_array and a.role in ("out", "inout")]
    names = ", ".join(a.name for a in outs)
    if isinstance(result, dict):
        unknown = sorted(str(k) for k in result if k not in {a.name for a in outs})
        if unknown:
            raise ReferenceProblem(f"returned a dict with {', '.join(unknown)}, which are not outputs ({names})")
        values = {a.name: result.get(a.name) for a in outs}
    elif isinstance(result, (tuple, list)):
        if len(result) != len(outs):
            raise ReferenceProblem(f"returned {len(result)} values for {len(outs)} outputs ({names})")
        values = dict(zip([a.name for a in outs], result, strict=True))
    else:
        if len(outs) != 1:
            raise ReferenceProblem(
                f"returned one value for {len(outs)} outputs ({names}); return a tuple in "
                "declaration order or a dict by name"
            )
        values = {outs[0].name: result}
    checked: dict[str, NDArray[Any]] = {}
    for arg in outs:
        value = values[arg.name]
        if value is None:
            raise ReferenceProblem(f"returned nothing for output {arg.name!r}")
        try:
            arr = np.asarray(value)
        except Exception as exc:  # user data: anything numpy cannot take is reported
            raise ReferenceProblem(f"output {arg.name!r} is not an array: {failure_text(exc)}") from None
        shape = declared_shape(arg, sizes)
        if arr.shape != shape:
            if _squeezed(arr.shape) != _squeezed(shape):
                raise ReferenceProblem(f"output {arg.name!r} has shape {arr.shape}, the spec declares {shape}")
            arr = arr.reshape(shape)
        if not _dtype_fits(arr, arg.dtype):
            raise ReferenceProblem(
                f"output {arg.name!r} has dtype {arr.dtype}, the spec declares {arg.dtype} "
                f"(return {_family(arg.dtype)} values)"
            )
        checked[arg.name] = arr
    return checked


def call_reference(
    reference: Callable[..., Any],
    spec: KernelSpec,
    sizes: Mapping[str, int],
    kwargs: Mapping[str, Any],
    *,
    timeout_s: float | None = None,
) -> dict[str, NDArray[Any]]:
    """Call the reference with ``kwargs`` (numpy's floating-point warnings silenced: overflow on large inputs is
    the reference's business) and check what it returns with :func:`reference_outputs`. The call runs on a thread
    of its own and is given ``timeout_s`` seconds (``R1BUILD_REFERENCE_TIMEOUT`` when None, 300 unset): a reference
    that loops or waits for ever is a :class:`ReferenceProblem`, not a command that never ends (its thread is left
    behind, a daemon that does not keep the process alive)."""
    if timeout_s is None:
        from ..settings import env_settings

        timeout_s = env_settings().reference_timeout
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                outcome["result"] = reference(**kwargs)
        except KeyboardInterrupt as exc:  # raised in the reference itself: the caller's to see
            outcome["interrupt"] = exc
        except BaseException as exc:  # user code: any failure (sys.exit, GeneratorExit, its own classes) is reported
            outcome["error"] = exc

    thread = threading.Thread(target=call, name=f"r1build-reference-{spec.name}", daemon=True)
    # guarded for as long as this call waits: a reference left running past its time keeps nothing from the process
    with EXIT_GUARD.held():
        thread.start()
        thread.join(timeout_s)
    if thread.is_alive():
        raise ReferenceProblem(
            f"did not return within {timeout_s:g} s (R1BUILD_REFERENCE_TIMEOUT): a loop or a wait that never ends?"
        )
    if "interrupt" in outcome:
        raise outcome["interrupt"]
    if "error" in outcome:
        raise ReferenceProblem(f"raised {failure_text(outcome['error'])}") from None
    return reference_outputs(spec, sizes, outcome.get("result"))
