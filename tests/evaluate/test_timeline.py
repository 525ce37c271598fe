"""The evaluator's timeline: spans kept from any thread up to a bound, and a row of milestones per job."""

from __future__ import annotations

import threading
import time

from r1build.evaluate.timing.timeline import Span, Timeline, milestones


def test_spans_are_kept_from_threads_and_counted_past_the_limit() -> None:
    timeline = Timeline(limit=50)

    def work(k: int) -> None:
        for _ in range(20):
            start = time.perf_counter()
            timeline.add("build_s", f"k{k}/sm_90", start)

    threads = [threading.Thread(target=work, args=(k,), name=f"t{k}") for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = timeline.spans()
    assert len(spans) == 50 and timeline.dropped == 30
    assert all(0 <= s.start <= s.end for s in spans)
    assert {s.thread for s in spans} <= {"t0", "t1", "t2", "t3"}


def test_milestones_take_the_last_end_of_each_kind_and_sum_the_waits() -> None:
    spans = [
        Span("build_s", "a/sm_90", 0.0, 2.0, "x"),
        Span("build_s", "a/sm_90", 1.0, 3.0, "x"),
        Span("build_s", "b/sm_90", 0.0, 1.0, "x"),
        Span("sanitizer_run", "a/sm_90", 3.0, 9.0, "x"),
        Span("sanitizer_run", "a/sm_90", 3.0, 7.0, "x"),
        Span("wait_ready_s", "b/sm_90", 0.0, 1.5, "gpu"),  # the GPU thread took b first
        Span("timing_s", "b/sm_90", 2.0, 5.0, "gpu"),
        Span("wait_ready_s", "a/sm_90", 5.0, 5.0, "gpu"),
        Span("wait_sanitizer_s", "a/sm_90", 5.5, 9.0, "gpu"),
        Span("wait_sanitizer_s", "", 0.0, 1.0, "gpu"),  # no job: left out
    ]
    rows = milestones(spans)
    assert [r["job"] for r in rows] == ["b/sm_90", "a/sm_90"]
    b, a = rows
    assert a["built"] == 3.0 and a["sanitized"] == 9.0 and a["sanitizer_runs"] == 2
    assert a["gpu_reached"] == 5.0 and a["wait_sanitizer_s"] == 3.5
    assert b["gpu_reached"] == 1.5 and b["timing_s"] == 3.0 and "sanitized" not in b


def test_a_meter_counts_each_phase_and_keeps_it_as_a_span() -> None:
    from r1build.evaluate.timing.timeline import Meter

    meter = Meter()
    meter.count("built", 2)
    assert meter.timed("build_s", "k/sm_90", lambda x: x * 2, 21) == 42
    start = time.perf_counter()
    meter.phase("checks_s", start, "k/sm_90")
    counters = meter.counters()
    assert counters["built"] == 2 and counters["candidates"] == 0
    assert counters["build_s"] >= 0 and "checks_s" in counters
    assert [(s.what, s.job) for s in meter.timeline.spans()] == [("build_s", "k/sm_90"), ("checks_s", "k/sm_90")]
