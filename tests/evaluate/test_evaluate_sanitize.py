"""Reading compute-sanitizer reports, and finding the tool (no GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from r1build.evaluate.sanitizer.runner import BatchRun, SanitizerRunner, find_sanitizer, summarize_report
from r1build.evaluate.sanitizer.schedule import SanitizeRuns
from r1build.manifest import Manifest

# Shaped like compute-sanitizer's output (written for this test).
MEMCHECK = """\
========= COMPUTE-SANITIZER
r1build-harness: shape 0
========= Invalid __global__ read of size 4 bytes
=========     at k(const float *, const float *, float *, long)+0x90 in x.cu:11
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f0000000400 is out of bounds
=========     and is 1,021 bytes after the nearest allocation at 0x7f0000000000 of size 124 bytes
=========
========= ERROR SUMMARY: 1 error
"""
RACECHECK = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at k(const float *, float *, long)+0x1a0 in r.cu:15
=========     and Read access at k(const float *, float *, long)+0x180 in r.cu:15 [2048 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
CLEAN = "========= COMPUTE-SANITIZER\nr1build-harness: shape 0\n========= ERROR SUMMARY: 0 errors\n"


def test_reports() -> None:
    found = summarize_report(MEMCHECK)
    assert found is not None
    assert found.startswith("Invalid __global__ read of size 4 bytes")
    assert "by thread (3,0,0)" in found and found.endswith("ERROR SUMMARY: 1 error")
    race = summarize_report(RACECHECK)
    assert race is not None and "Race reported" in race and "(1 error, 0 warnings)" in race
    assert summarize_report(CLEAN) is None
    assert summarize_report("") is None


def test_find_sanitizer(tmp_path: Path) -> None:
    exe = tmp_path / "compute-sanitizer"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert find_sanitizer(None, {"R1BUILD_COMPUTE_SANITIZER": str(exe)}) == str(exe)
    assert find_sanitizer(None, {"R1BUILD_COMPUTE_SANITIZER": str(tmp_path / "missing")}) is None
    assert find_sanitizer(None, {"PATH": str(tmp_path)}) == str(exe)


# A stand-in for compute-sanitizer (the runner's and the batching's own logic, no GPU): it reads the harness job
# (its last argument) and, per library, prints the harness's markers and acts on the library's name: "good" is
# clean, "bad" gets a report between its markers (and the run exits 86 at the end, as --error-exitcode makes it),
# "hang" sleeps, "stuck-<tool>" sleeps under that tool only, "slow" takes 0.3 s, "exit" ends the process early with
# status 0, "crash" ends it with 139, "oom" fails as the harness does when a CUDA call fails (its words on stderr,
# exit 3), "flaky" fails so after its calls ended (the harness's own work) the first time a tool calls it; a file
# fail-start-<tool> beside it makes the next run of that tool fail so before it takes or calls anything (and goes).
# It takes the job's libraries the way the real harness does (its list, or one at a time from its queue folder: the
# harness's own code), and appends a line per library to calls.log: the tool, the run's token and the library's name.
FAKE = """\
import json, os, sys, time
sys.path.insert(0, {harness_dir!r})
import harness
if sys.argv[-1] == "--probe":
    sys.exit(0)
job_path = sys.argv[-1]
job = json.load(open(job_path))
here = os.path.dirname(os.path.abspath(__file__))
token, errors, called = job["token"], 0, 0
tool = sys.argv[sys.argv.index("--tool") + 1]
print("========= COMPUTE-SANITIZER", flush=True)
try:
    os.remove(os.path.join(here, f"fail-start-{tool}"))  # where the file is, the tool's first run fails at its start
except FileNotFoundError:
    pass
else:
    print(harness.FAILED, "cuInit failed: CUDA_ERROR_OUT_OF_MEMORY (2)", file=sys.stderr, flush=True)
    sys.exit(3)
for i, lib in harness.libraries(job, token):
    called += 1
    name = os.path.basename(lib)
    with open(os.path.join(here, "calls.log"), "a") as log:
        log.write(f"{tool} {token} {name}\\n")
    print(f"r1build-harness: begin {i} {token}", flush=True)
    if "hang" in name or f"stuck-{tool}" in name:
        time.sleep(60)
    if "slow" in name:
        time.sleep(0.3)
    if "exit" in name:
        sys.exit(0)
    if "crash" in name:
        print("Segmentation fault", flush=True)
        sys.exit(139)
    if any(k in name and k != job["entry"] for k in ("silu_mul", "softmax_rows")):  # the harness's words for it
        print(harness.FAILED, f"{lib}: undefined symbol: {job['entry']}", file=sys.stderr, flush=True)
        sys.exit(3)
    if "oom" in name:
        print(harness.FAILED, "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)", file=sys.stderr, flush=True)
        print("========= Target application returned an error", flush=True)
        print("========= ERROR SUMMARY: 0 errors", flush=True)
        sys.exit(3)
    if "bad" in name:
        errors += 1
        print(f"========= Invalid __global__ write of size 4 bytes in {name}", flush=True)
        print("=========     by thread (3,0,0) in block (0,0,0)", flush=True)
    print(f"r1build-harness: end {i} {token}", flush=True)
    if "flaky" in name and not os.path.exists(os.path.join(here, f"failed-{tool}")):
        open(os.path.join(here, f"failed-{tool}"), "w").close()
        print(harness.FAILED, "cannot read the queue folder: [Errno 5] Input/output error", file=sys.stderr, flush=True)
        sys.exit(3)
print(f"r1build-harness: done, shapes: {len(job['shapes'])} libraries {called} {token}", flush=True)
print(f"========= ERROR SUMMARY: {errors} error{'' if errors == 1 else 's'}", flush=True)
sys.exit(86 if errors else 0)
"""


def _fake_sanitizer(tmp_path: Path, prologue: str = "") -> Path:
    import sys

    from r1build.evaluate.sanitizer.runner import HARNESS

    script = tmp_path / "fake_sanitizer.py"
    script.write_text(prologue + FAKE.replace("{harness_dir!r}", repr(str(HARNESS.parent))))
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(0o755)
    return exe


def _job(tmp_path: Path, *libs: str, shapes: int = 2) -> Path:
    import json

    job = tmp_path / f"job-{'-'.join(libs)}.json"
    job.write_text(
        json.dumps(
            {
                "libs": [str(tmp_path / n) for n in libs],
                "entry": "k",
                "argtypes": [],
                "shapes": [{}] * shapes,
                "token": "t0k3n",
            }
        )
    )
    return job


def _runner(tmp_path: Path, prologue: str = "", timeout_s: float = 30) -> SanitizerRunner:
    return SanitizerRunner(str(_fake_sanitizer(tmp_path, prologue)), {"PATH": "/usr/bin:/bin"}, timeout_s=timeout_s)


def test_cancel_stops_a_running_sanitizer(tmp_path: Path) -> None:
    import threading
    import time

    runner = _runner(tmp_path)
    job = _job(tmp_path, "hang.so")
    outcomes = []
    t = threading.Thread(target=lambda: outcomes.append(runner.run("memcheck", job)))
    start = time.monotonic()
    t.start()
    time.sleep(1.0)
    assert runner.running(job) == 0  # the markers say which library runs
    runner.cancel(job)
    t.join(10)
    assert outcomes and outcomes[0].outcome.verdict == "canceled"
    assert time.monotonic() - start < 6
    assert runner.run("racecheck", job).outcome.detail == "canceled"  # later runs of a canceled job never start


def test_a_run_is_clean_only_when_the_harness_called_every_library_at_every_shape(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    assert runner.run("memcheck", _job(tmp_path, "good-1.so", "good-2.so")).outcome.verdict == "clean"
    # exit 0 in the second library: it ended the process, nothing after it was checked; the markers name it
    early = runner.run("initcheck", _job(tmp_path, "good-1.so", "exit-2.so", "good-3.so"))
    assert early.outcome.verdict == "unfinished" and "before the last shape" in early.outcome.detail
    assert early.suspect == 1
    crashed = runner.run("memcheck", _job(tmp_path, "good-1.so", "crash-2.so"))
    assert crashed.outcome.verdict == "unfinished" and "exit 139" in crashed.outcome.detail and crashed.suspect == 1
    # the harness's own words say what failed, not only the sanitizer's last lines
    failed = runner.run("racecheck", _job(tmp_path, "oom-1.so"))
    assert failed.outcome.verdict == "unfinished" and failed.suspect == 0
    assert "exit 3): r1build-harness: failed: cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY" in failed.outcome.detail
    found = runner.run("memcheck", _job(tmp_path, "good-1.so", "good-2.so", "bad-3.so", "bad-4.so"))
    assert found.outcome.verdict == "finding" and "Invalid __global__ write" in found.outcome.detail
    assert found.suspect == 2  # where the first report came


def test_markers_without_the_jobs_token_do_not_count(tmp_path: Path) -> None:
    # a library that prints the harness's last line itself (without the token) and ends the process
    prologue = "import sys\nprint('r1build-harness: done, shapes: 2 libraries 1 guess', flush=True)\nsys.exit(0)\n"
    runner = _runner(tmp_path, prologue)
    assert runner.run("memcheck", _job(tmp_path, "good-1.so")).outcome.verdict == "unfinished"


@pytest.mark.slow  # seconds of wall time: runs that stall until their limit
def test_a_run_past_its_limit_is_tried_once_more_with_twice_the_time_then_rejects(tmp_path: Path) -> None:
    import time

    count = tmp_path / "count"
    # the first run is slow (a busy machine), the second finishes in time
    prologue = (
        f"import time\nwith open({str(count)!r}, 'a') as f: f.write('x')\n"
        f"if open({str(count)!r}).read() == 'x': time.sleep(5)\n"
    )
    runner = _runner(tmp_path, prologue, timeout_s=1.0)
    assert runner.run("initcheck", _job(tmp_path, "good-1.so")).outcome.verdict == "clean"
    assert count.read_text() == "xx"
    # slow every time: unfinished, naming both limits
    runner = _runner(tmp_path, timeout_s=0.5)
    start = time.monotonic()
    slow = runner.run("initcheck", _job(tmp_path, "hang-1.so"))
    assert slow.outcome.verdict == "unfinished" and "0.5 s" in slow.outcome.detail and "1 s" in slow.outcome.detail
    assert time.monotonic() - start < 5
    # in a batch, a library that makes no progress is named, not retried: the batch is split
    stalled = runner.run("initcheck", _job(tmp_path, "good-1.so", "hang-2.so", "good-3.so"))
    assert stalled.outcome.verdict == "unfinished" and stalled.suspect == 1


def _sanitizing_runs(
    tmp_path: Path,
    names: list[str],
    *,
    batch: int,
    cancel_waiting: tuple[str, ...] = (),
    cancel_deciding: tuple[str, ...] = (),
    race_found: dict[str, tuple[str | None, float]] | None = None,
    cuobjdump: str | None = None,
    processes: int = 2,
    runs_per_queue: int = 2,
    wait_s: float = 60,
    timeout_s: float = 1.0,
    hold_s: float = 0.0,
    racecheck_first: bool = False,
    racecheck_runs: int | None = None,
    static_shared: frozenset[str] = frozenset(),
) -> tuple[dict[str, list[tuple[str, str]]], list[list[str]], dict[str, float]]:
    """Every name a candidate library of the root manifest's silu_mul (softmax_rows where the name says so),
    sanitized through :class:`Sanitizing`
    with the stand-in sanitizer and ``processes`` places; each library's outcomes by name, the runs made (the
    names each called, runs that called none left out), and the counters. With ``cancel_waiting``, one sanitizer
    process at a time, its place held until those names are canceled (their runs queued and waiting for it). With
    ``cancel_deciding``, those names are canceled while their tools are being decided (when the look-up of their
    shared memory asks for cuobjdump, ``cuobjdump`` then). With ``race_found``, the names it holds fail their
    checks with wrong values once built: each asks for a race as the evaluator does (its reason, or None, and the
    seconds that took, put in the dict), then is canceled. With ``hold_s``, one sanitizer process at a time, its
    place held that long after the libraries are built (every run waiting for it); ``racecheck_first`` and
    ``racecheck_runs`` as :class:`Sanitizing` takes them. The names in ``static_shared`` have static shared memory
    by their compile's report (the counter ``cuobjdump_asked`` says how often the SASS listing was asked for).
    Every outcome is waited for ``wait_s`` at most; a run silent for ``timeout_s`` stalls. ``runs_per_queue`` runs
    of a kernel and tool at once (two: the idle places' runs of
    :data:`~r1build.evaluate.sanitizer.schedule.MOST_RUNS` then have room on a loaded machine)."""
    import contextlib
    import functools
    import threading
    import time
    from concurrent.futures import Future, ThreadPoolExecutor

    from r1build.evaluate.correctness.plan import Verdict, plan_checks
    from r1build.evaluate.devices import GpuInfo
    from r1build.evaluate.library import Library, LibraryFailure
    from r1build.evaluate.process import WorkerHandle
    from r1build.evaluate.sanitizer.schedule import Sanitizing
    from r1build.evaluate.slots import Slot
    from r1build.judge import Job
    from r1build.manifest import load_manifest
    from r1build.manifest.reference import load_reference
    from r1build.records import Candidate, Origin
    from tests.evaluate.evaluate_support import ROOT

    manifest = load_manifest(ROOT / "kernels.toml")
    specs = {s.name: s for s in manifest.kernels if s.name in ("silu_mul", "softmax_rows")}
    gpu = GpuInfo(name="Stand-in GPU", arch="sm_90", index=0, memory=1 << 30)
    work = tmp_path / "gpu0"
    work.mkdir(exist_ok=True)
    runner = SanitizerRunner(str(_fake_sanitizer(tmp_path)), {"PATH": "/usr/bin:/bin"}, timeout_s=timeout_s)
    slot = Slot(gpu=gpu, worker=WorkerHandle(["true"], {}, work, name="unused"), sanitizer=runner, workdir=work)
    counters: dict[str, float] = {}
    lock = threading.Lock()

    def count(name: str, value: float) -> None:
        with lock:
            counters[name] = counters.get(name, 0.0) + value

    def deciding() -> str | None:  # in Sanitizing._ready, after it saw the candidate not canceled
        count("cuobjdump_asked", 1)
        for name in cancel_deciding:
            sanitizing.cancel(job_of(name), "sm_90", candidates[name], runs[name])
        return cuobjdump

    with ThreadPoolExecutor(8) as pool:
        sanitizing = Sanitizing(
            [slot],
            submit=pool.submit,
            note=lambda _: None,
            count=count,
            cuobjdump=deciding,
            batch=batch,
            runs=runs_per_queue,
            processes=1 if cancel_waiting or hold_s else processes,
            racecheck_first=racecheck_first,
            racecheck_runs=racecheck_runs,
        )
        jobs = {k: Job(manifest, spec, "sm_90", []) for k, spec in specs.items()}
        plans = {
            k: pool.submit(plan_checks, s, load_reference(manifest.root, s.reference), seed=0) for k, s in specs.items()
        }

        def job_of(name: str) -> Job:
            return jobs["softmax_rows" if "softmax_rows" in name else "silu_mul"]

        runs: dict[str, SanitizeRuns] = {}
        candidates = {name: Candidate(source=f"// {name}\n", origin=Origin("generated", None)) for name in names}
        libraries: dict[str, Future[Library | LibraryFailure]] = {}
        held = sanitizing.processes.take(None) if cancel_waiting or hold_s else contextlib.nullcontext()
        with held:
            for name in names:
                libraries[name] = Future()
                job = job_of(name)
                shared = functools.partial(bool, name in static_shared)  # what the compile's report says
                sanitizing.start(job, "sm_90", candidates[name], libraries[name], plans[job.spec.name], shared)
                found = sanitizing.runs(job, "sm_90", candidates[name])
                assert found is not None
                runs[name] = found
            for name in names:  # the libraries' builds end
                libraries[name].set_result(Library(tmp_path / name, name, "sm_90", 0.0))
            for name in race_found or {}:  # as GpuEvaluator._check does for wrong values
                assert race_found is not None
                start = time.monotonic()
                wrong = Verdict("incorrect", "wrong values", kind="value")
                race = sanitizing.race_found(job_of(name), "sm_90", runs[name], wrong, wait_s=3.0)
                race_found[name] = (race, time.monotonic() - start)
                sanitizing.cancel(job_of(name), "sm_90", candidates[name], runs[name])
            time.sleep(hold_s)
            if cancel_waiting:
                time.sleep(2.5)  # gathered (1.5 s at most) and waiting for the one place
                for name in cancel_waiting:
                    sanitizing.cancel(job_of(name), "sm_90", candidates[name], runs[name])
        outcomes = {name: _verdicts(r, wait_s) for name, r in runs.items()}
    return outcomes, list(_calls(tmp_path).values()), counters


def _verdicts(runs: SanitizeRuns, wait_s: float) -> list[tuple[str, str]]:
    """Each tool's verdict, or ``("failed", <the exception's type>)`` when the runs failed."""
    failed = runs.outcomes.exception(timeout=wait_s)
    if failed is not None:
        return [("failed", type(failed).__name__)]
    return [(o.tool, o.verdict) for o in runs.outcomes.result()]


def _calls(tmp_path: Path) -> dict[tuple[str, str], list[str]]:
    """The stand-in's runs, by tool and token: the names each called, in order."""
    runs: dict[tuple[str, str], list[str]] = {}
    log = tmp_path / "calls.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        tool, token, name = line.split()
        runs.setdefault((tool, token), []).append(name)
    return runs


def test_a_kernels_candidates_are_each_called_once_a_tool_by_runs_that_clear_what_they_took(tmp_path: Path) -> None:
    names = [f"good-{i}.so" for i in range(10)]
    outcomes, _, counters = _sanitizing_runs(tmp_path, names, batch=16)
    assert all(o == [("memcheck", "clean"), ("racecheck", "clean"), ("initcheck", "clean")] for o in outcomes.values())
    by_tool: dict[str, list[str]] = {}
    for (tool, _token), called in _calls(tmp_path).items():
        by_tool.setdefault(tool, []).extend(called)
    assert {t: sorted(c) for t, c in by_tool.items()} == {
        t: sorted(names) for t in ("memcheck", "racecheck", "initcheck")
    }
    assert counters["sanitizer_runs"] <= 3 * len(names)


def test_a_run_that_failed_after_its_one_candidates_calls_ended_is_no_verdict_of_it(tmp_path: Path) -> None:
    """A run that took one candidate, called it to the end, then failed in the harness's own work (reading the
    queue folder for the next) says nothing of the candidate: it runs again alone, as a list, and that run's
    outcome counts. (A failure while the candidate is called is its own: test_one_candidate_per_run_...)"""
    names = ["good-0.so", "flaky-1.so", "good-2.so"]
    outcomes, calls, _ = _sanitizing_runs(tmp_path, names, batch=1)
    assert all({v for _, v in outcomes[n]} == {"clean"} for n in names)
    assert calls.count(["flaky-1.so"]) == 2 * 3  # per tool: the run that failed, the run alone that passed


def test_each_kernels_runs_call_its_own_entry_point_on_any_place(tmp_path: Path) -> None:
    """Runs of two kernels, some on lent places: every run calls its own queue's kernel. (On the H200 a place lent
    while another kernel's run ended called that kernel's entry point in matmul's libraries, 'undefined symbol';
    the queue now carries its kernel, so no run can be given another's. This mix does not always reproduce that
    interleaving: it checks the outcome, not the old bug.)"""
    names = ["good-silu_mul-0.so", "good-silu_mul-1.so", *(f"slow-softmax_rows-{i}.so" for i in range(12))]
    outcomes, calls, counters = _sanitizing_runs(tmp_path, names, batch=16, processes=8)
    assert all({v for _, v in o} == {"clean"} for o in outcomes.values()), outcomes
    assert counters["sanitizer_extra_runs"] >= 1
    assert all(len({"softmax_rows" in n for n in c}) == 1 for c in calls)  # a run calls one kernel's libraries


def test_places_nobody_waits_for_go_to_the_queue_with_the_most_candidates_left(tmp_path: Path) -> None:
    """Two runs a kernel and tool while others wait for a place; idle places go to more runs of a queue that still
    holds many candidates nobody took (each run takes one at a time), so slow candidates spread over them."""
    names = [f"slow-{i}.so" for i in range(12)]
    outcomes, _, counters = _sanitizing_runs(tmp_path, names, batch=16, processes=3 * 2 + 4, runs_per_queue=2)
    assert all({v for _, v in o} == {"clean"} for o in outcomes.values())
    runs = _calls(tmp_path)
    per_tool = {tool: [c for (t, _), c in runs.items() if t == tool] for tool in ("memcheck", "racecheck", "initcheck")}
    assert all(sorted(n for c in calls for n in c) == sorted(names) for calls in per_tool.values())
    assert counters["sanitizer_extra_runs"] >= 1
    assert max(len(calls) for calls in per_tool.values()) > 2  # some tool ran on the idle places too


def test_racecheck_runs_of_a_kernel_can_be_held_to_fewer_than_the_other_tools(tmp_path: Path) -> None:
    """With places for all, each tool's queue gets its runs and idle places' runs, but racecheck at most
    ``racecheck_runs`` at once: its runs follow one another (a run ends when it finds the queue empty; a later
    library gets a new one)."""
    names = [f"slow-{i}.so" for i in range(12)]
    outcomes, _, _ = _sanitizing_runs(
        tmp_path, names, batch=16, processes=3 * 2 + 4, runs_per_queue=2, racecheck_runs=1
    )
    assert all({v for _, v in o} == {"clean"} for o in outcomes.values())
    runs = _calls(tmp_path)
    per_tool = {tool: [c for (t, _), c in runs.items() if t == tool] for tool in ("memcheck", "racecheck", "initcheck")}
    assert all(sorted(n for c in calls for n in c) == sorted(names) for calls in per_tool.values())
    # each call of a slow library takes 0.3 s: runs side by side interleave their calls in the log, runs one after
    # another do not
    order = [line.split()[1] for line in (tmp_path / "calls.log").read_text().splitlines() if line.startswith("race")]
    blocks = [token for i, token in enumerate(order) if i == 0 or order[i - 1] != token]
    assert len(blocks) == len(set(blocks)) == len(per_tool["racecheck"]), order
    assert len(per_tool["memcheck"]) > 1 and len(per_tool["initcheck"]) > 1  # the other tools' runs side by side


@pytest.mark.slow
def test_with_racecheck_first_a_freed_place_goes_to_a_waiting_racecheck_run(tmp_path: Path) -> None:
    # every run waits for the one place until it is freed; first come first served, a memcheck run (its queue is
    # dispatched first) would take it; racecheck runs, the long ones, go first when asked to
    names = ["a", "b", "c"]
    outcomes, calls, _ = _sanitizing_runs(tmp_path, names, batch=16, hold_s=2.5, racecheck_first=True)
    assert all(dict(outcomes[n]) == dict.fromkeys(("memcheck", "racecheck", "initcheck"), "clean") for n in names)
    order = [tool for tool, _ in _calls(tmp_path)]
    assert order[0] == "racecheck" and set(order) == {"memcheck", "racecheck", "initcheck"}
    assert sorted(n for run in calls for n in run) == sorted(names * 3)


def test_a_candidate_canceled_while_its_run_waits_for_a_place_is_left_out_of_it(tmp_path: Path) -> None:
    names = ["good-0.so", "good-1.so", "good-2.so"]
    outcomes, calls, _ = _sanitizing_runs(tmp_path, names, batch=16, cancel_waiting=("good-1.so",))
    assert {v for _, v in outcomes["good-1.so"]} == {"canceled"}
    assert all({v for _, v in outcomes[n]} == {"clean"} for n in ("good-0.so", "good-2.so"))
    assert calls and all("good-1.so" not in c for c in calls)  # no process started for it, no run stopped for it


def test_a_candidate_canceled_while_its_tools_are_decided_settles(tmp_path: Path) -> None:
    """A candidate that fails its checks while its library is looked at for its tools (after Sanitizing._ready saw
    it not canceled, before it knew the tools) is settled as canceled. It was left with no outcome: cancel found no
    tools to settle and no queue entry to take, and _ready then queued it for none, so the evaluator waited for it
    for ever (its job never ready, _finish_sanitizers blocked)."""
    outcomes, _, _ = _sanitizing_runs(tmp_path, ["good-0.so"], batch=16, cancel_deciding=("good-0.so",), wait_s=5)
    assert {v for _, v in outcomes["good-0.so"]} == {"canceled"}
    assert not (tmp_path / "calls.log").exists()  # no run called it


def test_a_batch_never_takes_more_than_its_size(tmp_path: Path) -> None:
    names = [f"good-{i}.so" for i in range(10)]
    outcomes, calls, _ = _sanitizing_runs(tmp_path, names, batch=2)
    assert all({v for _, v in o} == {"clean"} for o in outcomes.values())
    assert all(len(c) <= 2 for c in calls) and sorted(n for c in calls for n in c) == sorted(names * 3)


def test_a_finding_in_a_batch_is_split_until_it_names_its_candidate(tmp_path: Path) -> None:
    names = [f"good-{i}.so" for i in range(12)]
    names[3], names[8] = "bad-3.so", "crash-8.so"
    outcomes, calls, counters = _sanitizing_runs(tmp_path, names, batch=16)
    for name, found in outcomes.items():
        verdicts = {v for _, v in found}
        if name == "bad-3.so":
            assert verdicts == {"finding"}
        elif name == "crash-8.so":
            assert verdicts == {"unfinished"}
        else:
            assert verdicts == {"clean"}, name
    # the culprits ran alone (their verdicts are their own runs), every good library was in a clean run
    assert ["bad-3.so"] in calls and ["crash-8.so"] in calls
    # per tool: the first runs (two places: two runs taking from the queue), then at most three more runs per
    # culprit (those before it, it alone, those after it), not one run per candidate
    assert len(calls) <= 3 * (2 + 3 * 2) < 3 * len(names)
    assert counters["sanitizer_splits"] >= 3


def test_one_candidate_per_run_when_the_batch_is_one(tmp_path: Path) -> None:
    names = ["good-0.so", "bad-1.so", "good-2.so"]
    outcomes, calls, _ = _sanitizing_runs(tmp_path, names, batch=1)
    # one a run; bad-1's finding came while it was called: that run's verdict is its own, no run again
    assert all(len(c) == 1 for c in calls) and len(calls) == 9
    assert calls.count(["bad-1.so"]) == 3
    assert {v for _, v in outcomes["bad-1.so"]} == {"finding"}
    assert {v for _, v in outcomes["good-2.so"]} == {"clean"}


@pytest.mark.slow  # seconds of wall time: runs that stall until their limit
def test_a_hanging_candidate_in_a_batch_costs_its_batch_one_stall(tmp_path: Path) -> None:
    names = ["good-0.so", "hang-1.so", "good-2.so", "good-3.so"]
    # the runs' limit halved (as in the runner's own test above): each tool's batch stalls once, then the hanging
    # library alone twice (the limit, then twice it), where the verdicts depend on no length of the limit
    outcomes, _, _ = _sanitizing_runs(tmp_path, names, batch=16, timeout_s=0.5)
    assert {v for _, v in outcomes["hang-1.so"]} == {"unfinished"}
    assert all({v for _, v in outcomes[n]} == {"clean"} for n in names if n != "hang-1.so")


def test_two_threads_of_one_process_taking_one_entry_for_one_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The evaluator takes entries in its own threads under one word (two runs of a queue that failed before taking
    any relist what waits at once; two cancels): one thread takes the entry, the other is told it was taken. Both
    wrote the same temporary file (``.<n>.<owner>.<pid>.tmp``): the first linked it into place and removed it, and
    the second's link failed with FileNotFoundError, which broke the queue (every candidate failed with it)."""
    import os
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from r1build.evaluate.child import harness

    real = os.link
    second_at_link = threading.Event()
    arrived: list[str] = []
    lock = threading.Lock()

    def link(src: str, dst: str) -> None:  # the first waits until the second has written its file too
        with lock:
            arrived.append(src)
            first = len(arrived) == 1
        if first:
            second_at_link.wait(2)
        else:
            second_at_link.set()
            time.sleep(0.2)  # the first links and removes its temporary file meanwhile
        real(src, dst)

    monkeypatch.setattr(os, "link", link)
    with ThreadPoolExecutor(2) as pool:
        taken = [f.result() for f in [pool.submit(harness.claim, tmp_path, 0, "listed") for _ in range(2)]]
    assert sorted(taken) == [False, True]
    assert (tmp_path / "0.claim").read_text() == "listed"
    assert [p.name for p in tmp_path.iterdir()] == ["0.claim"]  # no temporary file left


def test_a_run_that_raises_leaves_no_candidate_of_its_queue_without_an_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of a queue that raises (here the disk full once its process ended) breaks the queue, and the error
    reaches every candidate of it that has no outcome yet. It reached only the entries not seen taken: those this
    run took (seen taken by other queues' runs meanwhile) and any waiting as a part were left with no outcome."""
    import json
    import time

    real = SanitizerRunner.run
    raised: list[tuple[int, ...]] = []

    def run(self: SanitizerRunner, tool: str, job_file: Path) -> BatchRun:
        found = real(self, tool, job_file)
        if tool == "memcheck" and "queue" in json.loads(job_file.read_text()) and found.claimed and not raised:
            raised.append(found.claimed)
            time.sleep(0.5)  # other queues' runs end meanwhile: their dispatch sees the entries it took taken
            raise OSError(28, "No space left on device")
        return found

    monkeypatch.setattr(SanitizerRunner, "run", run)
    names = [f"good-{i}.so" for i in range(6)]
    outcomes, _, _ = _sanitizing_runs(tmp_path, names, batch=16, processes=4, wait_s=5)
    failed = [n for n, o in outcomes.items() if o == [("failed", "OSError")]]
    assert raised and len(failed) >= len(raised[0])
    assert all(
        o == [("memcheck", "clean"), ("racecheck", "clean"), ("initcheck", "clean")]
        for n, o in outcomes.items()
        if n not in failed
    )


def test_a_race_is_asked_of_racecheck_alone(tmp_path: Path) -> None:
    """A candidate whose checks found wrong values asks whether racecheck found a race (the reason then): the
    answer comes with racecheck's verdict, or at once where racecheck does not run, not once memcheck's and
    initcheck's runs end too. Before, race_found waited for every tool (60 s at most on the GPU), holding a check
    thread of the evaluator all along, and the caller could cancel the runs it did not need only afterwards."""
    found: dict[str, tuple[str | None, float]] = {"bad-stuck-memcheck-0.so": (None, 0.0)}
    outcomes, _, _ = _sanitizing_runs(tmp_path, list(found), batch=16, race_found=found, wait_s=5)
    race, seconds = found["bad-stuck-memcheck-0.so"]
    assert race is not None and race.startswith("nondeterministic: a race") and seconds < 2.5
    assert ("racecheck", "finding") in outcomes["bad-stuck-memcheck-0.so"]


def test_a_compile_report_of_static_shared_memory_runs_racecheck_without_reading_the_machine_code(
    tmp_path: Path,
) -> None:
    cuobjdump = tmp_path / "cuobjdump"  # SASS without shared memory: only a report of static shared memory adds it
    cuobjdump.write_text("#!/bin/sh\necho 'Function : k'\necho '  FADD R0, R1, R2 ;'\n")
    cuobjdump.chmod(0o755)
    names = ["tiled.so", "plain.so"]
    outcomes, _, counters = _sanitizing_runs(
        tmp_path, names, batch=16, cuobjdump=str(cuobjdump), static_shared=frozenset({"tiled.so"}), wait_s=20
    )
    assert [t for t, _ in outcomes["tiled.so"]] == ["memcheck", "racecheck", "initcheck"]
    assert [t for t, _ in outcomes["plain.so"]] == ["memcheck", "initcheck"]
    assert counters.get("cuobjdump_asked") == 1  # the plain one's listing only


def test_no_race_is_waited_for_where_racecheck_does_not_run(tmp_path: Path) -> None:
    cuobjdump = tmp_path / "cuobjdump"  # SASS without shared memory: racecheck is not run
    cuobjdump.write_text("#!/bin/sh\necho 'Function : k'\necho '  FADD R0, R1, R2 ;'\n")
    cuobjdump.chmod(0o755)
    found: dict[str, tuple[str | None, float]] = {"stuck-memcheck-0.so": (None, 0.0)}
    outcomes, _, _ = _sanitizing_runs(
        tmp_path, list(found), batch=16, race_found=found, cuobjdump=str(cuobjdump), wait_s=5
    )
    assert found["stuck-memcheck-0.so"][0] is None and found["stuck-memcheck-0.so"][1] < 1.0
    assert {t for t, _ in outcomes["stuck-memcheck-0.so"]} == {"memcheck", "initcheck"}


def test_what_waits_when_a_run_fails_before_taking_any_runs_in_lists_of_at_most_the_batch(tmp_path: Path) -> None:
    """A run that fails before it takes a candidate (its harness failing at its start) has what waits in the queue
    run again as lists, each of at most the batch size like any run. It was one list of everything waiting."""
    (tmp_path / "fail-start-memcheck").touch()
    names = [f"good-{i}.so" for i in range(8)]
    outcomes, calls, counters = _sanitizing_runs(tmp_path, names, batch=2)
    assert not (tmp_path / "fail-start-memcheck").exists() and counters["sanitizer_splits"] >= 1
    assert all(o == [("memcheck", "clean"), ("racecheck", "clean"), ("initcheck", "clean")] for o in outcomes.values())
    assert all(len(c) <= 2 for c in calls), calls


def test_a_second_sanitizing_over_the_same_work_folder_runs_every_tool(tmp_path: Path) -> None:
    """Two evaluators, one after the other, over one work folder (GpuEvaluator's workdir): the second sanitizes as
    the first did. It found the kernel's folder the first left and took it for its shapes written, with none: every
    candidate passed with no sanitizer run (and the first's claim files would have looked like its own entries
    taken)."""
    everything = [("memcheck", "finding"), ("racecheck", "finding"), ("initcheck", "finding")]
    first, _, _ = _sanitizing_runs(tmp_path, ["bad-0.so"], batch=16)
    second, _, _ = _sanitizing_runs(tmp_path, ["bad-0.so"], batch=16, wait_s=5)
    assert first == second == {"bad-0.so": everything}


def test_a_run_that_finds_its_queue_empty_touches_no_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that finds every entry of its queue taken (others took them while it started: runs on lent places do)
    ends at once with no library called, without setting up CUDA. It created a context first, under the sanitizer
    the slow part of a start, in which the GPU's timing waits for it (it reaches no hold check after that)."""
    from r1build.evaluate.child import harness

    def no_cuda() -> None:
        raise AssertionError("CUDA was set up")

    monkeypatch.setattr(harness, "_Driver", no_cuda)
    queue = tmp_path / "queue"
    queue.mkdir()
    (queue / "0.lib").write_text(str(tmp_path / "good-0.so"))
    assert harness.claim(queue, 0, "another-run")
    job = {"queue": str(queue), "limit": 16, "libs": [], "entry": "k", "argtypes": [], "shapes": [{}], "token": "t0k"}
    harness.run(job, tmp_path)
    assert capsys.readouterr().out.splitlines() == [f"{harness.DONE} 1 libraries 0 t0k"]


def test_a_run_that_called_nothing_is_clean_though_the_sanitizer_says_no_cuda_was_used(tmp_path: Path) -> None:
    """The real compute-sanitizer exits 255 ("Target application terminated before first instrumented API call")
    when the harness never set up CUDA: a run over an empty list, or one that found its queue taken. Nothing was
    called, so nothing is unfinished; a run that called a library and then exits so is not clean."""
    prologue = (
        "import atexit, os, sys\n"
        "def _no_cuda():\n"
        "    print('========= Error: Target application terminated before first instrumented API call', flush=True)\n"
        "    os._exit(255)\n"
        "atexit.register(_no_cuda)\n"
    )
    runner = _runner(tmp_path, prologue)
    assert runner.run("memcheck", _job(tmp_path)).outcome.verdict == "clean"
    called = runner.run("memcheck", _job(tmp_path, "good-1.so")).outcome
    assert called.verdict == "unfinished" and "exit 255" in called.detail


def test_an_error_in_a_dispatch_after_a_run_reaches_the_queues_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatch that follows a run ran in the run's thread, whose future nobody reads: an error there (here
    memcheck's queue folder cannot be written any more once a run of it ended) vanished, and the candidates it
    should have started runs for waited for ever. Now each gets an outcome: the error, or the verdict of a run that
    was under way; the other tools' queues go on."""
    from r1build.evaluate.sanitizer.schedule import Sanitizing

    real = Sanitizing._dispatch
    ended: list[bool] = []

    def dispatch(self: Sanitizing, queue: Any) -> None:
        if queue.tool == "memcheck" and ended:
            raise OSError(28, "No space left on device")
        real(self, queue)

    real_settle = Sanitizing._settle

    def settle(self: Sanitizing, queue: Any, *args: Any, **kwargs: Any) -> None:
        real_settle(self, queue, *args, **kwargs)
        if queue.tool == "memcheck":
            ended.append(True)

    monkeypatch.setattr(Sanitizing, "_dispatch", dispatch)
    monkeypatch.setattr(Sanitizing, "_settle", settle)
    names = [f"slow-{i}.so" for i in range(8)]
    outcomes, _, _ = _sanitizing_runs(tmp_path, names, batch=1, processes=2, wait_s=20)
    clean = [("memcheck", "clean"), ("racecheck", "clean"), ("initcheck", "clean")]
    assert all(o in (clean, [("failed", "OSError")]) for o in outcomes.values()), outcomes
    assert any(o == [("failed", "OSError")] for o in outcomes.values())


def test_a_place_lent_while_the_evaluator_closes_goes_back(tmp_path: Path, root_manifest: Manifest) -> None:
    """Lending an idle place to a queue (take_now) then finding the run pool shut down (the evaluator closing)
    kept that place taken for good; it goes back now, and the queue does not count the run."""
    from concurrent.futures import Future

    from r1build.evaluate.devices import GpuInfo
    from r1build.evaluate.process import WorkerHandle
    from r1build.evaluate.sanitizer.schedule import KernelKey, Sanitizing, _Inputs, _Queue
    from r1build.evaluate.slots import Slot

    def submit(*_: Any, **__: Any) -> Future[Any]:
        raise AssertionError("nothing is submitted here")

    sanitizing = Sanitizing(
        [], submit=submit, note=lambda _: None, count=lambda *_: None, cuobjdump=lambda: None, processes=2
    )
    work = tmp_path / "gpu0"
    work.mkdir()
    slot = Slot(
        gpu=GpuInfo(name="Stand-in", arch="sm_90", index=0, memory=1 << 30),
        worker=WorkerHandle(["true"], {}, work, name="unused"),
        sanitizer=None,
        workdir=work,
    )
    folder = tmp_path / "queue"
    folder.mkdir()
    spec = root_manifest.kernel("silu_mul")
    queue = _Queue(
        kernel=KernelKey("m", "silu_mul", "sm_90"), spec=spec, tool="memcheck", slot=slot,
        inputs=_Inputs(tmp_path, []), folder=folder,
    )  # fmt: skip
    for n in range(8):
        (folder / f"{n}.lib").write_text(f"lib-{n}.so")
        queue.entries[n] = SanitizeRuns()
        queue.open.add(n)
    sanitizing._queues[queue.kernel, "memcheck"] = queue
    sanitizing.pool.shutdown()
    sanitizing._steal()
    assert queue.taking == 0
    held = [sanitizing.processes.take_now(), sanitizing.processes.take_now()]
    assert all(p is not None for p in held)  # both places free


# racecheck's two report modes with warning-level hazards only (shaped like compute-sanitizer's output as NVIDIA's
# racecheck documentation shows it: "analysis" mode's "Race reported between", "hazard" mode's per-byte records)
RACECHECK_WARNINGS = """\
========= COMPUTE-SANITIZER
========= Warning: Race reported between Read access at k(const float *, float *, long)+0x60 in r.cu:12
=========     and Write access at k(const float *, float *, long)+0x70 in r.cu:14 [2 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
"""
RACECHECK_HAZARD_WARNINGS = """\
========= COMPUTE-SANITIZER
========= WARN:(Warp Level Programming) Potential WAR hazard detected at __shared__ 0x3 in block (0, 0, 0) :
=========     Read Thread (31, 0, 0) at 0x00000170 in r.cu:4:k(const float *, float *, long)
=========     Write Thread (0, 0, 0) at 0x000001a8 in r.cu:4:k(const float *, float *, long)
=========     Current Value : 0, Incoming Value : 0
=========
========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)
"""


@pytest.mark.parametrize("report", [RACECHECK_WARNINGS, RACECHECK_HAZARD_WARNINGS])
def test_racecheck_warnings_are_hazards_not_errors(report: str) -> None:
    """Issue 27: racecheck runs with only warning-level hazards were called "errors"; they are hazards, and they
    still reject the candidate."""
    from r1build.evaluate.sanitizer.runner import SanitizerOutcome
    from r1build.evaluate.sanitizer.schedule import sanitizer_reason

    found = summarize_report(report)
    assert found is not None and "hazard" in found and "0 errors" in found, found
    reason = sanitizer_reason("n=7, n=97", SanitizerOutcome("racecheck", "finding", found))
    assert "hazard" in reason and "warning" in reason and "error" not in reason.replace("0 errors", ""), reason
    assert "racecheck at n=7, n=97" in reason
    assert sanitizer_reason("n=7", SanitizerOutcome("racecheck", "finding", found)) == (
        f"shared-memory hazards between threads (compute-sanitizer racecheck at n=7, warning level only): {found}"
    )
    errors = sanitizer_reason("n=7", SanitizerOutcome("racecheck", "finding", summarize_report(RACECHECK) or ""))
    assert errors.startswith("nondeterministic: a race between threads on shared memory"), errors
