"""One seam for subprocesses: the gate runs nvcc through the runner it is handed (like pypa/build's ``runner=``),
so a test sees the exact command line of a compile without running nvcc."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from r1build.cache import Cache
from r1build.gate import StaticGate
from r1build.judge import Job, StreamingEvaluator
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin, Result
from r1build.toolchain.nvcc import Toolchain
from r1build.toolchain.runner import Runner, run_process

ROOT = Path(__file__).resolve().parents[2]


class Recording:
    """A runner that records each command and answers as a failed nvcc would, running nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], Path | None]] = []

    def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        merge_stderr: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), cwd))
        return subprocess.CompletedProcess(list(argv), 1, "k.cu(1): error: recorded, not compiled\n", "")


def test_a_recording_runner_sees_the_nvcc_command_of_a_gate_compile(tmp_path: Path) -> None:
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = manifest.kernel("silu_mul")
    baseline = Candidate("// never compiled\n", Origin("baseline", path="kernels/silu_mul.cu"), {"BLOCK": 128})
    recording: Runner = Recording()
    nvcc = "/nonexistent/bin/nvcc"  # were it run, the gate would fail to start it
    tc = Toolchain(nvcc, "Cuda compilation tools, release 13.0, V13.0.48\nBuild cuda_13.0.r13.0/compiler.0_0")
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache, toolchain=tc, runner=recording)
        (result,) = gate.judge(manifest, spec, [("sm_90", baseline)])
    assert result.status == "compile_error" and "recorded, not compiled" in result.detail
    assert isinstance(recording, Recording)
    ((argv, cwd),) = recording.calls
    assert argv[0] == nvcc and argv[argv.index("-gencode") + 1] == "arch=compute_90,code=sm_90"
    assert "-DBLOCK=128" in argv and argv[-4:] == ["-c", "silu_mul.cu", "-o", "silu_mul.o"]
    assert cwd is not None and not cwd.exists()  # the gate's scratch folder, gone after the compile


def test_the_default_runner_runs_to_the_end_and_stops_at_the_timeout(tmp_path: Path) -> None:
    done = run_process(["sh", "-c", "echo out; echo err >&2; exit 3"], cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    merged = run_process(["sh", "-c", "echo out; echo err >&2"], merge_stderr=True)
    assert merged.stdout == "out\nerr\n"
    try:
        run_process(["sh", "-c", "echo partial; sleep 5"], timeout_s=0.5)
    except subprocess.TimeoutExpired as stopped:
        assert "partial" in str(stopped.output)
    else:
        raise AssertionError("no timeout")


class Slow(Recording):
    """A recording runner whose compile of the ``-DBLOCK=512`` variant waits for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def __call__(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if "-DBLOCK=512" in argv:
            assert self.release.wait(30)
        return super().__call__(argv, **kwargs)


def test_each_verdict_is_told_as_its_own_compile_ends_and_cached_ones_at_once(tmp_path: Path) -> None:
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = manifest.kernel("silu_mul")
    variants = [
        Candidate("// never compiled\n", Origin("baseline", path="kernels/silu_mul.cu"), {"BLOCK": b})
        for b in (512, 128, 256)
    ]
    job = Job(manifest, spec, "sm_90", variants)
    runner = Slow()
    tc = Toolchain("/nonexistent/bin/nvcc", "Cuda compilation tools, release 13.0, V13.0.48\nBuild cuda_13.0.r13.0/x")
    told: list[int] = []
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache, toolchain=tc, runner=runner, jobs=3)
        assert isinstance(gate, StreamingEvaluator)
        result: list[list[Result]] = []
        judging = threading.Thread(target=lambda: result.append(gate.evaluate_each(job, lambda i, r: told.append(i))))
        judging.start()
        deadline = time.monotonic() + 30
        while len(told) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(told) == [1, 2] and judging.is_alive()  # the first variant's compile still runs
        runner.release.set()
        judging.join(30)
        assert sorted(told) == [0, 1, 2] and [r.status for r in result[0]] == ["compile_error"] * 3
        compiles = len(runner.calls)
        again: list[tuple[int, str]] = []
        results = gate.evaluate_each(job, lambda i, r: again.append((i, r.status)))
        assert len(runner.calls) == compiles  # from the cache, told all the same
        assert sorted(again) == [(i, "compile_error") for i in range(3)] and results == result[0]
