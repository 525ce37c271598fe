"""Judging one call from the bytes of every allocation after it: guard bands, inputs, outputs.

The rules, in the order they are checked:

1. every guard band still holds its fill (else: an out-of-bounds write, with the array and how far);
2. every ``in`` array holds exactly what was uploaded;
3. every output element was written (poison left behind means an unwritten element) and is not NaN unless the
   reference's is;
4. outputs match the reference at the spec's tolerance, elementwise with ``numpy.allclose``'s rule
   ``|out - ref| <= atol + rtol * |ref|`` for every element, and in norm
   ``||out - ref|| <= rtol * ||ref|| + atol * sqrt(N)`` (so a reference that is tiny, say one subnormal that a
   GPU atomic flushes to zero, is judged by ``atol``, not by a relative error of 100%). One scaling, for the
   calls with large-magnitude inputs (100 times the others) only: there ``atol`` is multiplied by
   ``max(1, rms(ref))``, since absolute rounding errors grow with the magnitude of what is summed (a correct
   float32 reduction would otherwise fail at cancelling elements). A NaN, an infinity that the reference does not
   have, never passes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ...convert import record
from ...manifest.model import Tolerance
from .inputs import GUARD_BYTE, ArrayLayout, numpy_dtype

__all__ = ["Mismatch", "check_guards", "check_unchanged", "compare_output", "compare_outputs", "format_value"]


@record(frozen=True)
class Mismatch:
    """Why one call failed a check."""

    kind: str
    """``guard``, ``input``, ``unwritten``, ``nan`` or ``value``."""
    message: str
    """What was found, for people and models."""


def format_value(x: Any) -> str:
    """A compact rendering of one element."""
    if isinstance(x, (float, np.floating)):
        return f"{float(x):.7g}"
    return str(x)


def _index(flat: int, shape: tuple[int, ...]) -> str:
    if not shape:
        return "[]"
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def check_guards(layout: ArrayLayout, data: bytes) -> Mismatch | None:
    """Whether the guard bands around one array are intact."""
    view = np.frombuffer(data, dtype=np.uint8)
    if view.size != layout.total:
        return Mismatch("guard", f"{layout.name}: allocation came back with {view.size} bytes, expected {layout.total}")
    front = view[: layout.start]
    back = view[layout.start + layout.nbytes :]
    bad_front = np.flatnonzero(front != GUARD_BYTE)
    bad_back = np.flatnonzero(back != GUARD_BYTE)
    if bad_front.size == 0 and bad_back.size == 0:
        return None
    parts = []
    if bad_front.size:
        parts.append(
            f"{bad_front.size} bytes before its start (up to {layout.start - int(bad_front[0])} bytes before it)"
        )
    if bad_back.size:
        parts.append(f"{bad_back.size} bytes past its end (up to {int(bad_back[-1]) + 1} bytes past it)")
    return Mismatch(
        "guard",
        f"out-of-bounds write: {layout.name} was written outside its {layout.nbytes} bytes: " + " and ".join(parts),
    )


def _payload(layout: ArrayLayout, data: bytes | memoryview) -> NDArray[Any]:
    raw = np.frombuffer(data, dtype=np.uint8)[layout.start : layout.start + layout.nbytes]
    return raw.view(numpy_dtype(layout.dtype)).reshape(layout.shape)


def check_unchanged(layout: ArrayLayout, data: bytes, uploaded: NDArray[Any]) -> Mismatch | None:
    """Whether an ``in`` array still holds exactly what was uploaded (bitwise)."""
    got = np.frombuffer(data, dtype=np.uint8)[layout.start : layout.start + layout.nbytes]
    want = np.ascontiguousarray(uploaded).view(np.uint8).reshape(-1)
    diff = np.flatnonzero(got != want)
    if diff.size == 0:
        return None
    itemsize = numpy_dtype(layout.dtype).itemsize
    first = int(diff[0]) // itemsize
    changed = int(np.unique(diff // itemsize).size)
    flat_want = np.ascontiguousarray(uploaded).reshape(-1)
    flat_got = _payload(layout, data).reshape(-1)
    return Mismatch(
        "input",
        f"modified its input {layout.name} (role in): {changed} elements changed, first at "
        f"{_index(first, layout.shape)}: was {format_value(flat_want[first])}, now "
        f"{format_value(flat_got[first])}",
    )


CHUNK = 1 << 22
"""Elements per pass of :func:`_clearly_matches` (32 MB float64 buffers, reused by the thread). A whole
benchmark-shape output at once went through fresh temporaries of its full size (page faults on every call); much
smaller chunks make so many numpy calls that threads judging side by side wait on the interpreter lock between
them (measured on the H200: 256k-element chunks took 8 s a candidate with 16 judging threads)."""
CACHED_CHUNK = 1 << 17
"""Elements per pass for a process that judges alone (no other thread waits on its interpreter lock): 1 MB
float64 buffers, so the dozen passes over a chunk stay in the core's cache instead of going to memory."""

_scratch = threading.local()


def _squares(x: NDArray[np.float64]) -> float:
    """The sum of squares of a float64 vector, without BLAS: numpy's BLAS (OpenBLAS) starts a thread per core on
    large calls, whose threads then spin waiting for the next one; in every process and thread that judges side by
    side that is more spinning threads than cores (measured on the H200: eight comparing processes starved the
    machine, compute-sanitizer runs took 150 s instead of 6)."""
    return float(np.einsum("i,i->", x, x))


def _buffers(size: int) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """This thread's reused buffers of at least ``size`` elements."""
    held = getattr(_scratch, "buffers", None)
    if held is None or held[0].size < size:
        held = (np.empty(size), np.empty(size), np.empty(size), np.empty(size, dtype=bool))
        _scratch.buffers = held
    return held


def _clearly_matches(
    got: NDArray[Any], expected: NDArray[Any], tolerance: Tolerance, *, scale_atol: bool, chunk: int = CHUNK
) -> bool:
    """The common case in a few passes over the data: float outputs and reference all finite (so no poison, which
    is a NaN, was left and no NaN or infinity differs), every element and the norm within the tolerance. True
    only where the full rules below find nothing; False sends the array through them (which say what is wrong).
    Works through the arrays in chunks of ``chunk`` elements."""
    if got.dtype.kind != "f":
        return False
    want = np.asarray(expected).reshape(-1)
    if want.dtype.kind != "f" or want.size != got.size:
        return False
    n = got.size
    chunk = max(1, chunk)
    w, err, allowed, flags = _buffers(min(n, chunk))
    scale = 1.0
    if scale_atol:
        squares = 0.0
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            np.copyto(w[:m], want[start : start + m], casting="unsafe")
            squares += _squares(w[:m])
        scale = max(1.0, float(np.sqrt(squares / n))) if n else 1.0
    err_sq = ref_sq = 0.0
    for start in range(0, n, chunk):
        g = got[start : start + chunk]
        m = g.size
        if not bool(np.isfinite(g, out=flags[:m]).all()):
            return False
        np.copyto(w[:m], want[start : start + m], casting="unsafe")
        if not bool(np.isfinite(w[:m], out=flags[:m]).all()):
            return False
        np.copyto(err[:m], g, casting="unsafe")
        err[:m] -= w[:m]
        np.abs(err[:m], out=err[:m])
        np.abs(w[:m], out=allowed[:m])
        allowed[:m] *= tolerance.rtol
        allowed[:m] += tolerance.atol * scale
        if bool(np.greater(err[:m], allowed[:m], out=flags[:m]).any()):
            return False
        err_sq += _squares(err[:m])
        ref_sq += _squares(w[:m])
    return bool(
        float(np.sqrt(err_sq)) <= tolerance.rtol * float(np.sqrt(ref_sq)) + tolerance.atol * scale * float(np.sqrt(n))
    )


def compare_output(
    layout: ArrayLayout,
    data: bytes | memoryview,
    expected: NDArray[Any],
    tolerance: Tolerance,
    poison: bytes,
    *,
    scale_atol: bool = False,
    chunk: int = CHUNK,
) -> Mismatch | None:
    """Whether one output array matches the reference (see the module docstring for the rules); the common case
    goes through the arrays ``chunk`` elements at a time."""
    got = _payload(layout, data)
    n = got.size
    if n == 0:
        return None
    if _clearly_matches(got.reshape(-1), expected, tolerance, scale_atol=scale_atol, chunk=chunk):
        return None
    itemsize = got.dtype.itemsize
    raw = np.frombuffer(data, dtype=np.uint8)[layout.start : layout.start + layout.nbytes].reshape(n, itemsize)
    if len(poison) == itemsize:
        left = np.all(raw == np.frombuffer(poison, dtype=np.uint8), axis=1)
    else:  # inout arrays start from their inputs, not from poison
        left = np.zeros(n, dtype=bool)
    is_float = got.dtype.kind == "f" or got.dtype.name == "bfloat16"
    g, w, ref_nan = _widened(got.reshape(-1), np.asarray(expected).reshape(-1), is_float=is_float)
    left &= ~ref_nan if is_float else g != w
    if left.any():
        idx = np.flatnonzero(left)
        return Mismatch(
            "unwritten",
            f"left {idx.size} of {n} elements of {layout.name} unwritten (still the "
            f"poison pattern 0x{poison.hex()}), first at {_index(int(idx[0]), layout.shape)}",
        )
    if is_float:
        special = _special_mismatch(layout, g, w, ref_nan)
        if special is not None:
            return special
        finite = np.isfinite(w)
        g, w = np.where(finite, g, 0.0), np.where(finite, w, 0.0)
    return _tolerance_mismatch(layout, g, w, tolerance, scale_atol=scale_atol)


def _widened(
    flat: NDArray[Any], want: NDArray[Any], *, is_float: bool
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """The output and the reference as float64, and where the reference is NaN (never, for integers)."""
    if is_float:
        with np.errstate(invalid="ignore"):  # a signalling NaN (the poison) raises "invalid" when widened
            g = flat.astype(np.float64)
            w = want.astype(np.float64)
        return g, w, np.isnan(w)
    g = flat.astype(np.float64) if flat.dtype != np.bool_ else flat.astype(np.int64).astype(np.float64)
    w = want.astype(np.float64) if want.dtype != np.bool_ else want.astype(np.int64).astype(np.float64)
    return g, w, np.zeros(flat.size, dtype=bool)


def _special_mismatch(
    layout: ArrayLayout, g: NDArray[np.float64], w: NDArray[np.float64], ref_nan: NDArray[np.bool_]
) -> Mismatch | None:
    """A NaN where the reference has none, or a NaN or infinity of the reference not matched."""
    n = g.size
    bad_nan = np.isnan(g) & ~ref_nan
    if bad_nan.any():
        idx = np.flatnonzero(bad_nan)
        return Mismatch(
            "nan",
            f"{idx.size} of {n} elements of {layout.name} are NaN where the reference is "
            f"not, first at {_index(int(idx[0]), layout.shape)} (expected "
            f"{format_value(w[idx[0]])})",
        )
    missing_nan = ref_nan & ~np.isnan(g)
    bad_inf = (np.isinf(g) | np.isinf(w)) & (g != w) & ~ref_nan
    wrong_special = missing_nan | bad_inf
    if wrong_special.any():
        i = int(np.flatnonzero(wrong_special)[0])
        return Mismatch(
            "value",
            f"{layout.name}{_index(i, layout.shape)} is {format_value(g[i])}, expected {format_value(w[i])}",
        )
    return None


def _tolerance_mismatch(
    layout: ArrayLayout,
    g: NDArray[np.float64],
    w: NDArray[np.float64],
    tolerance: Tolerance,
    *,
    scale_atol: bool,
) -> Mismatch | None:
    """Elements beyond the tolerance, or an error norm beyond it; None when neither."""
    n = g.size
    err = np.abs(g - w)
    scale = max(1.0, float(np.sqrt(np.mean(w * w)))) if scale_atol else 1.0
    allowed = tolerance.atol * scale + tolerance.rtol * np.abs(w)
    over = err > allowed
    ref_norm = float(np.sqrt(_squares(w)))
    err_norm = float(np.sqrt(_squares(err)))
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    norm_ok = err_norm <= tolerance.rtol * ref_norm + tolerance.atol * scale * np.sqrt(n)
    if not over.any() and norm_ok:
        return None
    where = int(np.argmax(err - allowed))
    scaled = f" scaled by {scale:.3g}" if scale != 1 else ""
    detail = (
        f"{int(over.sum())} of {n} elements of {layout.name} differ beyond the tolerance (rtol="
        f"{tolerance.rtol:g}, atol={tolerance.atol:g}{scaled}); worst at {_index(where, layout.shape)}: got "
        f"{format_value(g[where])}, "
        f"expected {format_value(w[where])}; relative error norm {rel:.3g}"
    )
    if not over.any():
        detail = (
            f"{layout.name}: relative error norm {rel:.3g} exceeds the tolerance (rtol={tolerance.rtol:g}) "
            f"(largest error at {_index(where, layout.shape)}: got {format_value(g[where])}, expected "
            f"{format_value(w[where])})"
        )
    return Mismatch("value", detail)


def compare_outputs(
    layouts: list[ArrayLayout],
    datas: list[bytes],
    expected: Mapping[str, NDArray[Any]],
    tolerance: Tolerance,
    poisons: Mapping[str, bytes],
    *,
    scale_atol: bool = False,
) -> Mismatch | None:
    """Check every output array of one call (declaration order); the first mismatch."""
    for layout, data in zip(layouts, datas, strict=True):
        if layout.role == "in":
            continue
        found = compare_output(
            layout, data, expected[layout.name], tolerance, poisons.get(layout.name, b""), scale_atol=scale_atol
        )
        if found is not None:
            return found
    return None
