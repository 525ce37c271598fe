"""The public header ``r1build_kernels.h``: one ``extern "C"`` declaration per kernel, with its provenance."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from ..manifest.model import KernelSpec
from .plan import MARKER, KernelPlan, comment_text, describe_origin

__all__ = ["HEADER_NAME", "render_header", "signature"]

HEADER_NAME = "r1build_kernels.h"


def signature(spec: KernelSpec, name: str | None = None) -> str:
    """``cudaError_t <name>(<params>, cudaStream_t stream)``: the candidate contract's entry point."""
    params = [f"{arg.c_type()} {arg.name}" for arg in spec.args] + ["cudaStream_t stream"]
    return f"cudaError_t {name or spec.name}({', '.join(params)})"


def _comment(text: str, width: int = 108) -> list[str]:
    flat = comment_text(" ".join(text.split()))
    return [f"// {line}" for line in textwrap.wrap(flat, width - 3)] or ["//"]


def render_header(plans: Sequence[KernelPlan]) -> str:
    """The header's text."""
    dtypes = {arg.dtype for p in plans for arg in p.spec.args}
    lines = [
        f"// {MARKER} from the manifest's kernels: do not edit, it is rewritten on every build.",
        "// Each kernel launches all its work on `stream` and returns the launch's error (cudaError_t).",
        "#ifndef R1BUILD_KERNELS_H_",
        "#define R1BUILD_KERNELS_H_",
        "",
        "#include <cuda_runtime.h>",
    ]
    if "float16" in dtypes:
        lines.append("#include <cuda_fp16.h>")
    if "bfloat16" in dtypes:
        lines.append("#include <cuda_bf16.h>")
    lines += [
        "#ifdef __cplusplus",
        "#include <cstdint>",
        "#else",
        "#include <stdbool.h>",
        "#include <stdint.h>",
        "#endif",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
    ]
    for p in plans:
        lines.append("")
        lines += _comment(f"{p.spec.name}: {p.spec.description}")
        for arch in p.archs:
            variant = p.variant_for(arch)
            lines.append(f"//   {arch}: {describe_origin(variant.candidate)} (variant {variant.stem})")
        lines.append(f"{signature(p.spec)};")
    lines += [
        "",
        "#ifdef __cplusplus",
        '}  // extern "C"',
        "#endif",
        "",
        "#endif  // R1BUILD_KERNELS_H_",
    ]
    return "\n".join(lines) + "\n"
