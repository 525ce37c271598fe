"""On a real GPU: the root manifest's kernels pass and are timed; every known-bad kernel is rejected for the
right reason, and the run survives them all (skipped without a GPU)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.evaluate import EvaluatorOptions, GpuEvaluator, expand_variants
from r1build.evaluate.timing.floors import FLOORS_NAMESPACE, DeviceFloors
from r1build.judge import Job
from r1build.manifest import KernelSpec, Manifest, load_manifest
from r1build.records import Candidate, Origin, Result, Timing
from r1build.selection.rules import median_error
from tests.evaluate.evaluate_support import CorpusKernel, corpus_kernels


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cache]:
    with Cache(tmp_path_factory.mktemp("cache")) as c:
        yield c


@pytest.fixture(scope="module")
def evaluator(cache: Cache) -> Iterator[GpuEvaluator]:
    with GpuEvaluator(cache, options=EvaluatorOptions(call_timeout_s=8.0)) as ev:
        yield ev


def plain_arch(evaluator: GpuEvaluator) -> str:
    return min(a for a in evaluator.archs if not a.endswith("a"))


@pytest.mark.gpu
def test_root_kernels_pass_with_timings(evaluator: GpuEvaluator, root_manifest: Manifest, cache: Cache) -> None:
    arch = plain_arch(evaluator)
    jobs = []
    for spec in root_manifest.kernels:
        candidates = expand_variants(root_manifest, spec)
        jobs.append(Job(root_manifest, spec, arch, candidates, candidates[0]))
    everything = evaluator.evaluate_all(jobs)
    for job, results in zip(jobs, everything, strict=True):
        assert len(results) == len(job.candidates)
        for candidate, result in zip(job.candidates, results, strict=True):
            label = f"{job.spec.name} {candidate.origin.path} {candidate.defines}"
            assert result.status == "passed", f"{label}: {result.detail}"
            assert result.stage == "evaluate" and result.device and result.timing is not None
            t = result.timing
            assert t.median_us > 0 and t.samples >= 20 and t.floor_us is not None
            assert t.share_of_floor is not None and 0 < t.share_of_floor <= 1.3, label
            assert len(t.shapes) == len(job.spec.bench_shapes)
            if t.median_us >= 50:  # single cold launches scatter by a few percent; their median is what ranks
                assert t.spread <= 0.10, f"{label}: spread {t.spread:.2%} at {t.median_us:.1f} us"
                error = median_error(t.spread, t.samples)
                assert error <= 0.005, f"{label}: median good to {error:.2%} at {t.median_us:.1f} us"
            if t.median_us >= 1000 and t.spread <= 0.005:  # known to STOP_ERROR within two batches, not at the
                assert t.samples <= 40, f"{label}: {t.samples} samples, spread {t.spread:.2%}"  # budget's 50-66
        baseline = results[0].timing
        assert baseline is not None and baseline.speedup_vs_baseline == pytest.approx(1.0)
    gpu = evaluator.gpus[0]
    floors = DeviceFloors.from_json(cache.get_json(FLOORS_NAMESPACE, gpu.key))
    assert floors is not None
    assert 1e11 < floors.bandwidth_bps < 3e13 and 1e12 < floors.fp32_flops < 5e14


def _baseline_timing(evaluator: GpuEvaluator, manifest: Manifest, spec: KernelSpec) -> Timing:
    """``spec``'s baseline judged alone on the GPU: it passes, and its timing."""
    baseline = expand_variants(manifest, spec)[0]
    [result] = evaluator.evaluate(Job(manifest, spec, plain_arch(evaluator), [baseline], baseline))
    assert result.status == "passed", result.detail
    assert result.timing is not None
    return result.timing


@pytest.mark.gpu
def test_the_library_is_timed_for_a_project_the_confined_worker_cannot_read(
    evaluator: GpuEvaluator, root_copy: Path
) -> None:
    """The worker that times the library runs confined and reads the evaluator's folder, not the project: the
    references travel as copies of their modules and the ``.py`` files beside them. The root manifest copied to
    /tmp and resolved on an H200 had no library time for any kernel ("module 'kernels.reference' not found next to
    the manifest")."""
    manifest = load_manifest(root_copy / "kernels.toml")
    t = _baseline_timing(evaluator, manifest, manifest.kernel("silu_mul"))
    assert t.library_note is None, t.library_note
    assert t.speedup_vs_reference is not None and t.speedup_vs_reference > 0


TORCH_SILU_MUL = """import torch


def silu_mul(gate, up, n):
    return torch.nn.functional.silu(gate) * up
"""


@pytest.mark.gpu
def test_the_torch_bar_is_measured_in_the_confined_worker(evaluator: GpuEvaluator, root_copy: Path) -> None:
    """Issue 30's torch bar on a GPU: the kernel's torch-reference timed eager and under torch.compile in the
    worker, on the library's inputs handed over by DLPack, within the worker's limits; the faster sets the bar."""
    pytest.importorskip("torch")
    (root_copy / "kernels" / "torch_ref.py").write_text(TORCH_SILU_MUL, encoding="utf-8")
    manifest = load_manifest(root_copy / "kernels.toml")
    spec = dataclasses.replace(manifest.kernel("silu_mul"), torch_reference="kernels.torch_ref:silu_mul")
    t = _baseline_timing(evaluator, manifest, spec)
    assert t.torch_note is None, t.torch_note
    assert t.speedup_vs_torch is not None and 0.05 < t.speedup_vs_torch < 20, t.speedup_vs_torch
    assert t.torch_mode in ("eager", "compile")


def _check(kernel: CorpusKernel, result: Result) -> str | None:
    if result.status != kernel.status:
        return f"{kernel.name}: expected {kernel.status}, got {result.status}: {result.detail[:400]}"
    if not any(r.lower() in result.detail.lower() for r in kernel.reasons):
        return f"{kernel.name}: {result.status} but the detail names none of {kernel.reasons}: {result.detail[:400]}"
    return None


@pytest.mark.gpu
def test_bad_kernel_corpus_is_rejected_for_the_right_reasons(evaluator: GpuEvaluator, root_manifest: Manifest) -> None:
    arch = plain_arch(evaluator)
    by_kernel: dict[str, list[CorpusKernel]] = {}
    for kernel in corpus_kernels():
        by_kernel.setdefault(kernel.kernel, []).append(kernel)
    jobs, expectations = [], []
    for name, bad in sorted(by_kernel.items()):
        spec = root_manifest.kernel(name)
        good = expand_variants(root_manifest, spec)
        candidates: list[Candidate] = []
        for k in bad:  # each bad kernel followed by a good one: a wrecked worker would show at once
            candidates.append(Candidate(k.path.read_text(), Origin("file", f"corpus/{k.path.name}")))
            candidates.append(good[len(candidates) // 2 % len(good)])
        jobs.append(Job(root_manifest, spec, arch, candidates, good[0]))
        expectations.append(bad)
    restarts = evaluator.stats["worker_restarts"]
    everything = evaluator.evaluate_all(jobs)
    problems = []
    for bad, job, results in zip(expectations, jobs, everything, strict=True):
        for i, result in enumerate(results):
            if i % 2 == 0:
                problem = _check(bad[i // 2], result)
            else:
                good_ok = result.status == "passed" and result.timing is not None
                problem = (
                    None
                    if good_ok
                    else f"{job.spec.name}: a known-good kernel got {result.status}: {result.detail[:300]}"
                )
            if problem:
                problems.append(problem)
    assert not problems, "\n".join(problems)
    assert evaluator.stats["worker_restarts"] > restarts  # crashes and hangs cost a worker, not the run


@pytest.mark.gpu
def test_an_arch_without_a_local_gpu_gets_the_static_gate(evaluator: GpuEvaluator, root_manifest: Manifest) -> None:
    spec = root_manifest.kernel("transpose")
    missing = next(a for a in ("sm_80", "sm_120", "sm_90") if a not in evaluator.archs)
    candidates = expand_variants(root_manifest, spec)
    results = evaluator.evaluate(Job(root_manifest, spec, missing, candidates))
    assert len(results) == len(candidates) > 1
    assert all(r.status == "passed" and r.stage == "gate" and r.timing is None for r in results)


def test_corpus_headers_are_well_formed() -> None:
    kernels = corpus_kernels()
    assert len(kernels) >= 20
    assert {k.status for k in kernels} <= {"incorrect", "crashed", "timed_out", "rejected"}
    assert all(Path(k.path).read_text().count('extern "C"') == 1 for k in kernels)


@pytest.mark.gpu
def test_prepared_jobs_are_timed_once_in_order_while_evaluate_takes_them_one_at_a_time(
    evaluator: GpuEvaluator, root_manifest: Manifest
) -> None:
    arch = plain_arch(evaluator)
    jobs = []
    for name in ("silu_mul", "rmsnorm"):
        spec = root_manifest.kernel(name)
        candidates = expand_variants(root_manifest, spec)[:4]
        jobs.append(Job(root_manifest, spec, arch, candidates, candidates[0]))
    before = evaluator.stats["timed"]
    evaluator.prepare(jobs)  # the GPU starts on both
    results = [evaluator.evaluate(job) for job in jobs]  # each waits for what prepare started
    assert [[r.status for r in rs] for rs in results] == [["passed"] * 4, ["passed"] * 4]
    assert evaluator.stats["timed"] - before == 8  # once each, not again by evaluate
    assert all(r.timing is not None and r.timing.speedup_vs_baseline is not None for rs in results for r in rs)
    again = evaluator.evaluate(jobs[0])  # no longer prepared: evaluated afresh
    assert [r.status for r in again] == ["passed"] * 4 and evaluator.stats["timed"] - before == 12
