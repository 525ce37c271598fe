"""numpy references for the root manifest's kernels: the ground truth candidates are checked against.

Each function takes the kernel's ``in`` arrays and scalars as keyword arguments and returns its outputs.
Computation is in float64 where it matters, so the reference is more precise than any float32 kernel.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def silu_mul(gate: NDArray[np.float32], up: NDArray[np.float32], n: int) -> NDArray[np.float32]:
    g = gate.astype(np.float64)
    return (g / (1.0 + np.exp(-g)) * up).astype(np.float32)


def softmax_rows(x: NDArray[np.float32], rows: int, cols: int) -> NDArray[np.float32]:
    z = x.astype(np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return (z / z.sum(axis=1, keepdims=True)).astype(np.float32)


def sum_all(x: NDArray[np.float32], n: int) -> NDArray[np.float32]:
    return np.array([x.astype(np.float64).sum()], dtype=np.float32)


def transpose(x: NDArray[np.float32], rows: int, cols: int) -> NDArray[np.float32]:
    return np.ascontiguousarray(x.T)


def matmul(a: NDArray[np.float32], b: NDArray[np.float32], m: int, n: int, k: int) -> NDArray[np.float32]:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def rmsnorm(x: NDArray[np.float32], weight: NDArray[np.float32], rows: int, cols: int,
            eps: float) -> NDArray[np.float32]:
    z = x.astype(np.float64)
    inv = 1.0 / np.sqrt((z * z).mean(axis=1, keepdims=True) + eps)
    return (z * inv * weight.astype(np.float64)).astype(np.float32)
