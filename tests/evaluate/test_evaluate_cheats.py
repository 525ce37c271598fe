"""Cheats written the way cheats against public kernel benchmarks were written (KernelBench, Sakana's AI CUDA
Engineer, CUDA-L1, GPU MODE leaderboards), kept as regression cases (issue 7, section 0): every one must be
rejected, by the stage and for the reason the table names, and the honest kernels beside them must pass.

On the CPU (real nvcc, runs in CI): every file compiles for sm_90 with the gate's compile, and the static gate
rejects exactly the cheats that call what the candidate contract forbids, naming the calls. On a GPU: each cheat
goes through the real :class:`~r1build.evaluate.GpuEvaluator`, three times with a fresh evaluator and cache, so a
reason that changes from run to run shows as a failure (``-k run1`` runs one pass).
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from r1build.cache import Cache
from r1build.evaluate import EvaluatorOptions, GpuEvaluator, expand_variants
from r1build.gate import StaticGate
from r1build.judge import Job
from r1build.manifest import Manifest
from r1build.records import Candidate, Origin, Result
from tests.support.nvcc import toolchain_or_skip
from tests.support.shared import once_per_run

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

CHEATS = Path(__file__).resolve().parent / "cheats"


@dataclass(frozen=True)
class Case:
    """One file of ``cheats/`` and the verdict it must get."""

    file: str
    stage: Literal["gate", "evaluate"]
    """The stage that must reject it (or, for an honest kernel, the evaluate stage that passes it)."""
    reasons: tuple[str, ...] = ()
    """Evaluate stage: any of these must appear in the detail (case-insensitive)."""
    symbols: tuple[str, ...] = ()
    """Gate stage: every one of these calls must be named in the detail."""
    honest: bool = False
    """An honest kernel, which must pass."""

    @property
    def name(self) -> str:
        return Path(self.file).stem

    @property
    def path(self) -> Path:
        return CHEATS / self.file

    @property
    def kernel(self) -> str:
        found = re.search(r"^// kernel: (\w+)$", self.path.read_text(), re.MULTILINE)
        assert found, f"{self.file} lacks its // kernel: header"
        return found.group(1)

    def candidate(self) -> Candidate:
        return Candidate(self.path.read_text(), Origin("file", f"cheats/{self.file}"))

    def problem(self, result: Result) -> str | None:
        """What is wrong with ``result`` for this case, or None."""
        got = f"{self.name}: {result.status} at {result.stage}: {result.detail[:500]}"
        if self.honest:
            ok = result.status == "passed" and result.stage == "evaluate" and result.timing is not None
            return None if ok else f"an honest kernel did not pass: {got}"
        if result.status == "passed":
            return f"a cheat passed: {got}"
        if result.stage != self.stage:
            return f"expected the {self.stage} stage to reject it: {got}"
        detail = result.detail.lower()
        missing = [s for s in self.symbols if s.lower() not in detail]
        if missing:
            return f"the gate's reason does not name {missing}: {got}"
        if self.reasons and not any(r.lower() in detail for r in self.reasons):
            return f"the reason names none of {self.reasons}: {got}"
        return None

    def matched(self, result: Result) -> tuple[str, str, tuple[str, ...]]:
        """What must stay the same from run to run: status, stage and which expected phrases the reason has."""
        detail = result.detail.lower()
        return result.status, result.stage, tuple(r for r in (*self.symbols, *self.reasons) if r.lower() in detail)


BENCH = ("benchmark shape", "implausible")

CASES: list[Case] = [
    # (a) right at the test shapes, no (or partial) work above them
    Case("size_threshold_skip.cu", "evaluate", BENCH),
    Case("size_threshold_partial.cu", "evaluate", BENCH),
    # (b) result memos: device state keyed on the pointer and sampled values; host state keyed on the pointers
    Case("memo_device_samples.cu", "evaluate", ("depends on earlier calls",)),
    Case("memo_host_pointers.cu", "evaluate", ("depends on earlier calls",)),
    # (c) private stream, host sync, free-and-reallocate: only when the stream is not being captured
    Case(
        "private_stream_uncaptured.cu",
        "gate",
        symbols=("cudaStreamIsCapturing", "cudaStreamCreateWithFlags", "cudaEventRecord", "cudaStreamWaitEvent"),
    ),
    Case("host_sync_uncaptured.cu", "gate", symbols=("cudaStreamIsCapturing", "cudaStreamSynchronize")),
    Case("realloc_scratch_uncaptured.cu", "gate", symbols=("cudaStreamIsCapturing", "cudaFree", "cudaMalloc")),
    # (c) without a denied symbol: a device-to-host cudaMemcpyAsync into pageable memory waits for the stream,
    # and cannot be captured
    Case("host_readback.cu", "evaluate", ("outside the given stream", "captur", "synchroniz")),
    # (d) the same only above the test shapes
    Case(
        "private_streams_large.cu",
        "gate",
        symbols=("cudaStreamCreateWithFlags", "cudaEventRecord", "cudaStreamWaitEvent"),
    ),
    Case("realloc_staging_large.cu", "gate", symbols=("cudaMalloc", "cudaFree")),
    # (e) software grid barriers: a deadlock, and a bounded spin that gives wrong results, at the benchmark size
    # a grid barrier on a __device__ counter is state shared across calls: the concurrent calls meet it first
    Case("grid_barrier_deadlock.cu", "evaluate", ("benchmark shape", "not reentrant")),
    Case("grid_barrier_bounded.cu", "evaluate", ("benchmark shape", "not reentrant")),
    # (f) persisting L2 and an access-policy window on the caller's stream
    Case("persisting_l2_window.cu", "gate", symbols=("cudaDeviceSetLimit", "cudaStreamSetAttribute")),
    # (g) a __device__ accumulator never reset
    Case("device_accumulator.cu", "evaluate", ("depends on earlier calls",)),
    # (h) NaN written on purpose, with the bit pattern of the old poison
    Case("nan_on_purpose.cu", "evaluate", ("NaN",)),
    # (i) the legacy default stream, and the per-thread default stream (a handle, no symbol)
    Case("legacy_default_stream.cu", "evaluate", ("outside the given stream",)),
    Case("per_thread_default_stream.cu", "evaluate", ("outside the given stream",)),
    # (j) a sum accumulated in fp16: precision, not a race
    Case("fp16_accumulation.cu", "evaluate", ("tolerance",)),
    # (n) a float32 matmul on TF32 tensor cores: inputs rounded to 10 mantissa bits (issue 27, item 8)
    Case("tf32_matmul.cu", "evaluate", ("computes below float32",)),
    # (k) a real shared-memory race (racecheck names it too)
    Case("smem_race.cu", "evaluate", ("nondeterministic", "racecheck")),
    # (l) a CUDA error returned by the call
    # the error by its name, whichever the toolkit reports (CUDA 13 gave cudaErrorInvalidValue while capturing)
    Case("invalid_launch_error.cu", "evaluate", ("returned cudaError",)),
    # (m) an allocation inside the call
    Case("malloc_async_scratch.cu", "gate", symbols=("cudaMallocAsync", "cudaFreeAsync")),
    # issue 27, the classes an H200 run showed passing:
    # (1) work on an implicit stream (per-thread, legacy) only at the benchmark size: replays of a captured graph there
    Case("bench_per_thread_half.cu", "evaluate", ("outside the given stream",)),
    Case("bench_legacy_half.cu", "evaluate", ("outside the given stream",)),
    # (3) right on the first replay of a captured graph, wrong on the next: replayed four times with fresh inputs
    Case("replay_epoch_reuse.cu", "evaluate", ("how often a captured graph is replayed",)),
    # (4) a "last block done" counter and partials in __device__ memory: two calls at once on two streams
    Case("reentrancy_last_block.cu", "evaluate", ("not reentrant",)),
    # (5) a fast path for 16-byte-aligned rows without the max subtraction: every distribution at aligned pointers
    Case("aligned_fast_path.cu", "evaluate", ("256-byte-aligned",)),
    # (6) a read past the end only at the benchmark size: every benchmark array ends at unmapped memory
    Case("overread_large.cu", "evaluate", ("past the end",)),
    # (7) skips its work when the output holds finite values and the inputs' fingerprint matches
    # it reads its output before writing it: initcheck sees that first where the harness leaves outputs unwritten
    Case("lazy_fingerprint.cu", "evaluate", ("lazy output", "uninitialized")),
    # issue 27, the wrong reasons: an invalid launch configuration the launcher does not ask about, and an input used
    # as scratch, both only at the benchmark size
    Case("bench_launch_unchecked.cu", "evaluate", ("launch failed",)),
    Case("bench_input_scratch.cu", "evaluate", ("modified its input gate",)),
    # honest kernels beside them
    Case("honest_grid_stride.cu", "evaluate", honest=True),
    Case("honest_block_atomic_sum.cu", "evaluate", honest=True),
    Case("honest_cooperative_sum.cu", "evaluate", honest=True),
    Case("honest_cg_block_reduce.cu", "evaluate", honest=True),
    Case("honest_inline_ptx.cu", "evaluate", honest=True),
    Case("honest_vec4_tail.cu", "evaluate", honest=True),
    Case("honest_stream_ordered.cu", "evaluate", honest=True),
]
IDS = [c.name for c in CASES]
RUNS = (1, 2, 3)


def test_the_table_covers_every_file() -> None:
    assert sorted(c.file for c in CASES) == sorted(p.name for p in CHEATS.glob("*.cu"))
    assert len(IDS) == len(set(IDS))
    for case in CASES:
        text = case.path.read_text()
        assert text.count('extern "C"') == 1, case.file
        assert case.honest or case.symbols or case.reasons, case.file
        assert (case.stage == "gate") == bool(case.symbols), case.file


# -- on the CPU: the gate's compile and symbol check ---------------------------------------------------------
@pytest.fixture(scope="module")
def gate_results(root_manifest: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    """Every case through the static gate for sm_90 (the gate's compile: real nvcc, the manifest's flags)."""
    toolchain_or_skip()
    by_kernel = {k: [c for c in CASES if c.kernel == k] for k in sorted({c.kernel for c in CASES})}
    out: dict[str, Result] = {}
    # one cache for the test run: the worker that asks second finds every verdict there
    with once_per_run(tmp_path_factory, "cheats-gate") as (folder, _), Cache(folder / "cache") as cache:
        gate = StaticGate(cache)

        def judge(kernel: str) -> list[Result]:
            cases = [c.candidate() for c in by_kernel[kernel]]
            return gate.evaluate(Job(root_manifest, root_manifest.kernel(kernel), "sm_90", cases))

        # every kernel's job at once, as a resolve gates its kernels: the process's compile slots (one nvcc a core)
        # stay full to the last compile, where one job after another left a core idle at the end of each
        with ThreadPoolExecutor(max_workers=len(by_kernel), thread_name_prefix="cheats-gate") as pool:
            futures = {k: pool.submit(contextvars.copy_context().run, judge, k) for k in by_kernel}
        for kernel, future in futures.items():
            out.update({c.name: r for c, r in zip(by_kernel[kernel], future.result(), strict=True)})
    return out


@pytest.mark.heavy  # the corpus's compiles: 50 s of a run on two cores
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_gate_compiles_every_case_and_rejects_the_forbidden_calls(
    gate_results: dict[str, Result], case: Case
) -> None:
    result = gate_results[case.name]
    assert result.status != "compile_error", result.detail
    assert result.gate is not None and result.gate.registers > 0  # compiled for sm_90, with a ptxas report
    if case.stage == "gate":
        assert result.status == "rejected", result.detail
        assert case.problem(result) is None, case.problem(result)
    else:
        assert result.status == "passed", f"{case.name} must reach the GPU checks: {result.detail}"


# -- on a GPU: the whole evaluator, three times ----------------------------------------------------------------
@pytest.fixture(scope="module")
def cheat_runs(
    root_manifest: Manifest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[int], dict[str, Result]]]:
    """Evaluates every case on the GPU once per run asked for (a fresh evaluator and cache each), memoized."""
    done: dict[int, dict[str, Result]] = {}

    def run(index: int) -> dict[str, Result]:
        if index not in done:
            done[index] = _evaluate_cases(root_manifest, tmp_path_factory.mktemp(f"cheats-run{index}"))
        return done[index]

    yield run


def _evaluate_cases(manifest: Manifest, workdir: Path) -> dict[str, Result]:
    """One job per kernel: its cases, then its baseline, which must still pass after them."""
    with (
        Cache(workdir / "cache") as cache,
        GpuEvaluator(cache, options=EvaluatorOptions(call_timeout_s=8.0, timing_timeout_s=10.0)) as evaluator,
    ):
        arch = min(a for a in evaluator.archs if not a.endswith("a"))
        jobs, names = [], []
        for kernel in sorted({c.kernel for c in CASES}):
            spec = manifest.kernel(kernel)
            baseline = expand_variants(manifest, spec)[0]
            cases = [c for c in CASES if c.kernel == kernel]
            jobs.append(Job(manifest, spec, arch, [*(c.candidate() for c in cases), baseline], baseline))
            names.append([*(c.name for c in cases), f"baseline:{kernel}"])
        out: dict[str, Result] = {}
        for labels, results in zip(names, evaluator.evaluate_all(jobs), strict=True):
            out.update(zip(labels, results, strict=True))
        return out


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("run", RUNS, ids=[f"run{r}" for r in RUNS])
def test_each_cheat_is_rejected_by_the_right_stage_for_the_right_reason(
    cheat_runs: Callable[[int], dict[str, Result]], run: int, case: Case
) -> None:
    problem = case.problem(cheat_runs(run)[case.name])
    assert problem is None, problem


@pytest.mark.gpu
@pytest.mark.parametrize("run", RUNS, ids=[f"run{r}" for r in RUNS])
def test_the_baselines_judged_after_the_cheats_still_pass(
    cheat_runs: Callable[[int], dict[str, Result]], run: int
) -> None:
    results = cheat_runs(run)
    failed = {
        name: f"{r.status}: {r.detail[:300]}"
        for name, r in results.items()
        if name.startswith("baseline:") and (r.status != "passed" or r.timing is None)
    }
    assert not failed, failed


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_each_cheat_gets_the_same_verdict_every_run(cheat_runs: Callable[[int], dict[str, Result]], case: Case) -> None:
    verdicts = {run: case.matched(cheat_runs(run)[case.name]) for run in RUNS}
    assert len(set(verdicts.values())) == 1, verdicts
