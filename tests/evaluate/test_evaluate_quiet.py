"""The GPU's quiet while it times: checks share it, sanitizer runs stop at a hold (their harness says so), timing
takes it alone. On the CPU: the lock's rules, the harness's hold, and a runner's stand-in sanitizer that drives the
real harness's hold between its libraries."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from r1build.evaluate.child.harness import HELD, RESUMED, wait_while_held
from r1build.evaluate.sanitizer.runner import FINISHED, SanitizerRunner, hold_marker
from r1build.evaluate.slots import Quiet, Taking


def _later(seconds: float, fn: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _taking(quiet: Quiet, inside: Callable[[], object] = lambda: None) -> tuple[threading.Thread, threading.Event]:
    """A thread that takes the GPU alone (calls ``inside`` there); the event is set once it got it."""
    got = threading.Event()

    def take() -> None:
        with quiet.exclusive():
            got.set()
            inside()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    return t, got


def test_timing_waits_for_running_checks_and_new_checks_wait_for_timing(tmp_path: Path) -> None:
    quiet = Quiet(tmp_path / "hold")
    order: list[str] = []

    def timing() -> None:
        order.append("timing")
        time.sleep(0.2)
        order.append("timing done")

    with quiet.shared():
        taker, got = _taking(quiet, timing)
        time.sleep(0.2)
        assert not got.is_set()  # a check is running: timing waits
        order.append("check done")
    assert got.wait(5)

    def check() -> None:
        with quiet.shared():
            order.append("next check")

    checker = threading.Thread(target=check)
    checker.start()
    taker.join(5)
    checker.join(5)
    assert order == ["check done", "timing", "timing done", "next check"]


def test_a_sanitizer_run_must_say_it_stopped_for_this_very_hold(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    quiet = Quiet(hold)
    said: list[str | None] = [None]
    seen: list[str] = []
    with quiet.pausable(lambda: said[0]):
        taker, got = _taking(quiet, lambda: seen.append(hold.read_text()))
        time.sleep(0.2)
        assert not got.is_set() and hold.read_text() == "1"  # running, not stopped yet: the hold file is out
        said[0] = "0"  # a stop for an earlier hold does not count
        time.sleep(0.1)
        assert not got.is_set()
        said[0] = "1"
        taker.join(5)
        assert seen == ["1"] and not hold.exists()  # the hold names its generation; lifted after the timing
        # the next taking is a new generation: the run's word for the last one is stale
        taker, got = _taking(quiet, lambda: seen.append(hold.read_text()))
        time.sleep(0.2)
        assert not got.is_set()
        said[0] = "2"
        taker.join(5)
        assert seen == ["1", "2"]


def test_runs_started_under_a_hold_do_not_delay_it_and_without_a_hold_file_runs_are_waited_for(
    tmp_path: Path,
) -> None:
    quiet = Quiet(tmp_path / "hold")
    said: list[str | None] = [None]
    with quiet.pausable(lambda: said[0]):
        taker, got = _taking(quiet)
        time.sleep(0.1)
        # a run that begins while the taking waits: its harness finds the hold file before it touches CUDA, so
        # only the run that was going must stop
        late = quiet.pausable(lambda: None)
        late.__enter__()
        said[0] = "1"
        taker.join(5)
        assert got.is_set()
    # but under the next hold the late run must say it stopped, like any other
    taker, got = _taking(quiet)
    time.sleep(0.2)
    assert not got.is_set()
    late.__exit__(None, None, None)  # (or end)
    taker.join(5)
    assert got.is_set()
    plain = Quiet(None)
    assert plain.hold_file is None
    with plain.pausable(lambda: None):  # like a check: the taking waits for its end
        taker, got = _taking(plain)
        time.sleep(0.2)
        assert not got.is_set()
    taker.join(5)
    assert got.is_set()


def test_the_harness_stops_while_the_hold_file_exists(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    out = io.StringIO()
    wait_while_held(str(hold), "tok")  # no hold: no wait, nothing said
    wait_while_held("", "tok")
    hold.write_text("3")
    _later(
        0.1, lambda: (hold.with_name("part").write_text("4"), hold.with_name("part").replace(hold))
    )  # lifted and taken again while it slept: a new generation
    _later(0.3, hold.unlink)
    start = time.monotonic()
    with redirect_stdout(out):
        wait_while_held(str(hold), "tok")
    assert time.monotonic() - start >= 0.25
    lines = out.getvalue().splitlines()
    assert lines == [f"{HELD} 3 tok", f"{HELD} 4 tok", f"{RESUMED} tok"]
    assert [hold_marker(line, "tok") for line in lines] == [("held", "3"), ("held", "4"), ("resumed", "")]
    assert hold_marker(f"{HELD} 3 other", "tok") is None and hold_marker(f"{HELD} 3 4 tok", "tok") is None


def test_a_held_harness_whose_evaluator_is_gone_ends_instead_of_waiting_for_ever(tmp_path: Path) -> None:
    """The real harness, held by a hold file that an evaluator killed while timing left behind: it ends (exit 3,
    saying why) within a second or so, before it touches CUDA, instead of holding its sanitizer for ever."""
    import subprocess

    from r1build.evaluate.child.harness import FAILED
    from r1build.evaluate.sanitizer.runner import HARNESS

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process id that no longer exists
    hold = tmp_path / "hold"
    hold.write_text("1")
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "libs": [str(tmp_path / "never-loaded.so")],
                "entry": "k",
                "argtypes": [],
                "shapes": [],
                "token": "tok",
                "hold": str(hold),
                "parent": gone.pid,
            }
        )
    )
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(HARNESS), str(job)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 3 and time.monotonic() - start < 10
    assert done.stdout.splitlines() == [f"{HELD} 1 tok"]  # held, then gone: no library begun
    assert f"{FAILED} held, and the evaluator that holds the GPU (process {gone.pid}) is gone" in done.stderr
    # its evaluator alive (this process): it waits, and goes on once the hold is lifted
    payload = json.loads(job.read_text())
    payload.update(parent=os.getpid(), libs=[])
    job.write_text(json.dumps(payload))
    _later(1.2, hold.unlink)
    done = subprocess.run(
        [sys.executable, str(HARNESS), str(job)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "r1build-harness: done, shapes: 0 libraries 0 tok"


# A stand-in compute-sanitizer that runs like the harness: it loads the real harness by path and, before each
# "library", waits while the job's hold file exists; it logs each library it gets to, with the time.
FAKE = """\
import importlib.util, json, os, sys, time
spec = importlib.util.spec_from_file_location("harness", {harness!r})
harness = importlib.util.module_from_spec(spec)
spec.loader.exec_module(harness)
job = json.load(open(sys.argv[-1]))
token, hold = job["token"], job.get("hold", "")
here = os.path.dirname(os.path.abspath(sys.argv[-1]))
harness.wait_while_held(hold, token)
for i, lib in enumerate(job["libs"]):
    print(f"r1build-harness: begin {{i}} {{token}}", flush=True)
    harness.wait_while_held(hold, token)
    with open(os.path.join(here, "calls.log"), "a") as log:
        log.write(f"{{os.path.basename(lib)}} {{time.monotonic()}}\\n")
    time.sleep(0.05)
    print(f"r1build-harness: end {{i}} {{token}}", flush=True)
print(f"r1build-harness: done, shapes: {{len(job['shapes'])}} libraries {{len(job['libs'])}} {{token}}", flush=True)
"""


def _stand_in(tmp_path: Path, script: str, timeout_s: float) -> SanitizerRunner:
    """A runner whose compute-sanitizer is ``script``, run by this Python with the job file as its last argument."""
    path = tmp_path / "fake_sanitizer.py"
    path.write_text(script)
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {path} "$@"\n')
    exe.chmod(0o755)
    return SanitizerRunner(str(exe), {"PATH": "/usr/bin:/bin"}, timeout_s=timeout_s)


def _job(tmp_path: Path, libs: list[str], token: str, hold: Path | None) -> Path:
    """A harness job of ``libs`` (one empty shape) under ``token``, held by ``hold``."""
    job = tmp_path / "job.json"
    fields = {
        "libs": libs,
        "entry": "k",
        "argtypes": [],
        "shapes": [{}],
        "token": token,
        "hold": str(hold) if hold else "",
    }
    job.write_text(json.dumps(fields))
    return job


def _pausable_run(
    quiet: Quiet, runner: SanitizerRunner, job: Path, held_s: list[float] | None = None
) -> tuple[threading.Thread, list[str]]:
    """A started thread running memcheck over ``job`` as a pausable run of ``quiet``, and where its verdict goes
    (and the seconds the run says it was held, into ``held_s``)."""
    outcome: list[str] = []

    def run() -> None:
        with quiet.pausable(lambda: runner.held(job)):
            found = runner.run("memcheck", job)
            outcome.append(found.outcome.verdict)
            if held_s is not None:
                held_s.append(found.held_s)

    t = threading.Thread(target=run)
    t.start()
    return t, outcome


def test_a_held_sanitizer_run_does_no_gpu_work_and_is_not_killed_for_silence(tmp_path: Path) -> None:
    from r1build.evaluate.sanitizer.runner import HARNESS

    runner = _stand_in(tmp_path, FAKE.format(harness=str(HARNESS)), timeout_s=1.0)
    quiet = Quiet(tmp_path / "hold")
    libs = [f"lib{i}.so" for i in range(40)]
    job = _job(tmp_path, libs, "t0k", quiet.hold_file)
    held_s: list[float] = []
    t, outcome = _pausable_run(quiet, runner, job, held_s)
    time.sleep(0.5)  # the run is under way
    with quiet.exclusive():
        taken = time.monotonic()
        assert runner.held(job) == "1"
        time.sleep(2.5)  # longer than the runner's limit on silence: a held run is not silent
        released = time.monotonic()
    t.join(30)
    assert outcome == ["clean"]
    assert len(held_s) == 1 and 2.0 <= held_s[0] <= released - taken + 1.0  # the run counts the time it was held
    calls = [line.split() for line in (tmp_path / "calls.log").read_text().splitlines()]
    assert [c[0] for c in calls] == libs  # every library once, in order
    during = [c[0] for c in calls if taken <= float(c[1]) <= released]
    assert during == []  # nothing started while the GPU was taken
    assert any(float(c[1]) < taken for c in calls) and any(float(c[1]) > released for c in calls)


@pytest.mark.gpu
def test_a_real_sanitizer_run_stops_at_the_hold_before_it_touches_cuda(tmp_path: Path) -> None:
    import os

    from r1build.evaluate.sanitizer.runner import find_sanitizer

    exe = find_sanitizer()
    assert exe is not None, "compute-sanitizer is installed beside nvcc on a GPU machine"
    runner = SanitizerRunner(exe, dict(os.environ), timeout_s=60.0)
    quiet = Quiet(tmp_path / "hold")
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"libs": [], "entry": "k", "argtypes": [], "shapes": [], "token": "t0k"}))
    job_held = json.loads(job.read_text())
    job_held["hold"] = str(quiet.hold_file)
    job.write_text(json.dumps(job_held))
    outcome: list[str] = []
    said: list[str] = []

    def run() -> None:
        with quiet.pausable(lambda: runner.held(job)):
            found = runner.run("memcheck", job).outcome
            outcome.append(found.verdict)
            said.append(found.detail)

    with quiet.exclusive():
        t = threading.Thread(target=run)
        t.start()  # started under the hold: its harness waits before CUDA
        deadline = time.monotonic() + 60
        while runner.held(job) != "1" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runner.held(job) == "1"
        assert not outcome
    t.join(120)
    assert outcome == ["clean"], said


def test_a_run_that_says_it_is_held_when_no_hold_is_out_is_still_killed_for_silence(tmp_path: Path) -> None:
    # says HELD with the job's token, then stalls: only a hold file that exists makes that time not silence
    stalls = (
        "import json, sys, time\njob = json.load(open(sys.argv[-1]))\n"
        "print(f\"r1build-harness: held 1 {job['token']}\", flush=True)\ntime.sleep(30)\n"
    )
    runner = _stand_in(tmp_path, stalls, timeout_s=0.5)
    job = _job(tmp_path, ["a.so", "b.so"], "t", tmp_path / "hold")
    start = time.monotonic()
    found = runner.run("memcheck", job)
    assert found.outcome.verdict == "unfinished" and "no progress" in found.outcome.detail
    assert time.monotonic() - start < 10


def test_checks_go_on_until_the_sanitizer_runs_have_stopped_then_the_taking_waits_for_them(tmp_path: Path) -> None:
    """A taking first waits for the sanitizer runs to stop, checks still starting meanwhile (a run can take a
    second to reach its next stop, and the GPU would idle); then new checks wait and the running ones end."""
    quiet = Quiet(tmp_path / "hold")
    said: list[str | None] = [None]
    takings: list[Taking] = []
    order: list[str] = []

    def take() -> None:
        with quiet.exclusive() as taking:
            order.append("timing")
            takings.append(taking)

    def check(name: str, seconds: float) -> None:
        with quiet.shared():
            order.append(name)
            time.sleep(seconds)
        order.append(f"{name} done")

    with quiet.pausable(lambda: said[0]):
        taker = threading.Thread(target=take)
        taker.start()
        time.sleep(0.1)
        during = threading.Thread(target=check, args=("check while the run goes on", 0.4))
        during.start()  # not held up: the run has not stopped yet
        time.sleep(0.1)
        assert order == ["check while the run goes on"]
        said[0] = "1"  # the run stops; the taking now waits for the running check only
        time.sleep(0.05)
        after = threading.Thread(target=check, args=("check after the stop", 0.0))
        after.start()  # waits for the timing
        taker.join(5)
        after.join(5)
        during.join(5)
    assert order == [
        "check while the run goes on",
        "check while the run goes on done",
        "timing",
        "check after the stop",
        "check after the stop done",
    ]
    [taking] = takings
    assert 0.15 <= taking.runs_s < taking.checks_s and 0.4 <= taking.checks_s < 2.0


# A stand-in compute-sanitizer whose harness says it is done with the GPU, then takes a while to exit (the tool's
# teardown); a second token's DONE line, as a candidate could print one, comes first and must not count.
EXITING = """\
import json, sys, time
job = json.load(open(sys.argv[-1]))
print("r1build-harness: begin 0 " + job["token"], flush=True)
print("r1build-harness: end 0 " + job["token"], flush=True)
print("r1build-harness: done, shapes: 1 libraries 1 someone-else", flush=True)
open(sys.argv[-1] + ".said", "w").close()
time.sleep(0.5)
print("r1build-harness: done, shapes: 1 libraries 1 " + job["token"], flush=True)
time.sleep(1.0)
"""


def test_a_run_done_with_the_gpu_does_not_delay_a_taking_while_it_exits(tmp_path: Path) -> None:
    runner = _stand_in(tmp_path, EXITING, timeout_s=5.0)
    quiet = Quiet(tmp_path / "hold")
    job = _job(tmp_path, ["a.so"], "t0k", quiet.hold_file)
    t, outcome = _pausable_run(quiet, runner, job)
    deadline = time.monotonic() + 10
    while not job.with_name("job.json.said").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert runner.held(job) is None  # another token's DONE line says nothing of this run
    while runner.held(job) != FINISHED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.held(job) == FINISHED and t.is_alive()  # done with the GPU, not yet exited
    start = time.monotonic()
    with quiet.exclusive() as taking:
        assert time.monotonic() - start < 0.5 and taking.runs_s < 0.5
    t.join(30)
    assert outcome == ["clean"]
