"""Test data: seeded random inputs in several distributions, poison patterns for outputs, buffer layouts.

Every distribution draws fresh values from a seeded generator, so a failure reproduces and no two calls see the
same data. Never zeros: zeros hide unwritten outputs and wrong indexing.

* ``signed``: standard normal (floats) or small signed integers;
* ``large``: large magnitudes (floats scaled by 100, so ``exp`` overflows float32 unless it is computed stably;
  integers near a quarter of the type's range);
* ``ties``: few distinct values (-3..3), so maxima, sorts and comparisons meet equal elements;
* ``denormal``: normal values with a quarter replaced by subnormals of the dtype (floats only);
* ``precision``: positive floats exact in float32 whose low mantissa bits TF32, bf16 and fp16 drop, all rounding
  the same way (:mod:`.precision`), so a kernel computing below float32 fails; integers as ``signed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ...convert import record
from ...errors import EvaluationError
from ...manifest.model import Arg, KernelSpec

__all__ = [
    "DISTRIBUTIONS",
    "FLOAT_DTYPES",
    "ArrayLayout",
    "array_shape",
    "generate_inputs",
    "layout_for",
    "numpy_dtype",
    "poison_bytes",
    "precision_floats",
    "reference_kwargs",
    "scalar_values",
]

DISTRIBUTIONS = ("signed", "large", "ties", "denormal", "precision")
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
GUARD_BYTE = 0xC3
"""Fill of the guard bands around every buffer (0xC3C3C3C3 is -391.5 as float32: no kernel writes it by
chance)."""
GUARD_BYTES = 64 * 1024
"""Guard band size before and after each buffer: larger than any tile a kernel could overrun by."""

# Signalling NaNs of each float type: the exponent all ones, the quiet bit clear, a non-zero payload. Arithmetic
# never produces one (a computed NaN is quiet: 0x7fffffff on NVIDIA GPUs, 0x7fc00000 elsewhere), so a poison of
# this family left in an output means "never written", and a NaN a kernel computed is reported as a NaN.
# (exponent|sign bits, payload mask with the quiet bit clear, item size)
_SNAN: dict[str, tuple[int, int, int]] = {
    "float16": (0x7C00, 0x01FF, 2),
    "bfloat16": (0x7F80, 0x003F, 2),
    "float32": (0x7F800000, 0x003FFFFF, 4),
    "float64": (0x7FF0000000000000, 0x0007FFFFFFFFFFFF, 8),
}
_SUBNORMAL_MIN_EXP = {"float16": -24, "bfloat16": -133, "float32": -149, "float64": -1074}
_SUBNORMAL_SPAN = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}


def numpy_dtype(dtype: str) -> np.dtype[Any]:
    """The numpy dtype of a manifest dtype (bfloat16 through ml_dtypes)."""
    if dtype == "bfloat16":
        try:
            import ml_dtypes  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            raise EvaluationError("bfloat16 arguments need the ml_dtypes package for the numpy reference") from None
        return np.dtype(ml_dtypes.bfloat16)  # type: ignore[no-any-return, unused-ignore]
    if dtype == "bool":
        return np.dtype(np.bool_)
    return np.dtype(dtype)


def scalar_values(spec: KernelSpec, sizes: Mapping[str, int]) -> dict[str, int | float]:
    """Every scalar argument's value for one shape: sizes from the shape, the rest from their ``value``."""
    out: dict[str, int | float] = {}
    for arg in spec.args:
        if arg.is_array:
            continue
        if arg.is_size:
            if arg.name not in sizes:
                raise EvaluationError(f"{spec.name}: shape {dict(sizes)} gives no value for size {arg.name!r}")
            out[arg.name] = int(sizes[arg.name])
        else:
            assert arg.value is not None
            out[arg.name] = arg.value
    return out


def array_shape(arg: Arg, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The concrete shape of an array argument for one shape."""
    assert arg.shape is not None
    dims = []
    for dim in arg.shape:
        if isinstance(dim, int):
            dims.append(dim)
        elif dim in sizes:
            dims.append(int(sizes[dim]))
        else:
            raise EvaluationError(f"size {dim!r} of {arg.name} is missing from shape {dict(sizes)}")
    return tuple(dims)


PRECISION_LOW_BITS = 0x6FFF
"""The low 16 mantissa bits of every ``precision`` input: the 13 bits TF32 and fp16 drop hold just under half of
their last place, the 16 bits bf16 drops 0.44 of its last place (see :mod:`.precision`)."""


def precision_floats(n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    """``n`` values of the ``precision`` distribution: in [1, 16), 7 random mantissa bits on top of
    :data:`PRECISION_LOW_BITS`, exact in float32."""
    top = rng.integers(0, 128, n, dtype=np.int64)
    mantissa = (top << 16) | PRECISION_LOW_BITS
    return np.ldexp(1.0 + mantissa / 2.0**23, rng.integers(0, 4, n))


def _floats(dist: str, dtype: str, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    if dist == "large":
        return rng.standard_normal(n) * 100.0
    if dist == "ties":
        return rng.integers(-3, 4, n).astype(np.float64)
    if dist == "precision":
        return precision_floats(n, rng)
    values = rng.standard_normal(n)
    if dist == "denormal":
        mask = rng.random(n) < 0.25
        k = int(mask.sum())
        exponent = _SUBNORMAL_MIN_EXP[dtype] + rng.integers(0, _SUBNORMAL_SPAN[dtype], k)
        mantissa = rng.integers(1, 8, k).astype(np.float64)
        sign = np.where(rng.random(k) < 0.5, -1.0, 1.0)
        values[mask] = sign * np.ldexp(mantissa, exponent)
    return values


def _integers(dist: str, dtype: np.dtype[Any], n: int, rng: np.random.Generator) -> NDArray[Any]:
    info = np.iinfo(dtype)
    if dist == "large":
        lo, hi = (info.min // 4, info.max // 4) if info.min < 0 else (info.max // 2, info.max // 4 * 3)
    elif dist == "ties":
        lo, hi = 0, 3
    else:
        lo, hi = (-100, 100) if info.min < 0 else (0, 200)
    return rng.integers(lo, hi, n, endpoint=True, dtype=dtype)


def generate_inputs(spec: KernelSpec, sizes: Mapping[str, int], dist: str, seed: int) -> dict[str, NDArray[Any]]:
    """Fresh values for every ``in`` and ``inout`` array of one shape in distribution ``dist``."""
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {dist!r}")
    rng = np.random.default_rng(seed)
    out: dict[str, NDArray[Any]] = {}
    for arg in spec.args:
        if not arg.is_array or arg.role == "out":
            continue
        shape = array_shape(arg, sizes)
        n = int(np.prod(shape, dtype=np.int64))
        dtype = numpy_dtype(arg.dtype)
        if arg.dtype in FLOAT_DTYPES:
            values: NDArray[Any] = _floats(dist, arg.dtype, n, rng).astype(dtype)
        elif arg.dtype == "bool":
            values = rng.random(n) < 0.5
        else:
            values = _integers(dist, dtype, n, rng)
        out[arg.name] = values.reshape(shape)
    return out


def reference_kwargs(spec: KernelSpec, sizes: Mapping[str, int], inputs: Mapping[str, NDArray[Any]]) -> dict[str, Any]:
    """Keyword arguments of the reference: ``in`` / ``inout`` arrays (copies) and every scalar."""
    kwargs: dict[str, Any] = {name: np.array(value, copy=True) for name, value in inputs.items()}
    kwargs.update(scalar_values(spec, sizes))
    return kwargs


def poison_bytes(dtype: str, index: int) -> bytes:
    """One element of the poison outputs are pre-filled with before call ``index`` of a sequence: distinct for
    every call, so an element left from an earlier call shows as such.

    Floats get a signalling NaN with a payload derived from ``index`` (the sign alternates), which no arithmetic
    produces; integers and bool a byte pattern (0x5A, 0xA5, 0x5B, 0xA4, ...) repeated over the element."""
    size = numpy_dtype(dtype).itemsize
    if dtype in FLOAT_DTYPES:
        bits, mask, nbytes = _SNAN[dtype]
        payload = ((0x2A5 + 0x9E3 * index) & mask) or 1
        sign = (1 << (8 * nbytes - 1)) if index % 2 else 0
        return (sign | bits | payload).to_bytes(nbytes, "little")
    byte = (0x5A + index // 2) & 0xFF if index % 2 == 0 else (0xA5 - index // 2) & 0xFF
    return bytes([byte]) * size


@record(frozen=True, kw_only=True)
class ArrayLayout:
    """Where one array argument lives inside its allocation during validation."""

    name: str
    """Argument name."""
    role: str
    """``in``, ``out`` or ``inout``."""
    dtype: str
    """Manifest dtype."""
    shape: tuple[int, ...]
    """Concrete shape."""
    nbytes: int
    """Bytes of the array itself."""
    front: int
    """Guard band bytes before it (the allocation is aligned; ``front`` is a multiple of 256)."""
    offset: int
    """Extra bytes between the guard and the array: 0 when the spec declares an alignment, otherwise a
    multiple of the element size that is not a multiple of 16, so vector loads that assume alignment fault."""
    back: int
    """Guard band bytes after it."""

    @property
    def start(self) -> int:
        """Byte offset of the array in its allocation."""
        return self.front + self.offset

    @property
    def total(self) -> int:
        """Allocation size in bytes."""
        return self.front + self.offset + self.nbytes + self.back


def layout_for(spec: KernelSpec, sizes: Mapping[str, int], *, guard: int = GUARD_BYTES) -> list[ArrayLayout]:
    """The validation layout of every array argument, in declaration order.

    Without ``spec.alignment`` the i-th array sits ``itemsize * (1 + i % 3)`` bytes past an aligned address
    (rounded up to a multiple of the itemsize that is not a multiple of 16), so the arrays are misaligned and
    misaligned *differently*: a kernel that checks one pointer's alignment and vector-loads another faults."""
    out = []
    for i, arg in enumerate(a for a in spec.args if a.is_array):
        shape = array_shape(arg, sizes)
        itemsize = numpy_dtype(arg.dtype).itemsize
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        if spec.alignment:
            offset = 0
        else:
            offset = itemsize * (1 + i % 3)
            while offset % 16 == 0:
                offset += itemsize
        out.append(
            ArrayLayout(
                name=arg.name,
                role=arg.role or "in",
                dtype=arg.dtype,
                shape=shape,
                nbytes=nbytes,
                front=guard,
                offset=offset,
                back=guard,
            )
        )
    return out
