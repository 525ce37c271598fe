"""The C declaration of a kernel's entry point, as the candidate contract states it: written into the public
header by :mod:`r1build.emit.header`, and compiled in front of every candidate by the gate, so a definition
that does not match it exactly (another parameter type, a missing ``const``, another return type) is a compile
error."""

from __future__ import annotations

from collections.abc import Iterable

from .model import KernelSpec

__all__ = ["declaration", "include_lines", "signature"]


def signature(spec: KernelSpec, name: str | None = None) -> str:
    """``cudaError_t <name>(<params>, cudaStream_t stream)``: the candidate contract's entry point."""
    params = [f"{arg.c_type()} {arg.name}" for arg in spec.args] + ["cudaStream_t stream"]
    return f"cudaError_t {name or spec.name}({', '.join(params)})"


def include_lines(dtypes: Iterable[str]) -> list[str]:
    """The ``#include`` lines the declarations of kernels with these dtypes need (C and C++)."""
    wanted = set(dtypes)
    lines = ["#include <cuda_runtime.h>"]
    if "float16" in wanted:
        lines.append("#include <cuda_fp16.h>")
    if "bfloat16" in wanted:
        lines.append("#include <cuda_bf16.h>")
    lines += [
        "#ifdef __cplusplus",
        "#include <cstdint>",
        "#else",
        "#include <stdbool.h>",
        "#include <stdint.h>",
        "#endif",
    ]
    return lines


def declaration(spec: KernelSpec) -> str:
    """A header declaring one kernel's entry point with C linkage, as the public header does."""
    lines = [*include_lines(arg.dtype for arg in spec.args), "", f'extern "C" {signature(spec)};']
    return "\n".join(lines) + "\n"
