"""numpy references for r1sample's kernels: the ground truth every candidate is checked against.

Each function takes a kernel's ``in`` arrays and scalars as keyword arguments and returns its ``out`` arrays.
Sums and products run in float64, so the reference is more precise than any float32 kernel.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]


def gelu(x: F32, n: int) -> F32:
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    z = x.astype(np.float64)
    return (0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))).astype(np.float32)


def softmax_rows(x: F32, rows: int, cols: int) -> F32:
    """Softmax over each row of a rows x cols matrix."""
    z = x.astype(np.float64).reshape(rows, cols)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def reduce_sum(x: F32, n: int) -> F32:
    """The sum of all elements, as a one-element array."""
    return np.array([x.astype(np.float64).sum()], dtype=np.float32)


def matmul_tiled(a: F32, b: F32, m: int, n: int, k: int) -> F32:
    """C = A @ B for row-major A (m x k) and B (k x n)."""
    return (a.astype(np.float64).reshape(m, k) @ b.astype(np.float64).reshape(k, n)).astype(np.float32)
