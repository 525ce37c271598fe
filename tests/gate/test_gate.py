"""The static gate with the real nvcc: reports, compile errors, the symbol allowlist, limits and the cache."""

from __future__ import annotations

import dataclasses
import platform
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.errors import ToolchainError
from r1build.events import Event, Progress, Stage, sink
from r1build.gate import StaticGate, gate_for_archs, is_allowed, parse_ptxas_report
from r1build.gate.nvcc import COMPILE_SLOTS, compile_variant, split_ptxas_report
from r1build.gate.symbols import denied_reason
from r1build.judge import Job
from r1build.manifest import Limits, Manifest, load_manifest
from r1build.manifest.model import KernelSpec
from r1build.records import Candidate, Origin, Result
from r1build.toolchain.nvcc import Toolchain
from tests.gate.gate_support import NEEDS_NVCC, ROOT, TOOLCHAIN
from tests.support.shared import once_per_run

pytestmark = NEEDS_NVCC

SILU_SIGNATURE = (
    'extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream)'
)


def silu_candidate(body: str, *, prelude: str = "", kernel: str = "", **defines: int | str) -> Candidate:
    """A silu_mul candidate whose launcher runs ``body`` (plus an optional kernel in an anonymous namespace)."""
    source = (
        "#include <cuda_runtime.h>\n#include <cstdint>\n"
        f"{prelude}\n"
        f"namespace {{\n{kernel}\n}}  // namespace\n"
        f"{SILU_SIGNATURE} {{\n{body}\n    return cudaGetLastError();\n}}\n"
    )
    return Candidate(source, Origin("generated", model="test"), dict(defines))


SPILLING_KERNEL = """
#ifndef BOUND
#define BOUND 1024
#endif
__global__ void __launch_bounds__(BOUND) heavy(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = x[(threadIdx.x + i * 131) % n];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i * 7 + r + 1) % 64] + 1.0f;
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; ++i) s += acc[i] * (i + 1);
    y[threadIdx.x % n] = s;
}
"""
HEAVY = silu_candidate("    heavy<<<1, BOUND, 0, stream>>>(gate, out, n);", kernel=SPILLING_KERNEL)


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest(ROOT / "kernels.toml")


@pytest.fixture(scope="module")
def silu(manifest: Manifest) -> KernelSpec:
    return manifest.kernel("silu_mul")


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate-cache")


@pytest.fixture
def cache(cache_path: Path) -> Iterator[Cache]:
    with Cache(cache_path) as c:
        yield c


def baseline(manifest: Manifest, spec: KernelSpec, **defines: int | str) -> Candidate:
    assert spec.baseline is not None
    return Candidate((manifest.root / spec.baseline).read_text(), Origin("baseline", spec.baseline), dict(defines))


@pytest.fixture(scope="module")
def baseline_results(manifest: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Result]:
    """Every root baseline (and matmul with TILE=32) gated for sm_80 and sm_90, in one cache for the test run: the
    worker that asks first compiles, one that asks later finds every verdict there."""
    out: dict[tuple[str, str], Result] = {}
    with once_per_run(tmp_path_factory, "gate-baselines") as (folder, made), Cache(folder / "cache") as c:
        gate = StaticGate(c)
        for spec in manifest.kernels:
            variants = [baseline(manifest, spec)]
            if spec.name == "matmul":
                variants.append(baseline(manifest, spec, TILE=32))
            pairs = [(arch, cand) for arch in ("sm_80", "sm_90") for cand in variants]
            for (arch, cand), result in zip(pairs, gate.judge(manifest, spec, pairs), strict=True):
                out[(f"{spec.name}{cand.defines.get('TILE', '')}", arch)] = result
        assert len(out) == 14 and gate.compiles == (0 if made else 7)  # one nvcc per variant for both archs
    return out


def test_root_baselines_pass_with_sane_reports(baseline_results: dict[tuple[str, str], Result]) -> None:
    assert TOOLCHAIN is not None
    for (name, arch), result in baseline_results.items():
        assert result.status == "passed", (name, arch, result.detail)
        assert result.stage == "gate" and result.arch == arch and result.toolchain == TOOLCHAIN.ident
        report = result.gate
        assert report is not None
        assert 8 <= report.registers <= 128, (name, arch, report)
        assert report.spill_stores == report.spill_loads == 0
        assert report.compile_s > 0

    # static shared memory as the sources declare it
    def smem(name: str, arch: str) -> int:
        report = baseline_results[(name, arch)].gate
        assert report is not None
        return report.shared_bytes

    assert smem("sum_all", "sm_80") == 256 * 4
    assert smem("matmul", "sm_90") == 2 * 16 * 16 * 4
    assert smem("matmul32", "sm_90") == 2 * 32 * 32 * 4
    assert smem("silu_mul", "sm_80") == 0


def test_each_verdict_says_the_device_code_its_arch_adds(baseline_results: dict[tuple[str, str], Result]) -> None:
    # compiled for sm_80 and sm_90 at once: the fatbin's entries are split per arch
    for (name, arch), result in baseline_results.items():
        assert result.gate is not None and 500 < result.gate.device_bytes < 200_000, (name, arch)
    sizes = {arch: r.gate.device_bytes for (name, arch), r in baseline_results.items() if name == "matmul" and r.gate}
    assert sizes["sm_80"] != sizes["sm_90"]


def test_syntax_error_is_a_compile_error_with_the_log(manifest: Manifest, silu: KernelSpec, cache: Cache) -> None:
    broken = silu_candidate("    int x = 1\n    (void)x;")
    [result] = StaticGate(cache).evaluate(Job(manifest, silu, "sm_80", [broken]))
    assert result.status == "compile_error"
    assert result.gate is None
    assert "command: " in result.detail and "-gencode arch=compute_80,code=sm_80" in result.detail
    assert "return code: " in result.detail
    assert "silu_mul.cu(" in result.detail and "error" in result.detail  # nvcc's message, relative file name
    assert "r1build-gate-" not in result.detail  # no scratch path: the log is the same everywhere


ARCH_SPECIFIC_KERNEL = """
__global__ void grow(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\\n");
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


def test_arch_specific_instructions_are_refused_for_a_target_without_them(
    manifest: Manifest, silu: KernelSpec, cache: Cache
) -> None:
    grow = silu_candidate("    grow<<<(n + 127) / 128, 128, 0, stream>>>(gate, out, n);", kernel=ARCH_SPECIFIC_KERNEL)
    gate = StaticGate(cache)
    [plain] = gate.evaluate(Job(manifest, silu, "sm_90", [grow]))
    [specific] = gate.evaluate(Job(manifest, silu, "sm_90a", [grow]))
    assert specific.status == "passed", specific.detail
    assert plain.status == "compile_error"
    assert plain.detail.startswith(
        "uses setmaxnreg.inc, an arch-specific instruction that code for sm_90 cannot hold: only sm_90a runs it, "
        "so this candidate is not chosen for sm_90\n"
    )
    assert "Instruction 'setmaxnreg.inc' not supported on .target 'sm_90'" in plain.detail  # nvcc's own words


def test_family_code_holds_blackwells_tensor_memory_fence_and_plain_code_does_not(
    manifest: Manifest, silu: KernelSpec, cache: Cache
) -> None:
    fence = ARCH_SPECIFIC_KERNEL.replace("setmaxnreg.inc.sync.aligned.u32 240;", "tcgen05.fence::before_thread_sync;")
    candidate = silu_candidate("    grow<<<(n + 127) / 128, 128, 0, stream>>>(gate, out, n);", kernel=fence)
    gate = StaticGate(cache)
    verdicts = {arch: gate.evaluate(Job(manifest, silu, arch, [candidate]))[0] for arch in ("sm_100", "sm_100f")}
    assert verdicts["sm_100f"].status == "passed", verdicts["sm_100f"].detail
    assert verdicts["sm_100"].status == "compile_error"
    assert verdicts["sm_100"].detail.startswith(
        "uses tcgen05.fence, an arch-specific instruction that code for sm_100 cannot hold: only sm_100a (or perhaps "
        "sm_100f) runs it"
    )


@pytest.mark.parametrize(
    ("call", "symbol"),
    [
        ('    if (n < 0) system("touch /tmp/r1build-pwned");', "system"),
        ('    FILE* f = fopen("/etc/hostname", "r");\n    if (f) n += 1;', "fopen"),
        ('    if (getenv("HOME") == nullptr) n += 1;', "getenv"),
        ("    cudaDeviceReset();", "cudaDeviceReset"),
    ],
)
def test_forbidden_calls_reject_the_candidate_by_name(
    manifest: Manifest, silu: KernelSpec, cache: Cache, call: str, symbol: str
) -> None:
    candidate = silu_candidate(call, prelude="#include <cstdio>\n#include <cstdlib>")
    [result] = StaticGate(cache).evaluate(Job(manifest, silu, "sm_90", [candidate]))
    assert result.status == "rejected"
    assert result.gate is not None  # it compiled; the host object is what failed
    assert f"{symbol}" in result.detail and "may not use" in result.detail


SILU_KERNEL = """
__global__ void silu(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ o, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
"""
LAUNCH = "    silu<<<64, 256, 0, stream>>>(gate, up, out, n);"

# One launcher per class of CUDA runtime call the candidate contract forbids: (class, code before the launch,
# the symbol the gate must name, a phrase of the reason it gives).
DENIED_CLASSES: list[tuple[str, str, str, str]] = [
    (
        "alloc",
        "    static float* scratch = nullptr;\n    if (!scratch) cudaMalloc(&scratch, 4096);",
        "cudaMalloc",
        "allocates or frees memory",
    ),
    (
        "alloc_async",
        "    void* tmp = nullptr;\n    cudaMallocAsync(&tmp, 4096, stream);\n    cudaFreeAsync(tmp, stream);",
        "cudaMallocAsync",
        "forbids allocation",
    ),
    ("sync", "    cudaStreamSynchronize(stream);", "cudaStreamSynchronize", "waits for or polls the GPU"),
    ("sync_copy", "    cudaMemset(out, 0, 4);", "cudaMemset", "cudaMemsetAsync"),
    (
        "stream_creation",
        "    static cudaStream_t side = nullptr;\n"
        "    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);",
        "cudaStreamCreateWithFlags",
        "all work goes on the stream argument",
    ),
    (
        "event",
        "    cudaEvent_t e;\n    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);\n"
        "    cudaEventRecord(e, stream);",
        "cudaEventRecord",
        "nothing to join",
    ),
    (
        "host_callback",
        "    cudaLaunchHostFunc(stream, [](void*) {}, nullptr);",
        "cudaLaunchHostFunc",
        "runs host code from the stream",
    ),
    (
        "device_limit",
        "    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);",
        "cudaDeviceSetLimit",
        "device-wide limits",
    ),
    (
        "stream_attribute",
        "    cudaStreamAttrValue v = {};\n    v.accessPolicyWindow.base_ptr = out;\n"
        "    v.accessPolicyWindow.num_bytes = 1 << 20;\n    v.accessPolicyWindow.hitRatio = 1.0f;\n"
        "    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;\n"
        "    cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &v);",
        "cudaStreamSetAttribute",
        "attributes of the caller's stream",
    ),
    (
        "capture_query",
        "    cudaStreamCaptureStatus status;\n    cudaStreamIsCapturing(stream, &status);\n"
        "    if (status == cudaStreamCaptureStatusNone) n = n / 2;",
        "cudaStreamIsCapturing",
        "whether or not the stream is being captured",
    ),
    (
        "driver_entry_point",
        "    void* fn = nullptr;\n    cudaDriverEntryPointQueryResult q;\n"
        '    cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &q);',
        "cudaGetDriverEntryPoint",
        "reaches the CUDA driver",
    ),
    ("per_thread_stream", "", "__cudaLaunchKernel_ptsz", "per-thread default stream"),
    ("device_reset", "    cudaDeviceReset();", "cudaDeviceReset", "caller's current device"),
    (
        "unknown_runtime_call",
        "    int count = 0;\n    cudaGetDeviceCount(&count);\n"
        "    size_t freeb, total;\n    cudaMemGetInfo(&freeb, &total);",
        "cudaMemGetInfo",
        "memory placement",
    ),
]


def _denied_candidate(kind: str, body: str) -> Candidate:
    # the per-thread default stream comes from a define, as --default-stream per-thread would set it
    candidate = silu_candidate(f"{body}\n{LAUNCH}", kernel=SILU_KERNEL)
    if kind == "per_thread_stream":
        return dataclasses.replace(candidate, defines={"CUDA_API_PER_THREAD_DEFAULT_STREAM": 1})
    return candidate


ALLOWED_LAUNCHER = silu_candidate(
    """    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaFuncSetAttribute(silu_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    cudaFuncAttributes attrs;
    cudaFuncGetAttributes(&attrs, silu);
    int per_sm = 0, min_grid = 0, block = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, silu, 256, 0);
    cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, silu);
    cudaMemsetAsync(out, 0, n * sizeof(float), stream);
    cudaMemcpyAsync(out, up, sizeof(float), cudaMemcpyDeviceToDevice, stream);
    cudaMemcpyToSymbolAsync(table, gate, sizeof(float), 0, cudaMemcpyDeviceToDevice, stream);
    silu<<<sms * per_sm, 256, 0, stream>>>(gate, up, out, n);
    silu_smem<<<1, 256, 64 * 1024, stream>>>(out, n);
    void* args[] = {(void*)&gate, (void*)&up, (void*)&out, (void*)&n};
    cudaLaunchCooperativeKernel((const void*)silu, dim3(sms), dim3(256), args, 0, stream);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(2);
    config.blockDim = dim3(128);
    config.stream = stream;
    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 2;
    cluster[0].val.clusterDim.y = 1;
    cluster[0].val.clusterDim.z = 1;
    config.attrs = cluster;
    config.numAttrs = 1;
    cudaLaunchKernelEx(&config, silu, gate, up, out, n);
    if (cudaPeekAtLastError() != cudaSuccess) return cudaGetLastError();""",
    kernel=SILU_KERNEL + "__device__ float table[1];\n"
    "__global__ void silu_smem(float* o, int64_t n) { extern __shared__ float s[]; s[threadIdx.x] = table[0];\n"
    "    __syncthreads(); if (threadIdx.x < n) o[threadIdx.x] += s[255 - threadIdx.x]; }\n",
)


@pytest.fixture(scope="module")
def runtime_calls(manifest: Manifest, silu: KernelSpec, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    """Every denied class and the allowed launcher, gated for sm_90 in one job (compiled in parallel), in one cache
    for the test run (a worker that asks later finds the verdicts)."""
    candidates = [_denied_candidate(kind, body) for kind, body, _, _ in DENIED_CLASSES] + [ALLOWED_LAUNCHER]
    with once_per_run(tmp_path_factory, "gate-runtime-calls") as (folder, _), Cache(folder / "cache") as c:
        results = StaticGate(c).evaluate(Job(manifest, silu, "sm_90", candidates))
    return dict(zip([kind for kind, *_ in DENIED_CLASSES] + ["allowed"], results, strict=True))


@pytest.mark.parametrize(("kind", "symbol", "phrase"), [(k, s, p) for k, _, s, p in DENIED_CLASSES])
def test_runtime_calls_outside_the_contract_are_rejected_by_name(
    runtime_calls: dict[str, Result], kind: str, symbol: str, phrase: str
) -> None:
    result = runtime_calls[kind]
    assert result.status == "rejected", result.detail
    assert result.gate is not None  # it compiled; its calls are what failed
    assert symbol in result.detail and phrase in result.detail, result.detail


def test_the_launch_side_runtime_is_allowed(runtime_calls: dict[str, Result]) -> None:
    result = runtime_calls["allowed"]
    assert result.status == "passed", result.detail


def test_contract_violations_are_rejected(manifest: Manifest, silu: KernelSpec, cache: Cache) -> None:
    exported = Candidate(
        "#include <cuda_runtime.h>\n#include <cstdint>\n"
        "__global__ void visible_kernel(float* y) { y[0] = 1.0f; }\n"
        "int block_size() { return 256; }\n"
        "inline __attribute__((noinline)) int grid_size(int64_t n) { return static_cast<int>(n / 256 + 1); }\n"
        f"{SILU_SIGNATURE} {{\n"
        "    visible_kernel<<<grid_size(n), block_size(), 0, stream>>>(out);\n"
        "    return cudaGetLastError();\n}\n",
        Origin("generated", model="test"),
    )
    no_entry = Candidate(
        "#include <cuda_runtime.h>\nnamespace { __global__ void k(float* y) { y[0] = 1.0f; } }\n"
        'extern "C" cudaError_t silu_mul_wrong_name(float* y, cudaStream_t s) '
        "{ k<<<1, 1, 0, s>>>(y); return cudaGetLastError(); }\n",
        Origin("generated", model="test"),
    )
    raw_syscall = silu_candidate(
        '    long ret;\n    asm volatile("syscall" : "=a"(ret) : "a"(39L) : "rcx", "r11", "memory");\n'
        "    if (ret < 0) n += 1;"
    )
    gate = StaticGate(cache)
    first, second, third = gate.evaluate(Job(manifest, silu, "sm_80", [exported, no_entry, raw_syscall]))
    assert first.status == "rejected"
    # a strong global kernel and helper would clash with another variant's at link time; a weak (inline) one
    # would silently be merged with another variant's
    for name in ("visible_kernel(float*)", "block_size()", "grid_size(long)"):
        assert name in first.detail
    assert "anonymous namespace" in first.detail
    assert second.status == "rejected"
    assert 'extern "C" cudaError_t silu_mul(' in second.detail and "silu_mul_wrong_name" in second.detail
    if platform.machine() in ("x86_64", "AMD64"):  # the inline assembly above is x86-64's
        assert third.status == "rejected" and "raw system-call instructions" in third.detail


def test_spills_and_registers_over_the_limits_are_rejected(manifest: Manifest, silu: KernelSpec, cache: Cache) -> None:
    assert silu.limits.spill_bytes is None  # the default allows spills; a kernel asks for none like this:
    silu = dataclasses.replace(silu, limits=Limits(spill_bytes=0))
    gate = StaticGate(cache)
    spilling, fitting = gate.evaluate(
        Job(manifest, silu, "sm_80", [HEAVY, dataclasses.replace(HEAVY, defines={"BOUND": 128})])
    )
    assert spilling.status == "rejected", spilling.detail
    assert spilling.gate is not None and spilling.gate.spill_stores > 0 and spilling.gate.spill_loads > 0
    assert "bytes of register spills on sm_80" in spilling.detail and "limits.spill-bytes" in spilling.detail
    assert fitting.status == "passed" and fitting.gate is not None and fitting.gate.registers > 64

    # a lower register limit re-judges the cached report without compiling again
    tight = dataclasses.replace(silu, limits=Limits(registers=64))
    compiles = gate.compiles
    [again] = gate.evaluate(Job(manifest, tight, "sm_80", [dataclasses.replace(HEAVY, defines={"BOUND": 128})]))
    assert gate.compiles == compiles
    assert again.status == "rejected"
    assert f"{fitting.gate.registers} registers per thread on sm_80, over the limit of 64" in again.detail

    # and no spill limit lets the spilling variant pass
    lax = dataclasses.replace(silu, limits=Limits(spill_bytes=None))
    [allowed] = gate.evaluate(Job(manifest, lax, "sm_80", [HEAVY]))
    assert allowed.status == "passed" and gate.compiles == compiles


def test_a_warm_gate_compiles_nothing_twice(manifest: Manifest, silu: KernelSpec, tmp_path: Path) -> None:
    silu = dataclasses.replace(silu, limits=Limits(spill_bytes=None))  # ptxas spills a few bytes of vec4 on sm_90
    plain = baseline(manifest, silu)
    vec = Candidate((ROOT / "kernels/silu_mul_vec4.cu").read_text(), Origin("file", "kernels/silu_mul_vec4.cu"))
    variants = [
        plain,
        dataclasses.replace(vec, defines={"BLOCK": 128}),
        dataclasses.replace(vec, defines={"BLOCK": 512}),
    ]
    job = Job(manifest, silu, "sm_90", [*variants, plain])  # a duplicate is compiled once
    with Cache(tmp_path / "cache") as cold_cache:
        cold = StaticGate(cold_cache, jobs=2)
        first = cold.evaluate(job)
        assert cold.compiles == 3 and cold.cache_hits == 0
    with Cache(tmp_path / "cache") as warm_cache:
        warm = StaticGate(warm_cache)
        second = warm.evaluate(job)
        assert warm.compiles == 0 and warm.cache_hits == 3
    assert first == second
    assert [r.status for r in first] == ["passed"] * 4
    assert [r.candidate for r in first] == [c.digest for c in job.candidates]
    # another flag set is another question
    flagged = dataclasses.replace(manifest, settings=dataclasses.replace(manifest.settings, nvcc_flags=["-O2"]))
    with Cache(tmp_path / "cache") as c:
        other = StaticGate(c)
        other.evaluate(Job(flagged, silu, "sm_90", [plain]))
        assert other.compiles == 1


def test_a_compile_past_the_timeout_is_a_compile_error_and_not_cached(
    manifest: Manifest, silu: KernelSpec, tmp_path: Path
) -> None:
    candidate = silu_candidate("    n += 3;")
    with Cache(tmp_path / "cache") as c:
        [result] = StaticGate(c, timeout_s=0.01).evaluate(Job(manifest, silu, "sm_80", [candidate]))
        assert result.status == "compile_error"
        assert "nvcc did not finish within 0.01 s" in result.detail
        patient = StaticGate(c)
        [again] = patient.evaluate(Job(manifest, silu, "sm_80", [candidate]))
        assert again.status == "passed" and patient.compiles == 1


def test_gate_for_archs_keys_by_canonical_arch(manifest: Manifest, cache: Cache) -> None:
    spec = manifest.kernel("transpose")
    results = gate_for_archs(StaticGate(cache), manifest, spec, baseline(manifest, spec), ["sm_80", "90", "sm_90a"])
    assert list(results) == ["sm_80", "sm_90", "sm_90a"]
    assert all(r.status == "passed" and r.arch == arch for arch, r in results.items())


def test_events_tell_progress_and_nothing_is_printed(
    manifest: Manifest, silu: KernelSpec, cache: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    events: list[Event] = []
    with sink(events.append):
        StaticGate(cache).evaluate(Job(manifest, silu, "sm_80", [baseline(manifest, silu)]))
    stages = [e for e in events if isinstance(e, Stage)]
    assert [(s.stage, s.kernel, s.arch, s.done) for s in stages] == [
        ("gate", "silu_mul", "sm_80", False),
        ("gate", "silu_mul", "sm_80", True),
    ]
    assert "1 passed" in stages[-1].detail
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress and progress[-1].completed == progress[-1].total == 1
    assert capsys.readouterr() == ("", "")


def test_missing_nvcc_is_a_toolchain_error(manifest: Manifest, silu: KernelSpec, cache: Cache) -> None:
    missing = Toolchain(nvcc="/nonexistent/bin/nvcc", version_text="Cuda compilation tools, Build cuda_0.0.r0.0/x")
    candidate = silu_candidate("    n += 2;")
    with pytest.raises(ToolchainError, match="/nonexistent/bin/nvcc"):
        StaticGate(cache, toolchain=missing).evaluate(Job(manifest, silu, "sm_80", [candidate]))


def test_ptxas_report_takes_the_largest_function() -> None:
    text = """ptxas info    : 0 bytes gmem
ptxas info    : Function properties for _Z6helperf
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Compiling entry function '_Z1aPf' for 'sm_80'
ptxas info    : Function properties for _Z1aPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 8192 bytes smem, 388 bytes cmem[0]
ptxas info    : Compiling entry function '_Z1bPf' for 'sm_80'
ptxas info    : Function properties for _Z1bPf
    32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 72 registers, used 0 barriers, 1024 bytes smem, 360 bytes cmem[0]
"""
    report = parse_ptxas_report(text, 1.23456)
    assert (report.registers, report.shared_bytes, report.stack_frame) == (72, 8192, 32)
    assert (report.spill_stores, report.spill_loads, report.compile_s) == (8, 4, 1.235)


@pytest.mark.parametrize(
    ("symbol", "allowed"),
    [
        ("cudaMemsetAsync", True),
        ("__cudaRegisterFatBinary", True),
        ("_Znwm", True),
        ("_ZdlPvm", True),
        ("__cxa_guard_acquire", True),
        ("_ZSt20__throw_length_errorPKc", True),
        ("memcpy", True),
        ("expf", True),
        ("exit", True),
        ("cudaLaunchKernel", True),
        ("__cudaLaunchKernel", True),
        ("cudaLaunchKernelExC", True),
        ("cudaLaunchCooperativeKernel", True),
        ("cudaFuncSetAttribute", True),
        ("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", True),
        ("cudaGetDeviceProperties", True),
        ("cudaGetDeviceProperties_v2", True),
        ("cudaMemcpyFromSymbolAsync", True),
        ("__cudaRegisterLinkedBinary_21f535a6_8_probe_cu_probe", True),
        ("cudaSetDevice", False),
        ("cudaIpcOpenMemHandle", False),
        ("cudaMalloc", False),
        ("cudaMallocAsync", False),
        ("cudaMemcpy", False),
        ("cudaMemsetAsync_ptsz", False),
        ("__cudaLaunchKernel_ptsz", False),
        ("cudaStreamIsCapturing", False),
        ("cudaStreamGetCaptureInfo", False),
        ("cudaStreamSynchronize", False),
        ("cudaEventRecord", False),
        ("cudaGraphLaunch", False),
        ("cudaCtxResetPersistingL2Cache", False),
        ("cudaProfilerStart", False),
        ("__cudaRegisterManagedVar", False),
        ("__cudaGetProcAddress", False),
        ("cudaLibraryLoadData", False),
        ("cudaNotARealCallYet", False),
        ("printf", False),
        ("puts", False),
        ("popen", False),
        ("execve", False),
        ("fork", False),
        ("socket", False),
        ("connect", False),
        ("open", False),
        ("read", False),
        ("write", False),
        ("dlopen", False),
        ("getenv", False),
        ("pthread_create", False),
        ("cuLaunchKernel", False),
    ],
)
def test_allowlist(symbol: str, allowed: bool) -> None:
    assert is_allowed(symbol) is allowed
    # every CUDA name outside the allowlist says why; other names are explained together
    has_reason = not allowed and (symbol.startswith(("cuda", "__cuda")) or symbol.startswith("cuL"))
    assert (denied_reason(symbol) is not None) is has_reason


def test_unknown_runtime_calls_are_denied_with_the_allowed_list() -> None:
    reason = denied_reason("cudaNotARealCallYet")
    assert reason is not None and "outside what a kernel launcher may use" in reason
    assert "cudaLaunchCooperativeKernel" in reason and "cudaMemsetAsync" in reason


def test_events_from_the_gate_threads_reach_the_callers_sink(
    manifest: Manifest, silu: KernelSpec, cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiles run on a thread pool; what they emit (a corrupt cache entry, say) reaches the sink of the thread
    that asked, not only the log."""
    from r1build.events import Note, emit

    gate = StaticGate(cache, jobs=2)
    real = gate._compile_one

    def noisy(*args: object, **kwargs: object) -> list[tuple[Result, bool]] | None:
        emit(Note("warning", "from a gate thread"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gate, "_compile_one", noisy)
    seen: list[Event] = []
    candidates = (
        [
            Candidate(f"// {i}\n" + Path(manifest.root / silu.baseline).read_text(), Origin("file", f"{i}.cu"))
            for i in range(2)
        ]
        if silu.baseline
        else []
    )
    with sink(seen.append):
        gate.evaluate(Job(manifest, silu, "sm_90", candidates))
    assert sum(isinstance(e, Note) and e.message == "from a gate thread" for e in seen) == 2


# -- compiles: one nvcc per variant for all its archs, bounded by the process's compile slots ------------------

TWO_KERNELS = """
__device__ __noinline__ float pick(float x) { float a[16]; for (int i = 0; i < 16; ++i) a[i] = x * i;
                                              return a[(int)x & 15]; }
__global__ void local_array(float* x) { x[threadIdx.x] = pick(x[threadIdx.x]); }
__global__ void shared_tile(float* x) { __shared__ float s[256]; s[threadIdx.x] = x[0]; __syncthreads();
                                        x[threadIdx.x] = s[255 - threadIdx.x]; }
"""


def test_the_report_of_one_compile_for_three_archs_splits_into_each_archs(tmp_path: Path) -> None:
    assert TOOLCHAIN is not None
    archs = ["sm_80", "sm_89", "sm_90"]
    joint = compile_variant(
        TWO_KERNELS, {}, archs, name="t", flags=["-O3"], toolchain=TOOLCHAIN, workdir=tmp_path, timeout_s=300
    )
    assert joint.ok and joint.reports is not None and sorted(joint.reports) == archs
    parts = split_ptxas_report(joint.output, archs)
    assert parts is not None and all(
        f"for '{a}'" in parts[a] and "for 'sm_" not in parts[a].replace(f"for '{a}'", "") for a in archs
    )
    for arch in archs:
        (tmp_path / arch).mkdir()
        alone = compile_variant(
            TWO_KERNELS, {}, arch, name="t", flags=["-O3"], toolchain=TOOLCHAIN, workdir=tmp_path / arch, timeout_s=300
        )
        assert alone.ok
        assert dataclasses.replace(joint.reports[arch], compile_s=0) == dataclasses.replace(alone.report, compile_s=0)
        assert joint.reports[arch].shared_bytes == 1024 and joint.reports[arch].stack_frame == 64
    # what cannot be told apart for certain is not split: a missing part, an arch named twice, an unknown arch
    assert split_ptxas_report(joint.output, archs[:2]) is None
    assert split_ptxas_report(joint.output.replace("for 'sm_89'", "for 'sm_80'"), archs) is None
    assert split_ptxas_report(joint.output, ["sm_80", "sm_89", "sm_86"]) is None
    assert parse_ptxas_report("") == parse_ptxas_report("nothing here")


def test_the_gate_compiles_a_variant_once_for_all_archs(manifest: Manifest, tmp_path: Path) -> None:
    spec = manifest.kernel("silu_mul")
    source = (ROOT / "kernels" / "silu_mul_vec4.cu").read_text(encoding="utf-8")
    variants = [Candidate(source, Origin("file", "kernels/silu_mul_vec4.cu"), {"BLOCK": b}) for b in (128, 256)]
    pairs = [(arch, c) for c in variants for arch in ("sm_80", "sm_90")]
    spec = dataclasses.replace(spec, limits=dataclasses.replace(spec.limits, spill_bytes=None))
    with Cache(tmp_path / "joint") as cache:
        gate = StaticGate(cache)
        joint = gate.judge(manifest, spec, pairs)
        assert gate.compiles == 2  # one nvcc per variant, both archs
    with Cache(tmp_path / "alone") as cache:
        gate = StaticGate(cache)
        alone = [gate.judge(manifest, spec, [pair])[0] for pair in pairs]
        assert gate.compiles == 4
    assert [r.status for r in joint] == ["passed"] * 4
    strip = [
        dataclasses.replace(r, gate=dataclasses.replace(r.gate, compile_s=0) if r.gate else None) for r in joint + alone
    ]
    assert strip[:4] == strip[4:]


def test_a_joint_compile_that_fails_is_judged_arch_by_arch(manifest: Manifest, tmp_path: Path) -> None:
    spec = manifest.kernel("silu_mul")
    # fine for sm_90, an error for sm_80 only: each arch gets its own verdict and log
    kernel = (
        "__global__ void k(float* y) {\n#if __CUDA_ARCH__ == 800\n#error not for sm_80\n#endif\n"
        "    y[threadIdx.x] = 1.0f;\n}\n"
    )
    candidate = silu_candidate("    k<<<1, 32, 0, stream>>>(out);", kernel=kernel)
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache)
        sm80, sm90 = gate.judge(manifest, spec, [("sm_80", candidate), ("sm_90", candidate)])
        assert gate.compiles == 3  # the joint compile, then each arch alone
    assert sm80.status == "compile_error" and "not for sm_80" in sm80.detail
    assert sm90.status == "passed" and sm90.gate is not None and sm90.gate.registers > 0


def test_never_more_compilers_than_slots(manifest: Manifest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several threads each asking the gate for several compiles (as the resolver's per-kernel threads do): the
    nvcc processes running at once, counted by a wrapper on the way in and out, never exceed the slots. (The
    wrapper writes its log beside itself, which a confined compile may not: these compiles run unconfined.)"""
    monkeypatch.setenv("R1BUILD_SANDBOX", "off")
    real = shutil.which("nvcc") or (TOOLCHAIN.nvcc if TOOLCHAIN else "nvcc")
    log = tmp_path / "nvcc.log"
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(
        f'#!/bin/sh\necho "+ $(date +%s%N)" >> {log}\nsleep 0.3\n"{real}" "$@"\nrc=$?\n'
        f'echo "- $(date +%s%N)" >> {log}\nexit $rc\n'
    )
    wrapper.chmod(0o755)
    assert TOOLCHAIN is not None
    tc = Toolchain(nvcc=str(wrapper), version_text=TOOLCHAIN.version_text)
    spec = manifest.kernel("silu_mul")
    threads = max(3, COMPILE_SLOTS + 1)
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache, toolchain=tc)
        results: list[str] = []

        def ask(t: int) -> None:
            pairs = [("sm_90", silu_candidate(f"    n += {t * 10 + i};")) for i in range(2)]
            results.extend(r.status for r in gate.judge(manifest, spec, pairs))

        workers = [threading.Thread(target=ask, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert results == ["passed"] * (2 * threads)
    events = sorted(
        (int(stamp), 1 if sign == "+" else -1)
        for sign, stamp in (line.split() for line in log.read_text().splitlines())
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    # a compile and a link per candidate, each an nvcc, and the link step's own function once for this nvcc
    assert len(events) == 2 * (2 * 2 * threads + 1) and peak <= COMPILE_SLOTS, (peak, COMPILE_SLOTS)
    assert peak >= min(2, COMPILE_SLOTS)  # the compiles did overlap: the bound is what held them


def test_a_generated_candidate_reads_the_manifests_include_folders_and_nothing_beside_them(
    manifest: Manifest, silu: KernelSpec, tmp_path: Path
) -> None:
    """A model's kernel that includes the project's own header (as the hand-written one it was shown does) compiled
    only unconfined: the sandbox showed its compile no folder of the manifest's include search paths, so every such
    answer was a compile error. Those folders are now shown read-only; a folder beside them still is not (the
    source check refuses reaching it by name; here nvcc is asked directly, past that check)."""
    from r1build.manifest.flags import rooted_flags
    from r1build.sandbox import confined, unconfined

    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "helper.cuh").write_text("#define R1BUILD_HELPER_SCALE 2\n")
    (tmp_path / "beside").mkdir()
    (tmp_path / "beside" / "other.cuh").write_text("#define R1BUILD_OTHER 1\n")
    settings = dataclasses.replace(manifest.settings, nvcc_flags=[*manifest.settings.nvcc_flags, "-Iinclude"])
    project = dataclasses.replace(manifest, path=tmp_path / "kernels.toml", settings=settings)
    found = silu_candidate("    (void)R1BUILD_HELPER_SCALE;", prelude='#include "helper.cuh"')
    with Cache(tmp_path / "cache") as c:
        [ok] = StaticGate(c).evaluate(Job(project, silu, "sm_90", [found]))
    assert ok.status == "passed", ok.detail
    beside = silu_candidate("    (void)R1BUILD_OTHER;", prelude='#include "../beside/other.cuh"')
    flags = rooted_flags(settings.nvcc_flags, tmp_path)
    assert TOOLCHAIN is not None
    outcomes = {}
    for name, sandbox in (("unconfined", unconfined()), ("confined", confined())):
        (tmp_path / name).mkdir()
        outcomes[name] = compile_variant(
            beside.source, {}, "sm_90", name="silu_mul", flags=flags, toolchain=TOOLCHAIN, workdir=tmp_path / name,
            timeout_s=120, sandbox=sandbox,
        )  # fmt: skip
    assert outcomes["unconfined"].ok, outcomes["unconfined"].output
    assert not outcomes["confined"].ok and "other.cuh" in outcomes["confined"].output, outcomes["confined"].output
