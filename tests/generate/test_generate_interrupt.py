"""Ctrl-C while a search gates its seeds: a real ``r1build resolve`` process, whose nvcc is a wrapper that logs each
compile and takes its time, is interrupted once the first seed compile started. It stops within a second or two
(the compiles running are stopped, the ones queued never start), exits 130 without a traceback, and the cache keeps
what it held and caches no verdict of a stopped compile."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from r1build.records import Result
from tests.generate.chat_server import ChatServer, Stall
from tests.generate.gen_support import Project, env_for, kernel_source

pytestmark = pytest.mark.slow  # a process, a server and nvcc

WRAPPER = """#!/bin/sh
case "$*" in
  *.cu*) echo "start $$" >> "{log}"; sleep 30 ;;
esac
exec "{nvcc}" "$@"
"""


def _slow_nvcc(tmp: Path) -> tuple[Path, Path]:
    """An nvcc that logs each compile of a ``.cu`` file and sleeps 30 s before it; returns it and its log."""
    real = shutil.which("nvcc")
    if real is None:
        pytest.skip("nvcc is not installed")
    log = tmp / "nvcc.log"
    wrapper = tmp / "nvcc"
    wrapper.write_text(WRAPPER.format(log=log, nvcc=real))
    wrapper.chmod(0o755)
    return wrapper, log


@pytest.mark.parametrize("offline", [False, True], ids=["search-seed-gate", "gate-only"])
def test_ctrl_c_during_the_seed_gate_stops_at_once(project: Project, tmp_path: Path, offline: bool) -> None:
    """Online, the search gates the seeds in a worker thread of its event loop; offline, the resolve's gate-only
    batch compiles in the main thread's pool."""
    project.write(baseline=True, tunables={"BLOCK": [32 * i for i in range(1, 17)]}, budget={"rounds": 1})
    (project.root / "vadd.cu").write_text(kernel_source(99, extra='static_assert(BLOCK > 0, "");\n'))
    nvcc, log = _slow_nvcc(tmp_path)
    kept = Result(candidate="0" * 64, arch="sm_90", status="passed")
    with project.cache() as cache:
        cache.put_gate("kept-before", kept)
        before = {e.key for e in cache.entries()}
    argv = [sys.executable, "-m", "r1build.cli.main", "resolve", "-m", str(project.root), "--no-gpu"]
    argv += ["--offline"] if offline else []
    with ChatServer([Stall()]) as server:
        env = {
            **os.environ,
            **env_for(server.url),
            "R1BUILD_CACHE_DIR": str(project.cache_dir),
            "R1BUILD_NVCC": str(nvcc),
            "R1BUILD_SANDBOX": "off",
        }
        env.pop("OPENAI_API_KEY", None)
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None and not log.exists():
                time.sleep(0.05)
            assert process.poll() is None and log.exists(), "the seed gate did not start a compile"
            time.sleep(0.3)  # the other compile slots start theirs
            process.send_signal(signal.SIGINT)
            sent = time.monotonic()
            try:
                _, err = process.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                err = ""
            took = time.monotonic() - sent
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert took < 2.5, f"took {took:.1f} s to stop after Ctrl-C"
    assert process.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert len(log.read_text().splitlines()) < 16  # the queued seeds never compiled
    with project.cache() as cache:
        after = {e.key for e in cache.entries()}
        assert before <= after and cache.verify() == [] and cache.integrity() is None
        assert cache.get_gate("kept-before") == kept
        assert [e.key for e in cache.entries("gate")] == [e for e in sorted(before) if e.startswith("gate/")]
