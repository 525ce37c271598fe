"""The worker protocol and handle against real child processes that answer, crash, hang or babble (no GPU)."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from r1build.evaluate.child.protocol import PeerClosed, PeerTimeout, ProtocolError, read_message, write_message
from r1build.evaluate.process import WorkerDied, WorkerHandle, WorkerTimedOut, scrubbed_environment

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from r1build.evaluate.child.protocol import read_message, write_message
    rfd, wfd = int(sys.argv[1]), int(sys.argv[2])
    write_message(wfd, {"ok": True, "pid": os.getpid()})
    while True:
        header, bufs = read_message(rfd)
        op = header["op"]
        if op == "exit":
            sys.exit(0)
        if op == "echo":
            for i in range(3):
                write_message(wfd, {"tick": i})
            write_message(wfd, {"ok": True, "n": len(bufs)}, [b[::-1] for b in bufs])
        elif op == "env":
            write_message(wfd, {"ok": True, "env": dict(os.environ)})
        elif op == "slow_ticks":
            for i in range(4):
                time.sleep(0.3)
                write_message(wfd, {"tick": i})
            write_message(wfd, {"ok": True})
        elif op == "segv":
            print("about to crash", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        elif op == "hang":
            time.sleep(3600)
        elif op == "garbage":
            os.write(wfd, b"not a frame at all, just noise")
            time.sleep(3600)
        elif op == "fatal":
            write_message(wfd, {"ok": False, "error": "context lost", "exiting": True})
            sys.exit(3)
""")


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[WorkerHandle]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = scrubbed_environment(
        {**os.environ, "OPENAI_API_KEY": "sk-secret", "DEEPSEEK_API_KEY": "x", "MY_TOKEN": "t", "RANDOM_VAR": "1"},
        home=tmp_path,
        extra={"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    h = WorkerHandle([sys.executable, str(script)], env, tmp_path / "w", start_timeout_s=30)
    yield h
    h.close()


def test_frames_round_trip_through_a_pipe() -> None:
    r, w = os.pipe()
    try:
        big = os.urandom(3 << 20)
        import threading

        t = threading.Thread(target=write_message, args=(w, {"a": [1, 2.5, None], "s": "é"}, [b"", b"xy", big]))
        t.start()
        header, bufs = read_message(r, timeout_s=10)
        t.join()
        assert header == {"a": [1, 2.5, None], "s": "é"}
        assert bufs == [b"", b"xy", big]
        with pytest.raises(PeerTimeout):
            read_message(r, timeout_s=0.05)
        os.write(w, b"JUNKJUNKJUNK")
        with pytest.raises(ProtocolError):
            read_message(r, timeout_s=1)
    finally:
        os.close(r)
        os.close(w)
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(PeerClosed):
        read_message(r, timeout_s=1)
    os.close(r)


def test_requests_ticks_and_scrubbed_environment(handle: WorkerHandle) -> None:
    hello = handle.start()
    assert hello["ok"] and handle.generation == 1
    reply, bufs = handle.request({"op": "echo"}, [b"abc", b""], timeout_s=10)
    assert reply == {"ok": True, "n": 2} and bufs == [b"cba", b""]
    reply, _ = handle.request({"op": "slow_ticks"}, timeout_s=0.9)  # each tick restarts the deadline
    assert reply["ok"]
    env = handle.request({"op": "env"}, timeout_s=10)[0]["env"]
    assert not {"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "MY_TOKEN", "RANDOM_VAR"} & set(env)
    assert env["HOME"] == env["TMPDIR"]


def test_crash_hang_garbage_and_fatal_each_restart_the_worker(handle: WorkerHandle) -> None:
    handle.start()
    first_pid = handle.hello["pid"]
    with pytest.raises(WorkerDied) as died:
        handle.request({"op": "segv"}, timeout_s=10)
    assert "SIGSEGV" in str(died.value) and "about to crash" in died.value.log
    assert handle.request({"op": "echo"}, timeout_s=10)[0]["ok"]
    assert handle.generation == 2 and handle.hello["pid"] != first_pid

    with pytest.raises(WorkerTimedOut):
        handle.request({"op": "hang"}, timeout_s=0.5)
    assert not handle.running
    assert handle.request({"op": "echo"}, timeout_s=10)[0]["ok"] and handle.generation == 3

    with pytest.raises(WorkerDied):
        handle.request({"op": "garbage"}, timeout_s=5)
    reply, _ = handle.request({"op": "fatal"}, timeout_s=5)
    assert reply["exiting"] and not handle.running
    assert handle.request({"op": "echo"}, timeout_s=10)[0]["ok"] and handle.generation == 5


def test_a_worker_that_cannot_start(tmp_path: Path) -> None:
    script = tmp_path / "dies.py"
    script.write_text("import sys\nprint('no cupy here', flush=True)\nsys.exit(2)\n")
    h = WorkerHandle([sys.executable, str(script)], dict(os.environ), tmp_path, start_timeout_s=10)
    with pytest.raises(WorkerDied) as died:
        h.start()
    assert "exit code 2" in str(died.value) and "no cupy here" in died.value.log
