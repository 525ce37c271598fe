"""Reading compute-sanitizer reports, and finding the tool (no GPU)."""

from __future__ import annotations

from pathlib import Path

from r1build.evaluate.sanitize import find_sanitizer, summarize_report

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


def test_cancel_stops_a_running_sanitizer(tmp_path: Path) -> None:
    import threading
    import time

    from r1build.evaluate.sanitize import SanitizerRunner

    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\nsleep 60\n")
    fake.chmod(0o755)
    runner = SanitizerRunner(str(fake), {"PATH": "/usr/bin:/bin"}, timeout_s=30)
    job = tmp_path / "job.json"
    job.write_text("{}")
    outcomes = []
    t = threading.Thread(target=lambda: outcomes.append(runner.run("memcheck", job)))
    start = time.monotonic()
    t.start()
    time.sleep(0.3)
    runner.cancel(job)
    t.join(10)
    assert outcomes and outcomes[0].verdict == "canceled"
    assert time.monotonic() - start < 5
    assert runner.run("racecheck", job).detail == "canceled"  # later runs of a canceled job never start


def _runner_with(tmp_path: Path, script: str, timeout_s: float = 30) -> tuple[object, Path]:
    """A SanitizerRunner whose 'compute-sanitizer' is ``script`` (the runner's own logic, no GPU), and a job of
    two shapes."""
    from r1build.evaluate.sanitize import SanitizerRunner

    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    job = tmp_path / "job.json"
    job.write_text('{"shapes": [{}, {}]}')
    return SanitizerRunner(str(fake), {"PATH": "/usr/bin:/bin"}, timeout_s=timeout_s), job


def test_a_run_counts_as_clean_only_when_the_harness_called_every_shape(tmp_path: Path) -> None:
    from r1build.evaluate.child.harness import DONE
    from r1build.evaluate.sanitize import SanitizerRunner

    runner, job = _runner_with(
        tmp_path, f"echo 'r1build-harness: shape 0'\necho '{DONE} 2'\necho '========= ERROR SUMMARY: 0 errors'\n"
    )
    assert isinstance(runner, SanitizerRunner)
    assert runner.run("memcheck", job).verdict == "clean"
    # exit 0 after the first shape: the candidate ended the process (or the sanitizer), nothing was checked after
    runner, job = _runner_with(tmp_path, "echo 'r1build-harness: shape 0'\nexit 0\n")
    assert isinstance(runner, SanitizerRunner)
    early = runner.run("initcheck", job)
    assert early.verdict == "unfinished" and "before the last shape" in early.detail
    runner, job = _runner_with(tmp_path, f"echo '{DONE} 1'\n")  # the count of another job
    assert isinstance(runner, SanitizerRunner)
    assert runner.run("initcheck", job).verdict == "unfinished"
    runner, job = _runner_with(tmp_path, "echo 'Segmentation fault'\nexit 139\n")
    assert isinstance(runner, SanitizerRunner)
    crashed = runner.run("memcheck", job)
    assert crashed.verdict == "unfinished" and "exit 139" in crashed.detail


def test_a_run_past_its_limit_is_tried_once_more_with_twice_the_time_then_rejects(tmp_path: Path) -> None:
    import time

    from r1build.evaluate.child.harness import DONE
    from r1build.evaluate.sanitize import SanitizerRunner

    count = tmp_path / "count"
    # the first run is slow (a busy machine), the second finishes in time
    runner, job = _runner_with(
        tmp_path,
        f"echo x >> {count}\nif [ $(wc -l < {count}) -eq 1 ]; then sleep 5; fi\necho '{DONE} 2'\n",
        timeout_s=0.5,
    )
    assert isinstance(runner, SanitizerRunner)
    assert runner.run("initcheck", job).verdict == "clean"
    assert count.read_text().count("x") == 2
    # slow every time: unfinished, naming both limits
    runner, job = _runner_with(tmp_path, "sleep 5\n", timeout_s=0.3)
    assert isinstance(runner, SanitizerRunner)
    start = time.monotonic()
    slow = runner.run("initcheck", job)
    assert slow.verdict == "unfinished" and "0.3 s" in slow.detail and "0.6 s" in slow.detail
    assert time.monotonic() - start < 4
