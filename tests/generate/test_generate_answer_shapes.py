"""Extraction on answers shaped like real DeepSeek-R1 answers, adapted to the candidate contract.

The table holds synthetic answers written for these tests in the shapes the real answers take (long prose,
reasoning leaking into the content with and without ``<think>`` tags, drafts before the final block, several
blocks with any language tag, fences glued to code, Python ``load_inline`` strings, CRLF, tabs, Unicode) and
says, for each, which source extraction must pick or which typed failure it must give. The last tests run the
100 real R1 answers of ``../shared/data/r1-kernelbench`` (KernelBench, PyTorch's extension interface) through
extraction in the shapes a server can deliver them, where that file exists.
"""

from __future__ import annotations

import json
import time
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

from r1build.events import Event, Note, sink
from r1build.gate import StaticGate
from r1build.generate import SearchJob, replay
from r1build.generate.extract import (
    Extraction,
    ExtractionReason,
    complete_part,
    extract_source,
    tunable_variants,
)
from r1build.records import Candidate, Origin
from r1build.toolchain.defines import define_problem
from tests.generate.chat_server import Answer, ChatServer
from tests.generate.gen_support import SIGNATURE, MarkerJudge, Project, kernel_source, search_vadd
from tests.support.nvcc import toolchain_or_skip

R1_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "r1-kernelbench" / "level1_r1_best1.jsonl"

FINAL = kernel_source(11)
"""The kernel each answer of the table means as its final answer."""
DRAFT = kernel_source(12)
"""An earlier draft of it, which extraction must not pick."""

FOUND: frozenset[str] = frozenset({"defines the export", "has a kernel", "cuda block"})
FAILED: frozenset[str] = frozenset({"no_code", "thinking_only", "empty"})


def _fence(code: str, info: str = "cuda", fence: str = "```") -> str:
    return f"{fence}{info}\n{code.rstrip(chr(10))}\n{fence}\n"


def _extern_block(source: str) -> str:
    """``source`` with its entry point defined inside an ``extern "C" { ... }`` block instead."""
    inner = SIGNATURE.replace('extern "C" ', "")
    head, _, tail = source.partition(SIGNATURE)
    return f'{head}extern "C" {{\n{inner}{tail.rstrip()}\n}}  // extern "C"\n'


FINAL_BLOCK = _extern_block(FINAL)
FINAL_CXX = FINAL.replace('extern "C" ', "")
FINAL_BARE = FINAL.replace("#include <cuda_runtime.h>\n#include <cstdint>\n", "")
PY_FINAL = (
    "import torch\nfrom torch.utils.cpp_extension import load_inline\n\n"
    f'cuda_source = r"""\n{FINAL}"""\n\n'
    'cpp_source = "cudaError_t vadd(const float*, const float*, float*, int64_t, cudaStream_t);"\n'
    "module = load_inline(name='vadd', cpp_sources=cpp_source, cuda_sources=cuda_source, verbose=False)\n"
)
REASONING = (
    "Okay, I need to write a vector add. Let me think about coalescing first.\n\n"
    "Each thread handles one element; with n up to 2^24 a grid-stride loop is not needed.\n\n"
    f"A first draft:\n\n{_fence(DRAFT)}\n"
    "Wait, the launcher must return cudaGetLastError(). Also the tail: n % 256 != 0.\n\n"
)

KERNELS = FINAL[: FINAL.index(SIGNATURE)]
"""The final answer's includes and kernel, as a block of its own."""
LAUNCHER = FINAL[FINAL.index(SIGNATURE) :]
"""The final answer's launcher, as a block of its own (it launches ``vadd_kernel``, defined in :data:`KERNELS`)."""
JOINED = KERNELS.rstrip("\n") + "\n\n" + LAUNCHER
"""What extraction makes of the two: one translation unit, the kernels first."""

# (id, answer, the source extraction must pick or None, the reason it must give)
CASES: list[tuple[str, str, str | None, ExtractionReason]] = [
    (
        "kernel block then launcher block",
        f"The kernel:\n{_fence(KERNELS)}And the host function:\n{_fence(LAUNCHER, 'cpp')}",
        JOINED,
        "defines the export",
    ),
    (
        "a draft kernel, the final kernel, then the launcher",
        f"{_fence(DRAFT[: DRAFT.index(SIGNATURE)])}Better:\n{_fence(KERNELS)}Launch:\n{_fence(LAUNCHER)}",
        JOINED,
        "defines the export",
    ),
    (
        "launcher block then kernel block",
        f"Entry point:\n{_fence(LAUNCHER)}which launches:\n{_fence(KERNELS)}",
        JOINED,
        "defines the export",
    ),
    (
        "a launcher whose kernel is nowhere",
        f"Entry point:\n{_fence(LAUNCHER)}",
        LAUNCHER,
        "defines the export",
    ),
    (
        "prose around one block",
        f"Here is the kernel.\n\n{_fence(FINAL)}\nIt handles the tail.",
        FINAL,
        "defines the export",
    ),
    (
        "drafts, usage and final",
        f"Draft:\n{_fence(DRAFT)}Usage:\n{_fence('vadd(a, b, out, n, stream);', 'cpp')}"
        f"Final:\n{_fence(FINAL)}Call it:\n{_fence('lib.vadd(a, b, out, n, 0)', 'python')}",
        FINAL,
        "defines the export",
    ),
    ("think tags in content", f"<think>\n{REASONING}</think>\n\n{_fence(FINAL)}", FINAL, "defines the export"),
    ("think closed without opening", f"{REASONING}</think>\n\nFinal:\n{_fence(FINAL)}", FINAL, "defines the export"),
    (
        "reasoning leaked without tags",
        f"{REASONING}**Final answer**\n\n{_fence(FINAL)}Done.",
        FINAL,
        "defines the export",
    ),
    (
        "think mentioned in the reasoning",
        f"<think>no </think> yet {REASONING}</think>\n{_fence(FINAL)}",
        FINAL,
        "defines the export",
    ),
    ("byte order mark before think", f"\ufeff<think>{REASONING}</think>{_fence(FINAL)}", FINAL, "defines the export"),
    ("unterminated think", f"<think>\n{REASONING}", None, "thinking_only"),
    ("unterminated think with BOM", f"\ufeff  <think>\n{REASONING}", None, "thinking_only"),
    ("empty", "", None, "empty"),
    ("whitespace after think", "<think>x</think>\n\n  \n", None, "thinking_only"),
    ("prose only", "I cannot write this kernel without more detail about `__global__` launch bounds.", None, "no_code"),
    ("empty cuda blocks", "Here:\n```cuda\n```\n```cuda\n   \n```\n", None, "no_code"),
    (
        "a new block opened before the last was closed",
        f"Draft:\n```cuda\n{DRAFT}\nActually, final:\n{_fence(FINAL)}",
        FINAL,
        "defines the export",
    ),
    ("python only", _fence("import torch\nprint(torch.add(a, b))\n", "python"), None, "no_code"),
    ("untagged fence", _fence(FINAL, ""), FINAL, "defines the export"),
    ("language cu", _fence(FINAL, "cu"), FINAL, "defines the export"),
    ("language c++", _fence(FINAL, "c++"), FINAL, "defines the export"),
    ("language cpp", _fence(FINAL, "cpp"), FINAL, "defines the export"),
    ("language CUDA", _fence(FINAL, "CUDA"), FINAL, "defines the export"),
    ("language in braces", _fence(FINAL, "{.cuda}"), FINAL, "defines the export"),
    ("info with a title", _fence(FINAL, 'cuda title="vadd.cu"'), FINAL, "defines the export"),
    ("info with a file name", _fence(FINAL, "cu:kernels/vadd.cu"), FINAL, "defines the export"),
    ("tildes", _fence(FINAL, "c++", "~~~~"), FINAL, "defines the export"),
    (
        "markdown block holding a draft",
        f"````markdown\n{_fence(DRAFT)}````\n{_fence(FINAL)}",
        FINAL,
        "defines the export",
    ),
    (
        "indented with spaces in a list",
        "1. The kernel:\n\n   ```cuda\n" + "".join(f"   {ln}\n" for ln in FINAL.splitlines()) + "   ```\n",
        FINAL,
        "defines the export",
    ),
    (
        "indented with tabs",
        "-\n\t```cuda\n" + "".join(f"\t{ln}\n" for ln in FINAL.splitlines()) + "\t```\n",
        FINAL,
        "defines the export",
    ),
    ("unterminated final block", f"{REASONING}</think>\nFinal:\n```cuda\n{FINAL}", FINAL, "defines the export"),
    (
        "CRLF line endings",
        f"Final:\r\n{_fence(FINAL)}Done.\r\n".replace("\n", "\r\n").replace("\r\r", "\r"),
        FINAL,
        "defines the export",
    ),
    (
        "closing fence glued to the code",
        f"Final:\n```cuda\n{FINAL.rstrip()}```\nIt launches on the stream.\n{_fence('vadd(a, b, out, n, s);', 'cpp')}",
        FINAL,
        "defines the export",
    ),
    (
        "code on the opening fence line",
        "```cuda " + FINAL + "```\n",
        FINAL,
        "defines the export",
    ),
    (
        'extern "C" block after a draft',
        f"{REASONING}Final:\n{_fence(FINAL_BLOCK)}",
        FINAL_BLOCK,
        "defines the export",
    ),
    (
        'final without extern "C" after a draft with it',
        f"{REASONING}The header's declaration gives it C linkage, so:\n{_fence(FINAL_CXX)}",
        FINAL_CXX,
        "defines the export",
    ),
    ("missing includes", f"No includes needed:\n{_fence(FINAL_BARE)}", FINAL_BARE, "defines the export"),
    (
        "declaration block after the final",
        f"{_fence(FINAL)}The declaration for the header:\n{_fence(SIGNATURE + ';', 'cpp')}",
        FINAL,
        "defines the export",
    ),
    ("load_inline string", f"Final:\n{_fence(PY_FINAL, 'python')}", FINAL, "defines the export"),
    (
        "load_inline f-string with doubled braces",
        _fence('src = f"""\n' + FINAL.replace("{", "{{").replace("}", "}}") + '"""\n', "python"),
        FINAL,
        "defines the export",
    ),
    (
        "load_inline with single quotes, mislabelled",
        _fence(f"cuda_source = '''\n{FINAL}'''\nmod = load_inline(name='x', cuda_sources=cuda_source)\n", "text"),
        FINAL,
        "defines the export",
    ),
    (
        "template kernel",
        _fence(
            FINAL.replace("namespace {\n__global__", "namespace {\ntemplate <int VEC>\n__global__").replace(
                "vadd_kernel<<<", "vadd_kernel<1><<<"
            )
        ),
        FINAL.replace("namespace {\n__global__", "namespace {\ntemplate <int VEC>\n__global__").replace(
            "vadd_kernel<<<", "vadd_kernel<1><<<"
        ),
        "defines the export",
    ),
    (
        "unicode and control characters kept byte for byte",
        _fence(
            FINAL.replace("namespace {", "// Größe “n” \u2192 ⌈n/256⌉ blocks \U0001f680\x0c\u2028page\nnamespace {")
        ),
        FINAL.replace("namespace {", "// Größe “n” \u2192 ⌈n/256⌉ blocks \U0001f680\x0c\u2028page\nnamespace {"),
        "defines the export",
    ),
    (
        "torch extension answer without the export",
        _fence(
            "#include <torch/extension.h>\n__global__ void add_kernel(const float* a, float* o, int n) {}\n"
            "torch::Tensor add_cuda(torch::Tensor a) { return a; }\n",
            "cpp",
        ),
        "#include <torch/extension.h>\n__global__ void add_kernel(const float* a, float* o, int n) {}\n"
        "torch::Tensor add_cuda(torch::Tensor a) { return a; }\n",
        "has a kernel",
    ),
    (
        "host code only",
        _fence("#include <cuda_runtime.h>\nstatic cudaStream_t s;\n", "cpp"),
        "#include <cuda_runtime.h>\nstatic cudaStream_t s;\n",
        "cuda block",
    ),
    ("a bare file", FINAL, FINAL, "defines the export"),
    ("a bare file with CRLF", FINAL.replace("\n", "\r\n"), FINAL, "defines the export"),
    ("inline code only", "Use `__global__ void k()` with ```cuda __global__ void k(){}``` inline.", None, "no_code"),
]


def _well_formed(found: Extraction) -> None:
    """A candidate (one translation unit, no fences, no CRs, ending in a newline) or a typed failure."""
    assert found.reason in typing.get_args(ExtractionReason)
    if found.source is None:
        assert found.reason in FAILED
        return
    assert found.reason in FOUND
    assert found.source.strip() and found.source.endswith("\n")
    assert "\r" not in found.source.replace("\r\n", "")
    assert not any(line.strip().startswith(("```", "~~~")) for line in found.source.split("\n"))


@pytest.mark.parametrize(("content", "source", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_answer_shapes(content: str, source: str | None, reason: ExtractionReason) -> None:
    found = extract_source(content, "vadd")
    _well_formed(found)
    assert (found.source, found.reason) == (source, reason)


def test_the_table_has_no_duplicate_ids() -> None:
    assert len({c[0] for c in CASES}) == len(CASES)


def _degenerate_export(k: int) -> str:
    return "```cuda\n__global__ void k() {}\n" + 'extern "C" cudaError_t vadd(const float* a,\n' * k + "```\n"


def _launches_without_end(k: int) -> str:
    """Drafts, then a launcher in a repetition loop that launches ``k`` kernels no block defines."""
    drafts = "```cuda\n__global__ void q(float* x) {}\n```\n" * 200
    launches = "".join(f"  k{i}<<<1, 1>>>(x);\n" for i in range(k))
    return drafts + '```cuda\nextern "C" void vadd(float* x) {\n' + launches + "}\n```\n"


@pytest.mark.parametrize(
    ("label", "make", "limit_s"),
    [
        # each took minutes to hours before (a regular expression that backtracked over the whole answer, a
        # re-parse of the answer for every fence): an answer in a repetition loop must not stall the search
        ("signature repeated without end", lambda: _degenerate_export(4000), 2.0),
        ("opening fences only", lambda: "```cuda\n" * 20000, 2.0),
        ("fences glued to prose", lambda: "see ```\n" * 20000, 2.0),
        ("2 MB of reasoning", lambda: f"<think>{REASONING * 4000}</think>{_fence(FINAL)}", 2.0),
        # each launched name was looked for in the launcher and every other block (8000 names: 36 s)
        ("kernels launched without end", lambda: _launches_without_end(8000), 2.0),
    ],
)
def test_huge_and_degenerate_answers_are_read_in_linear_time(
    label: str, make: Callable[[], str], limit_s: float
) -> None:
    content = make()
    start = time.process_time()  # this process's CPU seconds: a loaded machine (xdist, CI) does not inflate them
    found = extract_source(content, "vadd")
    kept = complete_part(content, "vadd")
    elapsed = time.process_time() - start
    _well_formed(found)
    assert elapsed < limit_s, f"{label}: {elapsed:.1f} CPU s for {len(content):,} characters"
    if label == "2 MB of reasoning":
        assert found.source == FINAL and kept == content


def test_complete_part_ignores_code_inside_the_thinking() -> None:
    # cut off in the final block: the draft in the reasoning is not complete code of the answer
    cut = f"{REASONING}</think>\nFinal:\n```cuda\n{FINAL[:200]}"
    assert complete_part(cut, "vadd") is None
    done = f"<think>{REASONING}</think>\nFinal:\n{_fence(FINAL)}More prose that was cut"
    kept = complete_part(done, "vadd")
    assert kept is not None and kept.endswith("```\n") and extract_source(kept, "vadd").source == FINAL
    glued = f"Final:\n```cuda\n{FINAL.rstrip()}```\nMore prose that was"
    assert complete_part(glued, "vadd") == f"Final:\n```cuda\n{FINAL.rstrip()}```\n"


def test_tunable_declarations_with_prose_give_only_plain_values() -> None:
    """``// @tunable`` lines as a model writes them, with remarks: each value that is no plain number or
    identifier is left out (it reached nvcc's command line, whose builder raised, ending the search)."""
    guards = "".join(f"#ifndef {n}\n#define {n} 1\n#endif\n" for n in ("BLOCK", "VEC", "MODE", "BAD"))
    source = (
        "// @tunable BLOCK: 128, 256 (threads per block)\n"
        '// @tunable VEC: 1, 2; "4" is too wide\n'
        "// @tunable MODE: kFast, kSafe // which path\n"
        '// @tunable BAD: "a b", 1 << 8, -DEVIL\n' + guards
    )
    variants = tunable_variants(source, {})
    assert {v["BLOCK"] for v in variants} == {128, 256}
    assert {v["VEC"] for v in variants} == {1, 2}
    assert {v["MODE"] for v in variants} == {"kFast", "kSafe"}
    assert all("BAD" not in v for v in variants)
    assert all(define_problem(k, x) is None for v in variants for k, x in v.items())


def _rows() -> list[dict[str, typing.Any]]:
    return [json.loads(line) for line in R1_DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.skipif(not R1_DATA.is_file(), reason=f"the real R1 answers are not available at {R1_DATA}")
def test_every_real_answer_in_every_delivered_shape() -> None:
    """Each real answer as a server can deliver it: reasoning separate, inline in ``<think>``, leaked without
    tags, with CRLF, cut off mid-answer, reasoning only. Extraction never raises; each result is a well-formed
    candidate or a typed failure; where the final block is whole, the candidate is its CUDA string."""
    rows = _rows()
    assert len(rows) == 100
    for row in rows:
        code, reasoning = row["answer_code"], row["reasoning"]
        answer = f"The optimized model:\n\n```python\n{code}\n```\n\nThe kernel fuses the operation."
        shapes = {
            "separate": answer,
            "think": f"<think>\n{reasoning}\n</think>\n\n{answer}",
            "leaked": f"{reasoning}\n\n{answer}",
            "crlf": f"<think>\n{reasoning}\n</think>\n\n{answer}".replace("\n", "\r\n"),
            "cut": f"<think>\n{reasoning}\n</think>\n\n{answer[: len(answer) // 2]}",
            "reasoning only": f"<think>\n{reasoning}",
        }
        found = {shape: extract_source(content, "unused_name") for shape, content in shapes.items()}
        for shape, extraction in found.items():
            _well_formed(extraction)
            assert complete_part(shapes[shape], "unused_name") is None, (row["problem"], shape)
        whole = found["separate"].source
        assert whole is not None and "__global__" in whole, row["problem"]
        assert all(found[s].source == whole for s in ("think", "leaked", "crlf")), row["problem"]
        assert found["reasoning only"].reason == "thinking_only", row["problem"]


@pytest.mark.slow
@pytest.mark.heavy  # every extracted answer compiled: 16 s
def test_extracted_answers_compile_and_real_answers_are_refused_without_a_compile(project: Project) -> None:
    """What extraction picks is what the gate judges: the sources the table's answers must extract to (the
    final kernel in every layout, with its entry point in an extern "C" block and without extern "C", without
    its includes (the declaration pre-included brings them), a template, Unicode and control characters in a
    comment) pass the real nvcc and object checks; the real
    KernelBench answers (PyTorch extensions) are rejected, each with the reason, before any compile."""
    tc = toolchain_or_skip()
    manifest = project.write()
    spec = manifest.kernel("vadd")
    sources = sorted({s for _, _, s, reason in CASES if s is not None and reason == "defines the export"} - {LAUNCHER})
    assert len(sources) == 7 and JOINED in sources  # (a launcher whose kernel is nowhere cannot compile)
    with project.cache() as cache:
        gate = StaticGate(cache, toolchain=tc, jobs=1)
        origin = Origin("generated", model="test")
        results = gate.judge(manifest, spec, [("sm_90", Candidate(s, origin)) for s in sources])
        assert [r.status for r in results] == ["passed"] * 7, [r.detail for r in results]
        if not R1_DATA.is_file():
            return
        real = [extract_source(f"```python\n{row['answer_code']}\n```", "vadd").source for row in _rows()]
        verdicts = gate.judge(manifest, spec, [("sm_90", Candidate(s or "", origin)) for s in real])
        assert gate.compiles == 7
    assert all(v.status == "rejected" and "not a PyTorch or Python extension" in v.detail for v in verdicts)


@pytest.mark.slow
def test_a_search_over_answers_of_every_shape_keeps_each_candidate_and_counts_each_failure(
    project: Project, judge: MarkerJudge
) -> None:
    """Answers in the real shapes, through a real local server and the whole search: each with code becomes its
    candidate, each without is counted as ``no_code`` with its reason in a warning (never a traceback), and
    replay of the stored transcripts extracts the same candidates."""
    manifest = project.write(budget={"rounds": 1, "samples": 7, "candidates": 20}, generation={"max-concurrency": 2})
    finals = [kernel_source(30 + i) for i in range(4)]
    replies = [
        Answer(f"<think>\n{REASONING}</think>\n\nFinal:\n```cuda\n{finals[0].rstrip()}```\nDone."),
        Answer(
            f"Final:\n{_fence(PY_FINAL.replace(FINAL, finals[1]), 'python')}".replace("\n", "\r\n"),
            reasoning=REASONING,
        ),
        Answer(f"{REASONING}</think>\n```cuda #include <cuda_runtime.h>\n{finals[2].split(chr(10), 1)[1]}```\n"),
        Answer(f"{REASONING}\n**Answer**\n{_fence(_extern_block(finals[3]))}"),
        Answer(f"<think>\n{REASONING}"),
        Answer("I would need to know the data layout before writing this kernel."),
        Answer("Thinking out loud. " * 50_000),
    ]
    counter = iter(range(100))
    events: list[Event] = []
    with ChatServer(lambda r: replies[next(counter)]) as server, project.cache() as cache, sink(events.append):
        outcome = search_vadd(manifest, cache, server.url, evaluator=judge)
    # (samples run two at a time, so which sample got which reply is not fixed)
    assert sorted(c.source for c in outcome.candidates) == sorted([*finals[:3], _extern_block(finals[3])])
    assert outcome.usage.failures.get("no_code") == 3
    warnings = [e.message for e in events if isinstance(e, Note) and "no CUDA code block" in e.message]
    # (the messages name their samples, which differ between runs: their kinds are compared, in any order)
    assert sorted(w.rsplit("(", 1)[1] for w in warnings) == ["no_code)", "no_code)", "thinking_only)"]
    with project.cache() as cache:
        again = replay(
            SearchJob(manifest, manifest.kernel("vadd"), "sm_90", evaluator=MarkerJudge(), cache=cache),
            outcome.transcripts,
        )
    assert [c.digest for c in again.candidates] == [c.digest for c in outcome.candidates]
    assert again.usage.failures.get("no_code") == 3
