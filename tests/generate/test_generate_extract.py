"""Extraction of candidates from answers, normalized digests, tunable variants."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from r1build.generate.extract import (
    complete_part,
    extract_source,
    fenced_blocks,
    normalized_digest,
    strip_think,
    tunable_variants,
)
from tests.generate.gen_support import SIGNATURE, kernel_source

R1_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "r1-kernelbench" / "level1_r1_best1.jsonl"


def test_strip_think() -> None:
    assert strip_think("<think>a ```cuda x``` b</think>\n\nanswer") == "\n\nanswer"
    assert strip_think("reasoning without the opening tag</think>answer") == "answer"
    assert strip_think("<think>still thinking when the tokens ran out") == ""
    assert strip_think("plain answer") == "plain answer"
    # the answer's own text may name the tag (its prose, a string in its code): the reasoning ended at the first
    assert strip_think('<think>r</think>code "</think>" more') == 'code "</think>" more'


def test_last_block_that_defines_the_export_wins() -> None:
    draft = kernel_source(1)
    final = kernel_source(2)
    content = (
        "First a draft:\n```cuda\n" + draft + "```\n"
        "A usage note:\n```cpp\nvadd(a, b, out, n, stream);\n```\n"
        "The final version:\n```cuda\n" + final + "```\n"
        "How to call it:\n```python\nlib.vadd(a, b, out, n, 0)\n```\n"
    )
    found = extract_source(content, "vadd")
    assert found.source == final
    assert found.blocks == 4
    assert found.reason == "defines the export"


def test_fences_of_any_style() -> None:
    src = kernel_source(3)
    indented = "1. The code:\n\n    ```cu\n" + "".join("    " + line + "\n" for line in src.splitlines()) + "    ```\n"
    assert extract_source(indented, "vadd").source == src
    tildes = "~~~~c++\n" + src + "~~~~\n"
    assert extract_source(tildes, "vadd").source == src
    untagged = "```\n" + src + "```"
    assert extract_source(untagged, "vadd").source == src
    unclosed = "Final answer:\n```cuda\n" + src
    assert extract_source(unclosed, "vadd").source == src
    blocks = fenced_blocks(unclosed)
    assert len(blocks) == 1 and not blocks[0].closed


def test_code_inside_think_is_not_the_answer() -> None:
    draft = kernel_source(4)
    final = kernel_source(5)
    content = f"<think>Let me try\n```cuda\n{draft}```\nhmm, better:</think>\n\n```cuda\n{final}```"
    assert extract_source(content, "vadd").source == final
    assert extract_source(f"<think>```cuda\n{draft}```", "vadd").reason == "thinking_only"


def test_answers_without_code() -> None:
    assert extract_source("I cannot do that.", "vadd").source is None
    assert extract_source("I cannot do that.", "vadd").reason == "no_code"
    assert extract_source("```python\nprint('hi')\n```", "vadd").reason == "no_code"
    assert extract_source("", "vadd").reason == "empty"


def test_fallbacks_without_the_export() -> None:
    kernel_only = "```cuda\n__global__ void k(float* x) { x[0] = 1; }\n```\n```cuda\nint helper();\n```"
    found = extract_source(kernel_only, "vadd")
    assert found.source is not None and "__global__" in found.source
    assert found.reason == "has a kernel"
    bare = kernel_source(6)
    assert extract_source(bare, "vadd").source == bare  # a whole answer that is just the file


def test_cuda_inside_a_python_string() -> None:
    cuda = kernel_source(7)
    content = (
        "```python\nimport torch\nfrom torch.utils.cpp_extension import load_inline\n"
        f'source = """\n{cuda}"""\n'
        'cpp = "torch::Tensor vadd(torch::Tensor a);"\nmod = load_inline(name="x", cuda_sources=source)\n```'
    )
    assert extract_source(content, "vadd").source == cuda


def test_normalized_digest_ignores_comments_and_layout_not_strings() -> None:
    a = 'int f() { return 1; } // one\n/* block */ const char* s = "a  b";\n'
    b = 'int f()   {\n  return 1;\n}\nconst char* s = "a  b"; // other comment\n'
    c = 'int f() { return 1; }\nconst char* s = "a b";\n'
    d = 'int f() { return 1; }\nconst char* s = "a // not a comment  b";\n'
    assert normalized_digest(a) == normalized_digest(b)
    assert normalized_digest(a) != normalized_digest(c)
    assert normalized_digest(d) != normalized_digest('int f() { return 1; }\nconst char* s = "a ";\n')


def test_tunable_variants() -> None:
    guarded = "#ifndef BLOCK\n#define BLOCK 256\n#endif\n// @tunable VEC: 1, 2, 4\n#ifndef VEC\n#define VEC 4\n#endif\n"
    assert tunable_variants(guarded, {"BLOCK": [128, 256]}) == [
        {"BLOCK": 128, "VEC": 1},
        {"BLOCK": 128, "VEC": 2},
        {"BLOCK": 128, "VEC": 4},
        {"BLOCK": 256, "VEC": 1},
        {"BLOCK": 256, "VEC": 2},
        {"BLOCK": 256, "VEC": 4},
    ]
    # a spec tunable the source does not guard is not passed (it would be redefined, or mean nothing)
    assert tunable_variants("#define BLOCK 256\n", {"BLOCK": [128, 256]}) == [{}]
    # a declared tunable without a guard is ignored
    assert tunable_variants("// @tunable T: 1, 2\n#define T 1\n", {}) == [{}]
    many = "".join(f"// @tunable P{i}: 1, 2, 3\n#ifndef P{i}\n#define P{i} 1\n#endif\n" for i in range(4))
    assert len(tunable_variants(many, {})) == 8
    assert tunable_variants("#if !defined(TILE)\n#define TILE 16\n#endif\n", {"TILE": [16, 32]}) == [
        {"TILE": 16},
        {"TILE": 32},
    ]


@pytest.mark.skipif(not R1_DATA.is_file(), reason=f"real R1 answers not available at {R1_DATA}")
def test_real_r1_answers() -> None:
    """On 100 real R1 answers (reasoning full of drafts, the final code last), extraction finds the CUDA source
    of the final answer, with the reasoning delivered separately and inline in <think> alike."""
    rows = [json.loads(line) for line in R1_DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) >= 100
    for row in rows:
        code = row["answer_code"]
        strings = [m.group(2) for m in re.finditer(r"(\"\"\"|''')(.*?)\1", code, re.S) if "__global__" in m.group(2)]
        content = f"The optimized model:\n\n```python\n{code}\n```\n\nThis fuses the operation into one kernel."
        separate = extract_source(content, "unused_name")
        inline = extract_source(f"<think>\n{row['reasoning']}\n</think>\n\n{content}", "unused_name")
        assert separate.source is not None, row["problem"]
        assert separate.source == inline.source, row["problem"]
        assert separate.source.strip() == strings[-1].strip(), row["problem"]
        # the reasoning alone (as a server without a reasoning parser truncated at max_tokens would send it)
        # never yields a candidate
        assert extract_source(f"<think>\n{row['reasoning']}", "unused_name").source is None


def test_signature_helper_matches_the_project_kernel() -> None:
    assert SIGNATURE in kernel_source(0)


MISTAGGED = """#include <cuda_runtime.h>
__global__ void k(float* x) {}
extern "C" cudaError_t vadd(float* x, cudaStream_t s) { k<<<1, 1, 0, s>>>(x); return cudaGetLastError(); }
"""


def test_cuda_tagged_as_python_by_mistake_is_the_candidate_and_python_naming_cuda_is_not() -> None:
    found = extract_source(f"The kernel:\n```python\n{MISTAGGED}```\n", "vadd")
    assert found.reason == "defines the export" and found.source is not None and "__global__" in found.source
    python = "```python\nimport torch\n# a __global__ kernel with cudaStream_t\ndef vadd(x):\n    return x\n```\n"
    assert extract_source(python, "vadd").source is None


def test_a_diff_of_the_kernel_is_no_candidate() -> None:
    diff = "".join(f"+{line}\n" for line in MISTAGGED.splitlines())
    assert extract_source(f"The change:\n```diff\n{diff}```\n", "vadd").source is None
    assert extract_source(f"```cuda\n{MISTAGGED}```\nThe change:\n```diff\n{diff}```\n", "vadd").source == MISTAGGED


def test_an_answer_wrapped_in_a_longer_markdown_fence_gives_the_code_inside_it() -> None:
    code = 'extern "C" int vadd(const float* a, float* c, int n, cudaStream_t s) {\n    return 0;\n}\n'
    for outer in ("````markdown", "````md", "````", "~~~~markdown"):
        close = outer[:4]
        answer = f"Here it is.\n\n{outer}\n# Notes\n\nSome prose.\n\n```cuda\n{code}```\n\nMore prose.\n{close}\n"
        got = extract_source(answer, "vadd")
        assert got.reason == "defines the export" and got.source == code, (outer, got)
    # a plain untagged block of code stays what it is, and a markdown block with no fences inside is no source
    assert extract_source(f"```\n#include <cuda_runtime.h>\n{code}```\n", "vadd").source == (
        f"#include <cuda_runtime.h>\n{code}"
    )
    assert extract_source("````markdown\n# just notes\n````\n", "vadd").source is None


SHORT = """#include <cuda_runtime.h>
extern "C" cudaError_t vadd(float* x, cudaStream_t s);
__global__ void k(float* x);
extern "C" cudaError_t vadd(float* x, cudaStream_t s) {
    k<<<1, 1, 0, s>>>(x);
    return cudaGetLastError();
}
__global__ void k(float* x) { x[0] = 1; }
"""


def test_a_short_source_that_declares_before_it_defines_is_found_whole() -> None:
    # only the first occurrence of a name was looked at in a source under 1000 characters: the export was not
    # found, and a draft that defines the kernel was put before the final one (a duplicate definition)
    draft = "```cuda\n__global__ void k(float* x) { /* draft */ }\n```\n"
    found = extract_source(f"{draft}The final kernel:\n```cuda\n{SHORT}```\n", "vadd")
    assert found.reason == "defines the export" and found.source == SHORT
    assert complete_part(f"```cuda\n{SHORT}```\nThis launches one thr", "vadd") is not None


def test_a_long_run_of_fence_characters_before_a_backtick_takes_linear_time() -> None:
    # each split of the run between the fence and the info string was tried (200,000 characters: minutes)
    for line in ("~" * 200_000 + "`", "~~~" + " " * 200_000 + "`", "```" + " \t" * 100_000 + "`"):
        start = time.process_time()
        found = extract_source(f"{line}\n```cuda\n{SHORT}```\n", "vadd")
        assert time.process_time() - start < 2.0
        assert found.source == SHORT


def test_a_truncated_markdown_document_keeps_its_complete_code_block() -> None:
    # complete_part looked at the outer fences only: the ````markdown block was unclosed, so nothing was complete
    content = f"Here it is.\n\n````markdown\n# Notes\n\n```cuda\n{SHORT}```\n\nThe kernel uses one thr"
    kept = complete_part(content, "vadd")
    assert kept == content[: content.index("```\n\nThe") + 3] + "\n"
    assert extract_source(kept, "vadd").source == extract_source(content, "vadd").source == SHORT


def test_code_on_the_opening_fence_line_is_kept() -> None:
    kernel = "__global__ void k(float* x) { x[0] = 1; }"
    launcher = 'extern "C" cudaError_t vadd(float* x, cudaStream_t s) { k<<<1, 1, 0, s>>>(x); return cudaSuccess; }'
    for first in (kernel, "// @tunable BLOCK: 128, 256", "/* v2 */", "template <int N> " + kernel):
        found = extract_source(f"```cuda {first}\n{launcher}\n```\n", "vadd")
        assert found.source == f"{first}\n{launcher}\n", first
    # an info string that is no code stays the tag
    assert extract_source(f"```cuda title=kernel.cu\n{SHORT}```\n", "vadd").source == SHORT
