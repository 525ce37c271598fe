"""Profiler feedback on the CPU: ncu's CSV (as it prints it) into typed records, the one-line summary, where ncu
is found, the harness compiled and linked with real nvcc, and the findings in the next round's feedback."""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from r1build.gate.nvcc import compile_variant, gencode
from r1build.generate import SearchJob, SearchOutcome
from r1build.generate.controller import run_search
from r1build.generate.providers import resolve_endpoint
from r1build.manifest import Manifest
from r1build.manifest.cdecl import declaration
from r1build.manifest.model import KernelSpec
from r1build.profile import find_ncu, ncu_places
from r1build.profile.harness import harness_source
from r1build.profile.ncu import METRICS, ncu_command, parse_ncu_csv
from r1build.profile.summary import profile_summary
from r1build.records import Candidate, Profile
from r1build.sandbox import Confinement, confined, run_confined
from r1build.toolchain.nvcc import toolchain
from tests.generate.chat_server import Answer, ChatServer
from tests.generate.gen_support import KEY, MarkerJudge, Project, answer, kernel_source
from tests.profile.ncu_samples import ONE_KERNEL, TWO_KERNELS
from tests.sandbox.support import needs_sandbox

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers


def test_one_kernel_is_read_with_every_metric() -> None:
    (k,) = parse_ncu_csv(ONE_KERNEL)
    assert k.kernel == "vadd_kernel"
    assert k.duration_us == pytest.approx(94.752)  # 94,752 ns
    assert (k.achieved_occupancy_pct, k.dram_pct, k.l2_pct, k.sm_pct) == (82.41, 91.37, 44.12, 17.80)
    assert k.shared_bank_conflicts == 0
    assert k.stalls["long_scoreboard"] == 14.87 and len(k.stalls) == 18


def test_two_kernels_in_launch_order_and_the_summary_takes_the_longest() -> None:
    first, second = parse_ncu_csv(TWO_KERNELS)
    assert (first.kernel, second.kernel) == ("partial_sums<256>", "final_sum")
    assert second.shared_bank_conflicts == 2048 and "sleeping" not in second.stalls  # n/a is no number
    text = profile_summary(Profile(tool="ncu 2025.3.1.0", kernels=[first, second]))
    assert text == (
        "memory-bound at 91% of DRAM peak; top stall: long scoreboard (14.9 cycles per instruction); "
        "achieved occupancy 82% (kernel partial_sums<256>, the longest of 2)"
    )


def test_a_kernel_far_from_every_peak_is_latency_bound() -> None:
    _, short = parse_ncu_csv(TWO_KERNELS)
    text = profile_summary(Profile(tool="ncu", kernels=[short]))
    # 'selected' is issuing, not a stall: barrier is the top stall
    assert text == (
        "latency-bound (no unit near its peak: DRAM 2%, L2 6%, SM 10%); top stall: barrier "
        "(6.4 cycles per instruction); achieved occupancy 24%; 2,048 shared-memory bank conflicts"
    )


def test_output_without_a_table_is_an_error() -> None:
    with pytest.raises(ValueError, match="no CSV table"):
        parse_ncu_csv("==PROF== Connected to process 1\n==ERROR== the profiler failed\n")
    with pytest.raises(ValueError, match="lacks the columns"):
        parse_ncu_csv('"ID","Kernel Name"\n"0","k"\n')


def test_ncu_is_found_and_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_ncu({"R1BUILD_NCU": "off"}) is None
    assert find_ncu({"R1BUILD_NCU": "/opt/nsight/ncu"}) == "/opt/nsight/ncu"
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_ncu({"CUDA_HOME": str(tmp_path / "none")}) in (None, "/usr/local/cuda/bin/ncu")
    cmd = ncu_command("ncu", ["./harness"])
    assert cmd[-1] == "./harness" and ",".join(METRICS) in cmd and "--profile-from-start" in cmd


def test_the_harness_compiles_and_links_with_the_candidate(tmp_path: Path) -> None:
    """Root kernels' harnesses build with real nvcc around their baselines (running them needs the GPU): a 1-D
    one with a size, a 2-D one with two."""
    from r1build.manifest import load_manifest

    manifest = load_manifest(Path(__file__).resolve().parents[2] / "kernels.toml")
    tc = toolchain()
    for spec in (manifest.kernel("silu_mul"), manifest.kernel("softmax_rows")):
        work = tmp_path / spec.name
        work.mkdir()
        assert spec.baseline is not None
        source = (manifest.root / spec.baseline).read_text()
        built = compile_variant(
            source,
            {},
            "sm_90",
            name="candidate",
            flags=list(manifest.settings.nvcc_flags),
            toolchain=tc,
            workdir=work,
            timeout_s=300,
            declaration=declaration(spec),
        )
        assert built.ok, built.output
        (work / "harness.cu").write_text(harness_source(spec, spec.bench_shapes[0]))
        link = subprocess.run(
            [
                tc.nvcc,
                *manifest.settings.nvcc_flags,
                "-gencode",
                gencode("sm_90"),
                "harness.cu",
                "candidate.o",
                "-o",
                "harness",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
        assert link.returncode == 0, link.stdout + link.stderr
        assert (work / "harness").is_file()


@dataclass
class RecordedProfiler:
    """Stands in for the GPU part (the harness run under ncu): ncu's recorded output, read by the real parser."""

    profiled: list[str] = field(default_factory=list)

    def profile(self, manifest: Manifest, spec: KernelSpec, arch: str, candidate: Candidate) -> Profile:
        self.profiled.append(candidate.digest)
        return Profile(tool="ncu 2025.3.1.0", kernels=parse_ncu_csv(ONE_KERNEL))


def _search(
    project: Project, manifest: Manifest, spec: KernelSpec, judge: MarkerJudge, profiler: object, server: ChatServer
) -> SearchOutcome:
    """A search of ``spec`` on sm_90 against ``server``, judged by ``judge``, its finalists profiled by ``profiler``."""
    with project.cache() as cache:
        endpoint = resolve_endpoint(
            manifest.settings.generation, {"R1BUILD_BASE_URL": server.url, "DEEPSEEK_API_KEY": KEY}
        )
        job = SearchJob(
            manifest,
            spec,
            "sm_90",
            evaluator=judge,
            cache=cache,
            seeds=[],
            profiler=profiler,  # type: ignore[arg-type]
        )
        return asyncio.run(run_search(job, endpoint))


def test_the_findings_go_into_the_next_rounds_feedback(tmp_path: Path) -> None:
    judge = MarkerJudge()
    project = Project(tmp_path, tmp_path / "cache")
    manifest = project.write(budget={"rounds": 2, "samples": 2, "candidates": 4, "patience": 2})
    spec = manifest.kernel("vadd")
    replies = [
        Answer(answer(kernel_source(1, time_us=30.0))),
        Answer(answer(kernel_source(2, time_us=40.0))),
        Answer(answer(kernel_source(3, time_us=20.0))),
    ]
    profiler = RecordedProfiler()
    with ChatServer(replies) as server:
        outcome = _search(project, manifest, spec, judge, profiler, server)
        later = [r.prompt for r in server.requests if "so far" in r.prompt or len(r.messages) > 1]
    assert len(profiler.profiled) >= 2  # round 0's two finalists (and round 1's)
    assert later and all(
        "Nsight Compute: memory-bound at 91% of DRAM peak; top stall: long scoreboard" in p for p in later
    )
    profiled = [r for r in outcome.results if r.profile is not None]
    assert profiled and profiled[0].profile.kernels[0].kernel == "vadd_kernel"  # type: ignore[union-attr]


@needs_sandbox
def test_a_confined_ncu_sees_the_nsight_compute_folder_its_launcher_runs(tmp_path: Path) -> None:
    """A CUDA toolkit's ``bin/ncu`` is a launcher for an ``nsight-compute*`` folder beside the toolkit or under
    ``/opt/nvidia``: a confined profile of a generated candidate must see that folder (an H100 image kept it under
    ``/opt/nvidia``, which the sandbox hid: every such profile failed), and nothing more of where it lies."""
    toolkit, homes = tmp_path / "cuda-13.0", tmp_path / "opt-nvidia"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "nsight-compute-2099.1").mkdir()
    (homes / "nsight-compute" / "2099.2").mkdir(parents=True)
    (homes / "secret.txt").write_text("not for a profile")
    for place in (toolkit / "nsight-compute-2099.1", homes / "nsight-compute" / "2099.2"):
        (place / "ncu").write_text("real")
    launcher = toolkit / "bin" / "ncu"
    launcher.write_text(f'#!/bin/sh\ncat "$(dirname "$0")/../nsight-compute-2099.1/ncu" {homes}/nsight-compute/*/ncu\n')
    launcher.chmod(0o755)
    assert ncu_places(str(launcher), (homes,)) == (toolkit / "nsight-compute-2099.1", homes / "nsight-compute")
    work = tmp_path / "work"
    work.mkdir()
    command = [str(launcher)]
    places = ncu_places(str(launcher), (homes,))
    seen = run_confined(
        confined(), command, Confinement(workdir=work, toolkit=str(launcher), readable=places), timeout_s=60
    )
    assert seen.returncode == 0 and seen.stdout == "realreal", seen.stdout + seen.stderr
    hidden = run_confined(confined(), command, Confinement(workdir=work, toolkit=str(launcher)), timeout_s=60)
    assert hidden.returncode != 0  # without them, the home's folder is not there
    peek = run_confined(
        confined(),
        ["cat", str(homes / "secret.txt")],
        Confinement(workdir=work, toolkit=str(launcher), readable=places),
        timeout_s=60,
    )
    assert peek.returncode != 0 and "not for a profile" not in peek.stdout


@needs_sandbox
@pytest.mark.parametrize("behaviour", ["floods", "hangs"])
def test_a_finalist_that_floods_or_hangs_its_profile_fails_it_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str
) -> None:
    """A model's finalist runs its own host code in the profiling harness: output without end stops at the run's
    file size (it went through a pipe into this process's memory until the time limit), and a run past the time
    limit is an EvaluationError naming it (it was a TimeoutExpired that no caller caught: the search died). Here a
    stand-in ncu does what such a harness would; the candidate and harness are built with real nvcc."""
    import time

    import r1build.profile as profile_module
    from r1build.errors import EvaluationError
    from r1build.profile import Profiler
    from r1build.records import Origin

    monkeypatch.setattr(profile_module, "PROFILE_FILE_SIZE", 1 << 20)
    ncu = tmp_path / "ncu-bin" / "ncu"
    ncu.parent.mkdir()
    act = "exec head -c 50000000 /dev/zero" if behaviour == "floods" else "exec sleep 60"
    ncu.write_text(f"#!/bin/sh\n{act}\n")
    ncu.chmod(0o755)
    (tmp_path / "proj").mkdir()
    manifest = Project(tmp_path / "proj", tmp_path / "cache").write()
    candidate = Candidate(kernel_source(1), Origin("generated", None))
    started = time.monotonic()
    with pytest.raises(EvaluationError) as failed:
        Profiler(str(ncu), timeout_s=8).profile(manifest, manifest.kernel("vadd"), "sm_90", candidate)
    if behaviour == "floods":
        assert f"its output passed {1 << 20} bytes" in str(failed.value)
    else:
        assert "profiling did not finish within 8 s" in str(failed.value)
        assert time.monotonic() - started < 60


@dataclass
class FirstFailsProfiler(RecordedProfiler):
    """The first finalist's own profiling run fails (its harness printed without end, say); the others' succeed."""

    def profile(self, manifest: Manifest, spec: KernelSpec, arch: str, candidate: Candidate) -> Profile:
        from r1build.errors import CandidateProfileError

        if not self.profiled:
            self.profiled.append(candidate.digest)
            raise CandidateProfileError(f"profiling failed (its output passed {1 << 30} bytes): xxxx")
        return super().profile(manifest, spec, arch, candidate)


def test_a_finalist_whose_own_profile_fails_is_skipped_and_the_others_are_profiled(tmp_path: Path) -> None:
    """A failure of the candidate's own making (CandidateProfileError) leaves that finalist unprofiled; profiling
    stays on (it was turned off for the whole search: one hostile finalist took the findings from every other)."""
    project = Project(tmp_path, tmp_path / "cache")
    manifest = project.write(budget={"rounds": 1, "samples": 2, "candidates": 2, "patience": 2})
    replies = [Answer(answer(kernel_source(1, time_us=30.0))), Answer(answer(kernel_source(2, time_us=40.0)))]
    profiler = FirstFailsProfiler()
    with ChatServer(replies) as server:
        outcome = _search(project, manifest, manifest.kernel("vadd"), MarkerJudge(), profiler, server)
    assert len(profiler.profiled) == 2  # both finalists were tried
    profiled = [r for r in outcome.results if r.profile is not None]
    assert len(profiled) == 1 and profiled[0].candidate == profiler.profiled[1]
