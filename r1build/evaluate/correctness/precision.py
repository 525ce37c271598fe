"""Precision below the spec: inputs that float32 holds exactly and TF32, bf16 and fp16 do not, and how a failure
on them is named.

The ``precision`` inputs (:func:`~.inputs.precision_floats`) are positive, in [1, 16), with 7 random mantissa
bits on top and the 16 bits below them set to ``0x6FFF``: the 13 bits TF32 and fp16 drop hold just under half
of their last place, the 16 bits bf16 drops 0.44 of its last place. Every element rounded to one of those formats
(to nearest or toward zero alike) loses 2.4e-4 to 4.9e-4 (10 mantissa bits) or 1.7e-3 to 3.4e-3 (7 bits) of its
value, all in the same direction, so the errors add up in sums and products instead of cancelling; and sums of
many of them leave fp16's range (65504). A float32 computation meets them exactly.

How the parent names a value mismatch (:func:`name_downcast`):

* at any direct call whose inputs a downcast changes, outputs much closer to the reference computed on the
  inputs rounded to 10 or 7 mantissa bits than to the reference itself: "computes below float32", with the
  format (what TF32 or bf16 tensor-core arithmetic does: round the inputs, accumulate in float32);
* at the ``precision`` call, which comes after every other call of the shape passed, otherwise: "likely
  computes below float32", with the evidence (only these inputs fail; the relative error norm), since rounding
  inside the computation (an fp16 accumulator) matches no rounded-input reference, and a bug that only these
  inputs show cannot be ruled out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .compare import Mismatch
from .inputs import ArrayLayout, numpy_dtype, precision_floats

__all__ = ["DOWNCASTS", "downcast_inputs", "name_downcast", "precision_floats", "round_mantissa"]

DOWNCASTS: dict[str, int] = {"TF32 or fp16 (10 mantissa bits)": 10, "bf16 (7 mantissa bits)": 7}
"""The formats a float32 kernel may quietly compute in, by the mantissa bits each keeps; the reference is run on
the ``precision`` inputs rounded to each, to recognize a kernel that rounds its inputs."""

MATCH_RATIO = 4.0
"""Outputs count as matching a rounded-input reference when their relative error norm against it is this many
times smaller than against the reference itself."""


def round_mantissa(x: NDArray[Any], bits: int) -> NDArray[np.float32]:
    """``x`` as float32 rounded to nearest (ties to even) to ``bits`` mantissa bits, as TF32 (10) or bf16 (7)
    hold it; the exponent range stays float32's."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    drop = 23 - bits
    lsb = (u >> np.uint64(drop)) & np.uint64(1)
    u = (u + np.uint64((1 << (drop - 1)) - 1) + lsb) & np.uint64(~((1 << drop) - 1) & 0xFFFFFFFF)
    rounded: NDArray[np.float32] = u.astype(np.uint32).view(np.float32).reshape(np.shape(x))
    return rounded


def downcast_inputs(inputs: Mapping[str, NDArray[Any]], bits: int) -> dict[str, NDArray[Any]]:
    """``inputs`` with every float32 array rounded to ``bits`` mantissa bits, the others as they are."""
    return {
        name: round_mantissa(value, bits) if value.dtype == np.float32 else np.array(value, copy=True)
        for name, value in inputs.items()
    }


def _relative_error(got: Sequence[NDArray[np.float64]], want: Sequence[NDArray[Any]]) -> float:
    """The relative error norm over all outputs; infinite where an output is not finite and the reference is."""
    err_sq = ref_sq = 0.0
    for g, w in zip(got, want, strict=True):
        w64 = np.asarray(w, dtype=np.float64).reshape(-1)
        finite = np.isfinite(w64)
        if not bool(np.isfinite(g[finite]).all()):
            return float("inf")
        diff = g[finite] - w64[finite]
        err_sq += float(np.dot(diff, diff))
        ref_sq += float(np.dot(w64[finite], w64[finite]))
    return float(np.sqrt(err_sq / ref_sq)) if ref_sq > 0 else float(np.sqrt(err_sq))


def _outputs(layouts: Sequence[ArrayLayout], datas: Sequence[bytes]) -> dict[str, NDArray[np.float64]]:
    out = {}
    for lay, data in zip(layouts, datas, strict=True):
        if lay.role == "in":
            continue
        raw = np.frombuffer(data, dtype=np.uint8)[lay.start : lay.start + lay.nbytes]
        with np.errstate(invalid="ignore"):
            out[lay.name] = raw.view(numpy_dtype(lay.dtype)).astype(np.float64)
    return out


def name_downcast(
    layouts: Sequence[ArrayLayout],
    datas: Sequence[bytes],
    expected: Mapping[str, NDArray[Any]],
    downcasts: Mapping[str, Mapping[str, NDArray[Any]]],
    found: Mismatch,
    *,
    likely: bool,
) -> Mismatch:
    """``found`` (a failure of a direct call) named as computing below float32, where it is a value mismatch and
    the outputs match the reference on rounded inputs (``downcasts``: its outputs on the inputs rounded to each of
    :data:`DOWNCASTS`), or, with ``likely`` (the ``precision`` call, after every other call passed), as likely so;
    else ``found`` as it is."""
    if found.kind != "value":
        return found
    got = _outputs(layouts, datas)
    names = list(got)
    true = _relative_error([got[n] for n in names], [expected[n] for n in names])
    outputs = [got[n] for n in names]
    scored = sorted((_relative_error(outputs, [ref[n] for n in names]), fmt) for fmt, ref in downcasts.items())
    if scored and np.isfinite(scored[0][0]) and scored[0][0] * MATCH_RATIO <= true:
        err, fmt = scored[0]
        return Mismatch(
            "value",
            f"computes below float32: its outputs match the reference computed on its inputs rounded to {fmt} "
            f"(relative error norm {err:.3g} against that, {true:.3g} against the float32 reference): "
            f"{found.message}",
        )
    if not likely:
        return found
    return Mismatch(
        "value",
        "likely computes below float32 (TF32, bf16 or fp16 arithmetic, an fp16 accumulator, ...): every other "
        "input distribution passed, and these inputs, whose low mantissa bits those formats drop, fail with a "
        f"relative error norm of {true:.3g} (rounding them to 10 mantissa bits alone gives about 3e-4, to 7 bits "
        f"about 2.5e-3, and fp16 sums overflow past 65504): {found.message}",
    )
