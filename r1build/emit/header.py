"""The public header ``r1build_kernels.h``: one ``extern "C"`` declaration per kernel, with its provenance."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from ..manifest.cdecl import include_lines, signature
from .plan import MARKER, KernelPlan, comment_text, describe_origin

__all__ = ["HEADER_NAME", "render_header", "signature"]

HEADER_NAME = "r1build_kernels.h"


def _comment(text: str, width: int = 108) -> list[str]:
    flat = comment_text(" ".join(text.split()))
    return [f"// {line}" for line in textwrap.wrap(flat, width - 3)] or ["//"]


def render_header(plans: Sequence[KernelPlan]) -> str:
    """The header's text."""
    lines = [
        f"// {MARKER} from the manifest's kernels: do not edit, it is rewritten on every build.",
        "// Each kernel launches all its work on `stream` and returns the launch's error (cudaError_t).",
        "#ifndef R1BUILD_KERNELS_H_",
        "#define R1BUILD_KERNELS_H_",
        "",
        *include_lines(arg.dtype for p in plans for arg in p.spec.args),
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
    ]
    for p in plans:
        lines.append("")
        lines += _comment(f"{p.entry}: {p.spec.description}")
        for arch in p.archs:
            variant = p.variant_for(arch)
            lines.append(f"//   {arch}: {describe_origin(variant.candidate)} (variant {variant.stem})")
        lines.append(f"{signature(p.spec, p.entry)};")
    lines += [
        "",
        "#ifdef __cplusplus",
        '}  // extern "C"',
        "#endif",
        "",
        "#endif  // R1BUILD_KERNELS_H_",
    ]
    return "\n".join(lines) + "\n"
