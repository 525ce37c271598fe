"""Profiler feedback on a GPU with Nsight Compute (the H200): a root baseline profiled for real, and ncu's findings
in a real round's feedback (the local chat server, the real GPU evaluator)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.keys import decision_key
from r1build.manifest import load_manifest
from r1build.profile import Profiler, find_ncu, profile_summary
from r1build.records import Candidate, Origin
from tests.generate.chat_server import Answer, ChatServer
from tests.generate.gen_support import KEY, Project, answer, kernel_source

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ncu() -> str:
    found = find_ncu()
    if found is None:
        pytest.skip("ncu (Nsight Compute) is not installed")
    # a CUDA toolkit's ncu is a launcher: without Nsight Compute beside it, it only says so (seen on an H100 image)
    done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0 or "Version" not in done.stdout:
        pytest.skip(f"{found} does not run: {(done.stdout + done.stderr).strip()[:200]}")
    return found


def test_ncu_profiles_the_root_baselines(ncu: str) -> None:
    manifest = load_manifest(ROOT / "kernels.toml")
    profiler = Profiler(ncu)
    for name in ("silu_mul", "sum_all"):
        spec = manifest.kernel(name)
        assert spec.baseline is not None
        candidate = Candidate((manifest.root / spec.baseline).read_text(), Origin("baseline", path=spec.baseline))
        profile = profiler.profile(manifest, spec, "sm_90", candidate)
        assert profile.tool.startswith("ncu ") and profile.kernels, name
        main_kernel = max(profile.kernels, key=lambda k: k.duration_us or 0)
        assert main_kernel.duration_us and main_kernel.duration_us > 1
        assert main_kernel.dram_pct is not None and main_kernel.dram_pct > 0
        assert main_kernel.achieved_occupancy_pct is not None and main_kernel.stalls
        print(name, profile_summary(profile))
    # silu_mul streams three arrays: its summary names what bounds it (memory or latency: the baseline's one
    # element per thread reaches about 40% of DRAM peak on an H200) and its top stall
    summary = profile_summary(
        profiler.profile(
            manifest,
            manifest.kernel("silu_mul"),
            "sm_90",
            Candidate((manifest.root / "kernels/silu_mul.cu").read_text(), Origin("baseline")),
        )
    )
    assert ("memory-bound" in summary or "latency-bound" in summary) and "top stall: " in summary, summary


def test_ncu_findings_reach_a_real_rounds_feedback(
    ncu: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "proj").mkdir()
    project = Project(tmp_path / "proj", tmp_path / "cache")
    # target-share 1.5: the search must reach round 1 (whose prompts carry round 0's findings) even when the
    # baseline is already near the floor
    manifest = project.write(
        baseline=True,
        budget={"rounds": 2, "samples": 2, "candidates": 4, "patience": 2, "target-share": 1.5, "wall-time-s": 600},
    )
    replies = [Answer(answer(kernel_source(1))), Answer(answer(kernel_source(2))), Answer(answer(kernel_source(3)))]
    with ChatServer(replies) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
        monkeypatch.setenv("R1BUILD_NCU", ncu)
        assert main(["resolve", "-m", str(project.root), "--cache-dir", str(project.cache_dir)]) == 0
        later = [r.prompt for r in server.requests if "so far" in r.prompt or len(r.messages) > 1]
    assert later and any("Nsight Compute: " in p for p in later), later[:1]
    with Cache(project.cache_dir) as cache:
        decision = cache.get_decision(decision_key(manifest, manifest.kernel("vadd"), "sm_90"))
    assert decision is not None
    profiled = [r for r in decision.results if r.profile is not None]
    assert profiled and all(r.timing is not None for r in profiled)
    page = tmp_path / "report.html"
    assert main(["report", "-m", str(project.root), "--cache-dir", str(project.cache_dir), "-o", str(page)]) == 0
    assert "Nsight Compute" in page.read_text()
