"""What a process that loads candidate libraries can reach: the real worker command of a GPU slot (as
:func:`~r1build.evaluate.slots.make_slot` builds it) runs a probe in place of the worker module. The probe tries
what a candidate's host code could: libc and raw system calls on canary files (the home folder, the project, the
cache, the host's /tmp), the network, other processes' /proc, and its own environment."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from r1build.evaluate.devices import GpuInfo
from r1build.evaluate.slots import WORKER_MODULE, make_slot
from r1build.sandbox import Confinement
from r1build.sandbox.bwrap import Bubblewrap
from r1build.sandbox.policy import python_places
from tests.sandbox.support import BWRAP, needs_sandbox

pytestmark = needs_sandbox
CANARY = "R1BUILD-CANARY-c41d"

PROBE = r"""
import ctypes, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
SYS_openat, AT_FDCWD, O_RDONLY = 257, -100, 0
found = {}
for path in json.loads(sys.argv[1]):
    try:
        with open(path) as f:
            found["libc " + path] = f.read()
    except OSError as e:
        found["libc " + path] = type(e).__name__
    fd = libc.syscall(SYS_openat, AT_FDCWD, path.encode(), O_RDONLY)  # a raw system call, no libc wrapper
    if fd >= 0:
        buf = ctypes.create_string_buffer(4096)
        n = libc.read(fd, buf, 4096)
        found["raw " + path] = buf.raw[:max(n, 0)].decode(errors="replace")
    else:
        found["raw " + path] = "refused"
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2).sendall(b"R1BUILD-LEAK")
    found["net"] = "connected"
except OSError as e:
    found["net"] = type(e).__name__
found["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
found["env"] = dict(os.environ)
found["root"] = sorted(os.listdir("/"))
import getpass
try:  # torch's compile caches ask for the user's name; the sandbox has no passwd entry for this uid
    found["user"] = getpass.getuser()
except Exception as e:
    found["user"] = repr(e)
if len(sys.argv) > 3:  # on a GPU: CUDA works in here
    import cupy
    found["cuda"] = float((cupy.arange(1000, dtype=cupy.float32) * 2).sum())
    found["device"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
print(json.dumps(found))
"""


class _Listener:
    """A TCP server on the host's loopback that records whatever reaches it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                self.got.append(conn.recv(100))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _canaries(tmp_path: Path) -> list[Path]:
    """A canary in a home-like folder, a project beside the evaluator, a cache, and right beside the libraries."""
    out = []
    for where in ("home/.ssh/id_ed25519", "project/kernels.toml", "cache/decisions.db", "evaluate/secret.txt"):
        path = tmp_path / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{CANARY} {where}\n")
        out.append(path)
    return out


def test_a_workers_host_code_reaches_no_file_network_or_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = _probe_a_worker(tmp_path, monkeypatch, gpu=None)
    assert "cuda" not in found
    assert found["user"] == "r1build"  # named, though no passwd entry is shown: not the host's user name


@pytest.mark.gpu
@pytest.mark.slow
def test_a_gpu_worker_runs_cuda_inside_the_sandbox_and_reaches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same probe through a slot of the real GPU, which also runs a cupy kernel in there."""
    cupy = pytest.importorskip("cupy")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        count = 0
    if count == 0:
        pytest.skip("no GPU visible")
    found = _probe_a_worker(tmp_path, monkeypatch, gpu=0)
    assert found["cuda"] == 999000.0 and found["device"]


def _probe_a_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, gpu: int | None) -> dict[str, Any]:
    """Runs the probe with the command and environment of a slot's worker; checks what every run must show."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("R1BUILD_SIGNING_KEY", CANARY)
    canaries = _canaries(tmp_path)
    root = tmp_path / "evaluate" / "run"
    (root / "build").mkdir(parents=True)
    (root / "build" / "lib.so").write_text("a library under test")
    info = GpuInfo(name="none", arch="sm_90", index=gpu or 0, memory=1 << 30)
    slot = make_slot(info, root, sanitize=False, nvcc=None)
    command = slot.worker.command
    assert command[0] == BWRAP and command[-2:] == ["-m", WORKER_MODULE]
    (slot.workdir / "probe.py").write_text(PROBE)
    listener = _Listener()
    try:
        wanted = [*map(str, canaries), str(root / "build" / "lib.so"), "/etc/hostname", "/etc/shadow"]
        run = [*command[:-2], str(slot.workdir / "probe.py"), json.dumps(wanted), str(listener.port)]
        run += ["cuda"] if gpu is not None else []
        done = subprocess.run(
            run, env=slot.worker.env, cwd=slot.workdir, capture_output=True, text=True, timeout=120, check=False
        )
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    assert CANARY not in done.stdout
    assert found[f"libc {root / 'build' / 'lib.so'}"] == "a library under test"  # what it needs is there
    assert found["net"] != "connected" and listener.got == []
    assert max(found["pids"]) < 10 and os.getpid() not in found["pids"]  # a PID namespace of its own
    assert not any(k in found["env"] for k in ("OPENAI_API_KEY", "R1BUILD_SIGNING_KEY"))
    assert "home" not in found["root"] and "var" not in found["root"]
    return found


def test_a_secret_folder_around_a_bound_one_is_covered(tmp_path: Path) -> None:
    """A virtual environment inside a project is shown; the project around it is not."""
    assert BWRAP is not None
    project = tmp_path / "project"
    venv = project / ".venv"
    venv.mkdir(parents=True)
    (venv / "ok.txt").write_text("ok")
    (project / "team.pem").write_text(CANARY)
    box = Bubblewrap(BWRAP, python=(venv, *python_places()), secrets=(project,))
    work = tmp_path / "work"
    work.mkdir()
    script = f"import os; print(open('{venv}/ok.txt').read(), sorted(os.listdir('{project}')))"
    argv = box.command([sys.executable, "-c", script], Confinement(workdir=work, python=True))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "['.venv']"]


def test_a_confined_sanitizer_run_dies_with_its_evaluator(tmp_path: Path) -> None:
    """A sanitizer run's harness held by a hold file, started confined (as a slot's runner starts it) by a process
    standing in for the evaluator: when that process is killed, the held harness ends too (``--die-with-parent``),
    so the job names no evaluator process id to watch, which the run's own PID namespace would not show."""
    from r1build.evaluate.sanitizer.runner import HARNESS, SanitizerRunner
    from r1build.sandbox import confined

    hold = tmp_path / "hold"
    hold.write_text("1")
    job = tmp_path / "job.json"
    payload = {"libs": [], "entry": "k", "argtypes": [], "shapes": [], "token": "tok", "hold": str(hold)}
    job.write_text(json.dumps(payload))
    confinement = Confinement(workdir=tmp_path, python=True)
    runner = SanitizerRunner("/bin/true", {}, sandbox=confined(), confinement=confinement)
    assert runner.dies_with_evaluator and not SanitizerRunner("/bin/true", {}).dies_with_evaluator
    inner = confined().command([sys.executable, str(HARNESS), str(job)], confinement)
    evaluator = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess; subprocess.run({inner!r})"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert evaluator.stdout is not None
        assert evaluator.stdout.readline().startswith("r1build-harness: held 1 tok")
        evaluator.kill()
        evaluator.wait(10)
        deadline = time.monotonic() + 10
        while _harnesses(job) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _harnesses(job), "the held harness outlived its evaluator"
    finally:
        evaluator.kill()
        evaluator.communicate()


def _harnesses(job: Path) -> list[str]:
    done = subprocess.run(["pgrep", "-f", str(job)], capture_output=True, text=True, check=False)
    return done.stdout.split()
