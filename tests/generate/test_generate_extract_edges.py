"""Extraction edge cases: a launcher block after a block that already defines the export, comments and literals
in signatures, and unfenced answers that start with a preprocessor directive or a definition."""

from __future__ import annotations

import re

import pytest

from r1build.gate import StaticGate
from r1build.generate.extract import complete_part, extract_source
from r1build.records import Candidate, Origin
from tests.generate.gen_support import SIGNATURE, Project, kernel_source
from tests.support.nvcc import toolchain_or_skip

OLD = kernel_source(21)
"""An earlier complete answer: its kernel, then its launcher (the export)."""
NEW = kernel_source(22)
"""The final answer: the same kernel, a new launcher (another block size)."""
OLD_KERNELS = OLD[: OLD.index(SIGNATURE)]
NEW_LAUNCHER = NEW[NEW.index(SIGNATURE) :]
INNER = SIGNATURE.replace('extern "C" ', "")


def _fence(code: str, info: str = "cuda") -> str:
    return f"```{info}\n{code.rstrip(chr(10))}\n```\n"


def _definitions(source: str, name: str = "vadd") -> int:
    """How many times ``source`` defines ``name`` (``name(...) {``, the parameter lists here hold no braces)."""
    return len(re.findall(rf"\b{name}\s*\([^;{{}}]*\)\s*\{{", source))


OLD_TAIL = OLD[OLD.index(SIGNATURE) + len(SIGNATURE) :]
"""The earlier launcher's body."""
IN_BLOCK = f'{OLD_KERNELS}extern "C" {{\n{INNER}{OLD_TAIL}}}  // extern "C"\n'
"""The earlier answer with its export in an ``extern "C" { }`` block."""
KERNEL_DECL = "__global__ void vadd_kernel(const float* a, const float* b, float* out, int64_t n)"
LAUNCHER_FIRST = (
    f"#include <cuda_runtime.h>\n#include <cstdint>\nstatic {KERNEL_DECL};\n#define OLD_THREADS 64\n"
    f"// the launcher\n{SIGNATURE} {{\n    vadd_kernel<<<1, OLD_THREADS, 0, stream>>>(a, b, out, n);\n"
    f"    return cudaSuccess;\n}}\nstatic {KERNEL_DECL} {{\n    if (n > 0) out[0] = a[0] + b[0];\n}}\n"
)
"""An earlier answer that defines its launcher before its kernel, after a directive and a comment."""
DRAFT_KERNELS = kernel_source(23)[: kernel_source(23).index(SIGNATURE)]

# (id, answer, what the blocks before the final launcher must keep): the final block is a launcher only, and the
# nearest block that defines its kernel also defines the export, in the shapes the export takes
LAUNCHER_CASES: list[tuple[str, str, str]] = [
    ("complete answer then launcher", f"{_fence(OLD)}Launch:\n{_fence(NEW_LAUNCHER, 'cpp')}", OLD_KERNELS),
    (
        'export in an extern "C" block',
        f"{_fence(IN_BLOCK)}Launch:\n{_fence(NEW_LAUNCHER)}",
        f'{OLD_KERNELS}extern "C" {{\n}}  // extern "C"\n',
    ),
    (
        "launcher defined before the kernel",
        f"{_fence(LAUNCHER_FIRST)}Now:\n{_fence(NEW_LAUNCHER)}",
        LAUNCHER_FIRST.replace(LAUNCHER_FIRST[LAUNCHER_FIRST.index(SIGNATURE) : LAUNCHER_FIRST.index("}\n") + 2], ""),
    ),
    (
        "declared, then defined",
        f"{_fence(SIGNATURE + ';' + chr(10) + OLD)}{_fence(NEW_LAUNCHER)}",
        f"{SIGNATURE};\n{OLD_KERNELS}",
    ),
    (
        "a kernel-only draft before the complete answer",
        f"{_fence(DRAFT_KERNELS)}{_fence(OLD)}{_fence(NEW_LAUNCHER)}",
        OLD_KERNELS,
    ),
]


@pytest.mark.parametrize(("answer", "kept"), [c[1:] for c in LAUNCHER_CASES], ids=[c[0] for c in LAUNCHER_CASES])
def test_a_launcher_after_a_block_that_defines_the_export_gives_one_definition(answer: str, kept: str) -> None:
    # the block that defines the kernel was put whole before the launcher, its own launcher included: the
    # export was defined twice (a compile error)
    found = extract_source(answer, "vadd")
    assert found.reason == "defines the export"
    assert found.source == kept.rstrip("\n") + "\n\n" + NEW_LAUNCHER
    assert _definitions(found.source) == 1 and found.source.count(f"{KERNEL_DECL} {{") == 1


def test_a_complete_answer_last_is_taken_whole() -> None:
    # the cut is only for the blocks put before the chosen one: a final block that is complete stays as it is
    found = extract_source(f"{_fence(NEW_LAUNCHER)}{_fence(OLD)}", "vadd")
    assert found.source == OLD


@pytest.mark.slow
def test_a_launcher_after_a_complete_answer_compiles(project: Project) -> None:
    """What extraction gives for those answers passes the real nvcc and the object checks (a second definition of
    the export failed to compile)."""
    tc = toolchain_or_skip()
    manifest = project.write()
    spec = manifest.kernel("vadd")
    sources = sorted({extract_source(answer, "vadd").source or "" for _, answer, _ in LAUNCHER_CASES})
    origin = Origin("generated", model="test")
    with project.cache() as cache:
        gate = StaticGate(cache, toolchain=tc, jobs=1)
        results = gate.judge(manifest, spec, [("sm_90", Candidate(s, origin)) for s in sources])
    assert [r.status for r in results] == ["passed"] * len(sources), [r.detail for r in results]


COMMENTED = {
    "block comment with a semicolon": ("const float* a /* n; elements */, const float* b", ""),
    "line comments with semicolons": ("const float* a,  // input; read once\n    const float* b  // b;\n", ""),
    "parentheses and braces in comments": ("const float* a /* a) { ; */, const float* b /* (b */", ""),
    "a comment before the body": ("const float* a, const float* b", " /* done; now the body */"),
    "a line comment before the body": ("const float* a, const float* b", "  // body follows; see below\n"),
}


def _commented_kernel(params: str, before_body: str) -> str:
    return (
        "#include <cuda_runtime.h>\n#include <cstdint>\n"
        f"__global__ /* one thread; one element */ void vadd_kernel({params}, float* out, int64_t n){before_body} {{\n"
        "    int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;\n"
        "    if (i < n) out[i] = a[i] + b[i];\n}\n"
    )


def _commented_export(params: str, before_body: str) -> str:
    return (
        f'extern "C" cudaError_t vadd({params}, float* out, int64_t n, cudaStream_t stream){before_body} {{\n'
        "    vadd_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(a, b, out, n);\n"
        "    return cudaGetLastError();\n}\n"
    )


@pytest.mark.parametrize(("params", "before_body"), list(COMMENTED.values()), ids=list(COMMENTED))
def test_comments_in_a_signature_do_not_hide_the_definition(params: str, before_body: str) -> None:
    # a ";" in a comment ended the parameter list for the detector: the export was not found (a draft that
    # defines it was chosen instead, or the answer fell to "has a kernel"), nor was the kernel
    kernel, export = _commented_kernel(params, before_body), _commented_export(params, before_body)
    found = extract_source(f"Draft:\n{_fence(OLD)}Final:\n{_fence(kernel + export)}", "vadd")
    assert (found.reason, found.source) == ("defines the export", kernel + export)
    assert complete_part(f"{_fence(kernel + export)}Notes that were cut", "vadd") is not None
    # the kernel in a block of its own, the launcher after it: the two are joined
    found = extract_source(f"{_fence(kernel)}Launch:\n{_fence(export)}", "vadd")
    assert found.source == kernel.rstrip("\n") + "\n\n" + export


def test_literals_in_a_signature_do_not_hide_the_definition() -> None:
    # a default argument holding ";" or ")" in a string or character literal
    source = (
        "#include <cuda_runtime.h>\n#include <cstdint>\n__global__ void k(float* x) { x[0] = 1; }\n"
        "static const char* tag(const char* s = \"a;b)\", char c = ';') { return s; }\n"
        'extern "C" cudaError_t vadd(float* x, const char* why = "n; rows)", char sep = \';\') {\n'
        "    k<<<1, 1>>>(x);\n    return cudaGetLastError();\n}\n"
    )
    found = extract_source(f"{_fence(OLD)}{_fence(source)}", "vadd")
    assert (found.reason, found.source) == ("defines the export", source)


def test_definitions_and_launches_in_comments_are_not_code() -> None:
    # a later block whose launcher is commented out does not define the export
    half = (
        "#include <cuda_fp16.h>\n__global__ void vadd_half(const __half* a, __half* out) { out[0] = a[0]; }\n"
        f"/* {SIGNATURE} {{\n    vadd_half<<<1, 1, 0, stream>>>(a, out);\n}} */\n"
        f"// {SIGNATURE} {{ return cudaSuccess; }}\n"
    )
    found = extract_source(f"Final:\n{_fence(NEW)}A half variant, kernel only:\n{_fence(half)}", "vadd")
    assert (found.reason, found.source) == ("defines the export", NEW)
    # a launch named in a comment does not bring in the draft that defines that kernel (with its export)
    noted = NEW.replace(
        "    return cudaGetLastError();",
        "    // was: old_kernel<<<grid, 64>>>(a, out);\n    return cudaGetLastError();",
    )
    draft = "__global__ void old_kernel(const float* a, float* out) {}\n" + SIGNATURE + " { return cudaSuccess; }\n"
    found = extract_source(f"{_fence(draft)}{_fence(noted)}", "vadd")
    assert found.source == noted and _definitions(found.source) == 1


UNFENCED_STARTS = {
    "#define": "#define THREADS 256\n",
    "#pragma": "#pragma once\n",
    "#include with a space": "# include <cuda_runtime.h>\n",
    "#ifndef guard": "#ifndef BLOCK\n#define BLOCK 256\n#endif\n",
    "#if 0 block": "#if 0\nold code\n#endif\n",
    "#undef": "#undef THREADS\n",
    "#error guard": "#if __CUDACC_VER_MAJOR__ < 11\n#error needs CUDA 11\n#endif\n",
    "__global__": "",
}


@pytest.mark.parametrize("start", list(UNFENCED_STARTS.values()), ids=list(UNFENCED_STARTS))
def test_an_unfenced_answer_that_starts_with_a_directive_or_a_definition_is_the_source(start: str) -> None:
    # only "#include", "//" and "/*" were taken as the start of a bare file: the rest was "no_code"
    body = NEW.replace("#include <cuda_runtime.h>\n#include <cstdint>\n", "").replace("namespace {\n", "", 1)
    source = start + body.replace("}  // namespace\n", "", 1)
    for content in (source, f"\n\n{source}", f"<think>reasoning</think>\n\n{source}", source.replace("\n", "\r\n")):
        found = extract_source(content, "vadd")
        assert (found.reason, found.source) == ("defines the export", source), content[:40]
    # a bare launcher that opens with its linkage
    assert extract_source(NEW_LAUNCHER, "vadd").source == NEW_LAUNCHER


def test_prose_that_starts_like_a_heading_is_no_code() -> None:
    # a markdown heading is no directive, whatever words follow the "#"
    for prose in (
        "# Define the kernel\nThe `__global__` function adds.",
        "# Solution\n__global__ kernels add.",
        "#hashtag __global__",
    ):
        assert extract_source(prose, "vadd").reason == "no_code", prose
