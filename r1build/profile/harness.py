"""A small host program that calls one candidate at a benchmark shape, for ncu to profile.

It allocates every array of the spec at the shape (floating-point inputs filled with a small repeated value,
integer and bool inputs with zeros, so index arrays stay in bounds), calls the candidate twice to warm up, then
once between ``cudaProfilerStart`` and ``cudaProfilerStop`` (ncu runs with ``--profile-from-start off``), on a
stream of its own. Its exit status says what failed: 3 an allocation, 4 a call, 5 a synchronization.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..manifest.cdecl import declaration
from ..manifest.model import DTYPE_BYTES, DTYPES, INTEGER_DTYPES, KernelSpec

__all__ = ["HARNESS_ERRORS", "harness_source"]

HARNESS_ERRORS = {3: "an allocation failed", 4: "a call returned an error", 5: "a synchronization failed"}
"""The harness's exit statuses and what they mean."""


def _scalar(dtype: str, value: bool | int | float) -> str:
    ctype = DTYPES[dtype]
    if dtype == "bool":
        return "true" if value else "false"
    if dtype in INTEGER_DTYPES:
        return f"static_cast<{ctype}>({int(value)}LL)"
    return f"static_cast<{ctype}>({float(value)!r}f)" if dtype != "float64" else repr(float(value))


def harness_source(spec: KernelSpec, sizes: Mapping[str, int]) -> str:
    """The harness's CUDA C++ source for ``spec`` at ``sizes`` (one benchmark shape)."""
    lines = [
        declaration(spec),
        "#include <cuda_profiler_api.h>",
        "",
        "int main() {",
        "    cudaStream_t stream;",
        "    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 3;",
    ]
    call_args = []
    for i, arg in enumerate(spec.args):
        if arg.shape is not None:
            count = 1
            for dim in arg.shape:
                count *= dim if isinstance(dim, int) else int(sizes[dim])
            nbytes = max(1, count) * DTYPE_BYTES[arg.dtype]
            fill = "0" if arg.dtype in INTEGER_DTYPES or arg.dtype == "bool" else "0x3c"
            lines += [
                f"    void* a{i} = nullptr;",
                f"    if (cudaMalloc(&a{i}, {nbytes}ULL) != cudaSuccess) return 3;",
                f"    if (cudaMemset(a{i}, {fill}, {nbytes}ULL) != cudaSuccess) return 3;",
            ]
            const = "const " if arg.role == "in" else ""
            call_args.append(f"static_cast<{const}{DTYPES[arg.dtype]}*>(a{i})")
        elif arg.value is None:
            call_args.append(_scalar(arg.dtype, int(sizes[arg.name])))
        else:
            call_args.append(_scalar(arg.dtype, arg.value))
    call = f"{spec.name}({', '.join([*call_args, 'stream'])})"
    lines += [
        "    for (int i = 0; i < 2; ++i) {",
        f"        if ({call} != cudaSuccess) return 4;",
        "    }",
        "    if (cudaStreamSynchronize(stream) != cudaSuccess) return 5;",
        "    cudaProfilerStart();",
        f"    cudaError_t called = {call};",
        "    cudaError_t synced = cudaStreamSynchronize(stream);",
        "    cudaProfilerStop();",
        "    if (called != cudaSuccess) return 4;",
        "    return synced == cudaSuccess ? 0 : 5;",
        "}",
    ]
    return "\n".join(lines) + "\n"
