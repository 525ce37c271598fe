"""The text checks before a generated candidate is compiled (files read at build time, PyTorch extensions), and
system calls hidden from the disassembly, with the real nvcc where a compile is involved."""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.errors import ToolchainError
from r1build.gate import StaticGate, gate_key
from r1build.gate.nvcc import compile_variant
from r1build.gate.source import source_problems
from r1build.gate.symbols import hidden_syscalls
from r1build.judge import Job
from r1build.manifest import Manifest, load_manifest
from r1build.manifest.model import KernelSpec
from r1build.records import Candidate, Origin
from r1build.toolchain.nvcc import Toolchain, toolchain

ROOT = Path(__file__).resolve().parents[2]
SILU_SIGNATURE = (
    'extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream)'
)

try:
    TOOLCHAIN: Toolchain | None = toolchain()
except ToolchainError:  # pragma: no cover - every development and CI machine has nvcc
    TOOLCHAIN = None
needs_nvcc = pytest.mark.skipif(TOOLCHAIN is None, reason="nvcc not found")
x86_64 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the assembly here is x86-64's")

# (id, text, a phrase the one problem found must hold, or None when the text is fine)
CASES: list[tuple[str, str, str | None]] = [
    ("system header", "#include <cuda_runtime.h>\n#include <cstdint>\n", None),
    ("header in a subfolder, spaced directive", "#  include <cuda/std/cmath>\n#include <cooperative_groups.h>\n", None),
    ("quoted relative header", '#include "vadd_helpers.cuh"\n', None),
    ("commented out", '// #include "/etc/passwd"\n/* #include "/etc/passwd" */\n', None),
    ("in a string", 'const char* s = "#include \\"/etc/passwd\\"";\n', None),
    ("trailing comment", "#include <cuda_runtime.h> // the runtime\n#include <cstdint> /* sizes */\n", None),
    ("device asm", 'asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));\n', None),
    ("absolute path", '#include "/etc/hostname"\n', "absolute or home path"),
    ("proc environ", '#include "/proc/self/environ"\n', "absolute or home path"),
    ("stdin", "#include </dev/stdin>\n", "absolute or home path"),
    ("home path", '#include "~/.ssh/id_rsa"\n', "absolute or home path"),
    ("windows path", '#include "C:/secrets.h"\n', "absolute or home path"),
    ("parent folder", '#include "../../../../etc/passwd"\n', "'..' segment"),
    ("odd characters", '#include "a b.h"\n', "letters, digits"),
    ("computed include", '#define SECRET "/etc/passwd"\n#include SECRET\n', "computed include"),
    ("digraph", '%:include "/etc/passwd"\n', "absolute or home path"),
    ("trigraph", '??=include "/etc/passwd"\n', "absolute or home path"),
    ("line splice", '#inc\\\nlude "/etc/passwd"\n', "absolute or home path"),
    ("comment inside the directive", '# /* hidden */ include "/etc/passwd"\n', "absolute or home path"),
    ("include_next", "#include_next </etc/passwd>\n", "absolute or home path"),
    ("import", '#import "../secret.h"\n', "'..' segment"),
    ("embed", '#embed "/etc/passwd"\n', "#embed"),
    ("has_include of a path", '#if __has_include("/home/me/.ssh/id_rsa")\n#endif\n', "probes for a file"),
    ("pragma GCC dependency", '#pragma GCC dependency "/etc/shadow"\n', "#pragma GCC dependency"),
    ("_Pragma GCC dependency", '_Pragma("GCC dependency \\"/etc/shadow\\"")\n', "#pragma GCC dependency"),
    ("has_include of a header", "#if __has_include(<cuda_fp8.h>)\n#include <cuda_fp8.h>\n#endif\n", None),
    ("torch extension", "#include <torch/extension.h>\n", "not a PyTorch or Python extension"),
    ("ATen", "#include <ATen/cuda/CUDAContext.h>\n", "not a PyTorch or Python extension"),
    ("pybind11", "#include <pybind11/pybind11.h>\n", "not a PyTorch or Python extension"),
    ("Python.h", "#include <Python.h>\n", "not a PyTorch or Python extension"),
    ("incbin", '__asm__(".section .rodata\\n.incbin \\"/etc/passwd\\"\\n.previous");\n', ".incbin, .include or .file"),
    ("assembler include", 'asm(".include \\"/etc/passwd\\"");\n', ".incbin, .include or .file"),
    ("incbin split in two literals", 'asm(".inc" "bin \\"/etc/passwd\\"");\n', ".incbin, .include or .file"),
    ("incbin in capitals", 'asm(".INCBIN \\"/etc/passwd\\"");\n', ".incbin, .include or .file"),
]


@pytest.mark.parametrize(("text", "phrase"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_source_problems(text: str, phrase: str | None) -> None:
    problems = source_problems(text)
    if phrase is None:
        assert problems == []
    else:
        assert len(problems) == 1 and phrase in problems[0], problems


def test_the_project_baselines_have_no_source_problems() -> None:
    for path in sorted((ROOT / "kernels").glob("*.cu")):
        assert source_problems(path.read_text(encoding="utf-8")) == [], path.name


def _candidate(prelude: str, *, kind: str = "generated", body: str = "") -> Candidate:
    source = (
        f"#include <cuda_runtime.h>\n#include <cstdint>\n{prelude}\n"
        f"{SILU_SIGNATURE} {{\n{body}\n    return cudaGetLastError();\n}}\n"
    )
    origin = Origin("generated", model="test") if kind == "generated" else Origin("file", "kernels/mine.cu")
    return Candidate(source, origin)


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest(ROOT / "kernels.toml")


@pytest.fixture(scope="module")
def silu(manifest: Manifest) -> KernelSpec:
    return manifest.kernel("silu_mul")


@pytest.mark.slow
@needs_nvcc
def test_the_gate_refuses_to_compile_what_reads_files(manifest: Manifest, silu: KernelSpec, tmp_path: Path) -> None:
    """A generated candidate that would read a file while compiling is rejected without a compile, with the
    reason and none of the file's text, even where a verdict from before the check is cached; the manifest's
    own sources are trusted and compiled as they are."""
    secret = tmp_path / "secret.h"
    secret.write_text("#define THE_SECRET_IS_SWORDFISH 1\n")
    reads = _candidate(f'#include "{secret}"')
    embeds = _candidate(f'__asm__(".section .rodata\\n.incbin \\"{secret}\\"\\n.previous");')
    torch = _candidate("#include <torch/extension.h>")
    mine = _candidate(f'#include "{secret}"', kind="file")
    bad_define = dataclasses.replace(_candidate(""), defines={"BLOCK": "256 (threads per block)"})
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache, jobs=1)
        assert TOOLCHAIN is not None
        # a verdict cached as passed before the check existed does not let the candidate through
        passed = dataclasses.replace(gate.judge(manifest, silu, [("sm_90", mine)])[0], candidate=embeds.digest)
        assert passed.status == "passed" and gate.compiles == 1
        cache.put_gate(gate_key(manifest, silu, "sm_90", embeds, TOOLCHAIN), passed)
        results = gate.evaluate(Job(manifest, silu, "sm_90", [reads, embeds, torch, bad_define]))
        assert gate.compiles == 1  # none of the four was compiled
    assert [r.status for r in results] == ["rejected"] * 4
    assert all(r.detail.startswith("not compiled: ") and "SWORDFISH" not in r.detail for r in results)
    assert "absolute or home path" in results[0].detail and str(secret) in results[0].detail
    assert ".incbin" in results[1].detail
    assert "not a PyTorch or Python extension" in results[2].detail
    # a define that is no plain value is a verdict, not the ValueError nvcc's command line builder raises
    assert "-DBLOCK: value '256 (threads per block)'" in results[3].detail
    verdict, cacheable = gate.compile_verdict(manifest, silu, "sm_90", reads)  # a cluster worker's view
    assert verdict.status == "rejected" and not cacheable and gate.compiles == 1


@pytest.mark.slow
@needs_nvcc
def test_nvcc_never_reads_the_callers_stdin(tmp_path: Path) -> None:
    """A trusted source that includes ``/dev/stdin`` reads nothing and does not wait on the caller's terminal
    (here a pipe that stays open): nvcc's stdin is empty."""
    assert TOOLCHAIN is not None
    read_end, write_end = os.pipe()
    saved = os.dup(0)
    try:
        os.write(write_end, b"int leaked_from_stdin;\n")
        os.dup2(read_end, 0)
        compiled = compile_variant(
            '#include "/dev/stdin"\nint kept;\n',
            {},
            "sm_90",
            name="k",
            flags=["-std=c++17"],
            toolchain=TOOLCHAIN,
            workdir=tmp_path,
            timeout_s=30,
        )
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert compiled.ok and not compiled.timed_out, compiled.output
    assert compiled.object_path is not None
    symbols = subprocess.run(["nm", str(compiled.object_path)], capture_output=True, text=True, check=True).stdout
    assert "kept" in symbols and "leaked_from_stdin" not in symbols


@x86_64
@pytest.mark.slow
@needs_nvcc
def test_a_system_call_hidden_inside_another_instruction_is_rejected(
    manifest: Manifest, silu: KernelSpec, tmp_path: Path
) -> None:
    """``jmp`` into the immediate of a ``mov`` whose bytes are ``0f 05``: objdump shows a ``mov``, the CPU runs a
    ``syscall``. The raw bytes of the host code give it away."""
    hidden = _candidate(
        "static void __attribute__((used, noinline)) sneak() {\n"
        '    __asm__ volatile("jmp 1f + 1\\n1: .byte 0xb8, 0x0f, 0x05, 0x00, 0x00" ::: "rax", "memory");\n'
        "}\n"
    )
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache, jobs=1, keep_objects=tmp_path / "objects")
        result, clean = gate.evaluate(Job(manifest, silu, "sm_90", [hidden, _candidate("")]))
    assert result.status == "rejected" and "raw system-call instructions" in result.detail, result.detail
    assert clean.status == "passed", clean.detail
    kept = gate.object_for(_candidate("").digest, "sm_90")
    assert kept is not None and hidden_syscalls(kept) == 0


def test_hidden_syscalls_reads_only_x86_64_elf_objects(tmp_path: Path) -> None:
    not_elf = tmp_path / "x.o"
    not_elf.write_bytes(b"\x0f\x05" * 64)
    assert hidden_syscalls(not_elf) == 0
    assert hidden_syscalls(tmp_path / "missing.o") == 0


LOAD_TIME = {
    "constructor": (
        "static char buf[64];\nstatic void __attribute__((constructor, used)) init() { memset(buf, 1, 64); }"
    ),
    "global object": "static char buf[64];\nstruct Fill { Fill() { memset(buf, 2, 64); } };\nstatic Fill fill;",
    "hand-made init_array entry": (
        "static char buf[64];\nstatic void __attribute__((used)) g() { memset(buf, 3, 64); }\n"
        '__attribute__((section(".init_array"), used)) static void (*entry)() = g;'
    ),
    "destructor": "static char buf[64];\nstatic void __attribute__((destructor, used)) fini() { memset(buf, 4, 64); }",
    "indirect function": (
        "static char buf[64];\nstatic int impl(int x) { return x + 1; }\n"
        'extern "C" {\nstatic void* pick() { memset(buf, 5, 64); return (void*)impl; }\n'
        'static int f(int) __attribute__((ifunc("pick"), used));\n}'
    ),
}


@pytest.mark.slow
@needs_nvcc
def test_host_code_that_runs_when_the_library_loads_is_rejected(
    manifest: Manifest, silu: KernelSpec, tmp_path: Path
) -> None:
    """Constructors, destructors and globals initialized by running code run in every process that loads the
    library, outside every check of the call: rejected, named. Ordinary code (std::vector in the launcher,
    constexpr and constant tables, a function-local static, <cooperative_groups/reduce.h>) passes, compiled
    position-independent too, as a GPU machine's gate compiles it (the object then references
    _GLOBAL_OFFSET_TABLE_, which was rejected: the same source passed without a GPU and failed with one)."""
    sources = [_candidate("#include <cstring>\n" + text) for text in LOAD_TIME.values()]
    ordinary = _candidate(
        "#include <vector>\n#include <array>\n#include <cooperative_groups/reduce.h>\n"
        "namespace {\nconstexpr std::array<int, 3> kSizes = {1, 2, 3};\n"
        "__constant__ float kCoeffs[2] = {0.5f, 1.5f};\n"
        "__global__ void k(float* y, int m) { if (threadIdx.x < m) y[threadIdx.x] *= kCoeffs[threadIdx.x % 2]; }\n}",
        body="    static int calls = 0;\n    ++calls;\n    std::vector<int> grid(2, kSizes[2]);\n"
        "    k<<<grid[0], 32, 0, stream>>>(out, grid[1]);",
    )
    with Cache(tmp_path / "cache") as cache:
        plain = StaticGate(cache, jobs=2).evaluate(Job(manifest, silu, "sm_90", [*sources, ordinary]))
    with Cache(tmp_path / "pic-cache") as cache:  # the gate key does not tell -fPIC compiles apart
        pic = StaticGate(cache, jobs=1, keep_objects=tmp_path / "objects")
        [ordinary_pic] = pic.evaluate(Job(manifest, silu, "sm_90", [ordinary]))
        assert pic.compiles == 1
    for name, result in zip(LOAD_TIME, plain[:-1], strict=True):
        assert result.status == "rejected", (name, result.detail)
        assert "runs host code when the library is loaded or unloaded" in result.detail, (name, result.detail)
    assert "init()" in plain[0].detail and "the initialization of its globals" in plain[1].detail
    assert "fini()" in plain[3].detail
    assert "the resolver of the indirect function f" in plain[4].detail
    assert plain[-1].status == "passed", plain[-1].detail
    assert ordinary_pic.status == "passed", ordinary_pic.detail


@pytest.mark.slow
@needs_nvcc
def test_the_cub_umbrella_header_is_rejected_with_what_to_include_instead(
    manifest: Manifest, silu: KernelSpec, tmp_path: Path
) -> None:
    kernel = (
        "namespace {\n__global__ void k(float* y) {\n    using BR = cub::BlockReduce<float, 128>;\n"
        "    __shared__ typename BR::TempStorage t;\n    float v = BR(t).Sum(y[threadIdx.x]);\n"
        "    if (threadIdx.x == 0) y[0] = v;\n}\n}"
    )
    body = "    k<<<1, 128, 0, stream>>>(out);"
    umbrella = _candidate("#include <cub/cub.cuh>\n" + kernel, body=body)
    narrow = _candidate("#include <cub/block/block_reduce.cuh>\n" + kernel, body=body)
    with Cache(tmp_path / "cache") as cache:
        wide, exact = StaticGate(cache, jobs=2).evaluate(Job(manifest, silu, "sm_90", [umbrella, narrow]))
    assert wide.status == "rejected" and "<cub/block/block_reduce.cuh>" in wide.detail, wide.detail
    assert exact.status == "passed", exact.detail
