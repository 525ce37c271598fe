"""A synthetic project of many small kernels for the scale benchmarks: ``kernels`` copies of one elementwise
kernel (each its own name, reference and baseline) for the given archs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SOURCE = """#include <cuda_runtime.h>

namespace {{
__global__ void scale_kernel(const float* x, float* y, int n) {{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = {factor}.0f * x[i];
}}
}}  // namespace

extern "C" cudaError_t {name}(const float* x, float* y, int n, cudaStream_t stream) {{
    if (n <= 0) return cudaSuccess;
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}}
"""

KERNEL = """
[[kernel]]
name = "{name}"
description = "y[i] = {factor} * x[i] for i in [0, n)."
args = [
  {{ name = "x", dtype = "float32", shape = ["n"], role = "in" }},
  {{ name = "y", dtype = "float32", shape = ["n"], role = "out" }},
  {{ name = "n", dtype = "int32" }},
]
reference = "reference:{name}"
test-shapes = [{{ n = 1 }}, {{ n = 97 }}]
bench-shapes = [{{ n = 1048576 }}]
baseline = "kernels/{name}.cu"
"""


def write_project(root: Path, kernels: int, archs: Sequence[str]) -> Path:
    """The project in ``root`` (created); returns its manifest."""
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    names = [f"scale{i:03d}" for i in range(kernels)]
    refs = ["import numpy as np\n"]
    toml = [f"archs = [{', '.join(repr(a).replace(chr(39), chr(34)) for a in archs)}]\n"]
    for i, name in enumerate(names):
        factor = i + 2
        (root / "kernels" / f"{name}.cu").write_text(SOURCE.format(name=name, factor=factor), encoding="utf-8")
        refs.append(
            f"\n\ndef {name}(x: np.ndarray, n: int) -> np.ndarray:\n    return ({factor} * x).astype(np.float32)\n"
        )
        toml.append(KERNEL.format(name=name, factor=factor))
    (root / "reference.py").write_text("".join(refs), encoding="utf-8")
    manifest = root / "kernels.toml"
    manifest.write_text("".join(toml), encoding="utf-8")
    return manifest
