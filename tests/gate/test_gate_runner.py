"""One seam for subprocesses: the gate runs nvcc through the runner it is handed (like pypa/build's ``runner=``),
so a test sees the exact command line of a compile without running nvcc."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from r1build.cache import Cache
from r1build.gate import StaticGate
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin
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
