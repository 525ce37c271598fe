"""GPU evaluation of the root manifest: every kernel's baseline, hand-written candidates and tunable value sets
validated and timed on the local GPU and the winner per arch selected; twice with ``evaluate_all`` (repeat-run
stability), once more job by job after ``prepare`` (how a resolver walking kernel by kernel calls the
evaluator), and once through ``r1build.resolve`` itself (what ``r1build resolve`` does on a GPU machine without
an LLM).

Targets: at least 30 candidates a minute end to end (compile, gate, correctness, sanitizers, timing); the median
of kernels of 50 us and more good to 0.5% (its standard error, from the spread of single cold launches and the
sample count: see r1build/selection/rules.py); the same kernel within 3% between runs. Writes
``bench/results/evaluate_root.json`` and ``.md``; exits 1 when a target is missed, 2 without a GPU.

    python bench/evaluate_root.py [--manifest kernels.toml] [--runs 2] [--out bench/results] [--no-resolve]
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

from r1build.cache import Cache  # noqa: E402
from r1build.evaluate import EvaluatorOptions, GpuEvaluator, detect_gpus, expand_variants  # noqa: E402
from r1build.evaluate.timing.timeline import milestones  # noqa: E402
from r1build.events import Event, Progress, sink  # noqa: E402
from r1build.gate.compile_slots import PrioritySlots  # noqa: E402
from r1build.judge import Job  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.manifest.archs import parse_arch  # noqa: E402
from r1build.records import Candidate, Result  # noqa: E402
from r1build.selection.rules import median_error, select_winner  # noqa: E402

TARGET_PER_MINUTE = 30.0
TARGET_MEDIAN_ERROR = 0.005
TARGET_REPEAT = 0.03


def label(c: Candidate) -> str:
    name = Path(c.origin.path or c.origin.kind).name
    if c.defines:
        name += " " + " ".join(f"{k}={v}" for k, v in c.defines.items())
    return name


def replicated(candidates: list[Candidate], copies: int) -> list[Candidate]:
    """``copies`` distinct copies of every candidate (a comment line differs, so each is compiled, checked,
    sanitized and timed on its own): more work of the same kind, to measure throughput at scale."""
    if copies <= 1:
        return candidates
    return candidates + [
        Candidate(source=f"{c.source}\n// r1build bench copy {i}\n", origin=c.origin, defines=c.defines)
        for i in range(1, copies)
        for c in candidates
    ]


@contextlib.contextmanager
def watching(evaluator: GpuEvaluator, every_s: float = 10.0) -> Iterator[None]:
    """While evaluating: the evaluator's counters every ``every_s`` seconds and progress events on stderr, and
    every thread's stack once a minute (where a slow run spends its time)."""
    stop = threading.Event()
    start = time.perf_counter()

    def report() -> None:
        while not stop.wait(every_s):
            st = {k: round(v, 1) for k, v in evaluator.stats.items() if v}
            print(f"[{time.perf_counter() - start:6.1f} s] {st}", file=sys.stderr, flush=True)

    def progress(event: Event) -> None:
        if isinstance(event, Progress) and (event.completed == event.total or event.completed % 10 == 0):
            print(
                f"[{time.perf_counter() - start:6.1f} s] {event.task} {event.completed}/{event.total}",
                file=sys.stderr,
                flush=True,
            )

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    faulthandler.dump_traceback_later(60, repeat=True, file=sys.stderr)
    try:
        with sink(progress):
            yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        stop.set()


def machine_busy() -> tuple[float, float]:
    """The machine's busy and total CPU time so far (jiffies of every core, from /proc/stat; zeros elsewhere)."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


def one_run(
    manifest_path: Path,
    *,
    one_at_a_time: bool = False,
    copies: int = 1,
    evaluator_options: dict[str, Any],
    sanitizer_processes: int | None = None,
) -> dict[str, Any]:
    """Evaluate every kernel x measurable arch once, from cold (fresh cache, fresh builds): all jobs in one
    ``evaluate_all``, or (``one_at_a_time``) ``prepare`` of every job and then one ``evaluate`` per job, the way
    a resolver that walks kernel by kernel calls it."""
    manifest = load_manifest(manifest_path)
    with tempfile.TemporaryDirectory(prefix="r1build-bench-") as tmp, Cache(Path(tmp) / "cache") as cache:
        start = time.perf_counter()
        busy0, total0 = machine_busy()
        with GpuEvaluator(cache, options=EvaluatorOptions(**evaluator_options)) as evaluator, watching(evaluator):
            if sanitizer_processes is not None:  # an experiment's places, before any run takes one
                evaluator._sanitizing.processes = PrioritySlots(sanitizer_processes)
            jobs, unmeasured = [], []
            for spec in manifest.kernels:
                candidates = replicated(expand_variants(manifest, spec), copies)
                for arch in (parse_arch(a) for a in manifest.archs_of(spec)):
                    if arch in evaluator.archs:
                        jobs.append(Job(manifest, spec, arch, candidates, candidates[0]))
                    else:
                        unmeasured.append(f"{spec.name}/{arch}")
            if one_at_a_time:
                evaluator.prepare(jobs)
                results = [evaluator.evaluate(job) for job in jobs]
            else:
                results = evaluator.evaluate_all(jobs)
            wall = time.perf_counter() - start
            busy1, total1 = machine_busy()
            stats = dict(evaluator.stats)
            stats["machine_cpu_busy"] = (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0
            spans = evaluator.timeline.spans()
            device = evaluator.gpus[0].name
    rows = []
    for job, res in zip(jobs, results, strict=True):
        winner = select_winner(job.candidates, res)
        for c, r in zip(job.candidates, res, strict=True):
            rows.append(row(job, c, r, winner))
    n = sum(len(j.candidates) for j in jobs)
    return {
        "wall_s": wall,
        "candidates": n,
        "per_minute": n / wall * 60.0,
        "rows": rows,
        "stats": stats,
        "unmeasured": unmeasured,
        "device": device,
        "mode": "one job at a time" if one_at_a_time else "all",
        "copies": copies,
        "milestones": milestones(spans),
        "timeline": [vars(s) for s in spans],
    }


def row(job: Job, c: Candidate, r: Result, winner: Candidate | None) -> dict[str, Any]:
    t = r.timing
    return {
        "kernel": job.spec.name,
        "arch": job.arch,
        "candidate": label(c),
        "digest": c.digest[:12],
        "winner": winner is not None and winner.digest == c.digest,
        "status": r.status,
        "detail": r.detail[:300],
        "time_us": t.median_us if t else None,
        "spread": t.spread if t else None,
        "samples": t.samples if t else None,
        "floor_us": t.floor_us if t else None,
        "share_of_floor": t.share_of_floor if t else None,
        "vs_baseline": t.speedup_vs_baseline if t else None,
        "vs_cupy": t.speedup_vs_reference if t else None,
        "registers": r.gate.registers if r.gate else None,
    }


def resolve_run(manifest_path: Path) -> dict[str, Any]:
    """``r1build resolve --refresh --offline`` on a copy of the manifest's folder, timed."""
    from r1build.manifest import load_manifest as load
    from r1build.resolve import ResolveOptions, resolve

    with tempfile.TemporaryDirectory(prefix="r1build-bench-resolve-") as tmp:
        work = Path(tmp) / "project"
        shutil.copytree(
            manifest_path.parent,
            work,
            ignore=shutil.ignore_patterns(
                ".git", ".whl", ".venv", "bench", "tests", "*.lock", "_r1build", "__pycache__", ".r1build"
            ),
        )
        manifest = load(work / manifest_path.name)
        with Cache(Path(tmp) / "cache") as cache:
            start = time.perf_counter()
            resolution = resolve(manifest, cache, ResolveOptions(refresh=True, generate=False, evaluate=True))
            wall = time.perf_counter() - start
        winners = [
            {"kernel": e.spec.name, "arch": e.arch, "state": e.state, "provenance": e.provenance, "time_us": e.time_us}
            for e in resolution.entries
        ]
        n = sum(len(expand_variants(manifest, s)) for s in manifest.kernels)
    return {"wall_s": wall, "measured_candidates": n, "per_minute": n / wall * 60.0, "winners": winners}


def fmt(x: float | None, spec: str, unit: str = "") -> str:
    return "" if x is None else format(x, spec) + unit


def markdown(report: dict[str, Any]) -> str:
    runs = report["runs"]
    first = runs[0]
    host = report["host"]
    lines = [
        "# GPU evaluation of the root manifest",
        "",
        f"`{report['command']}` on {report['date']}: {report['device']}, {host['cpus']} CPUs, {host['os']}, "
        f"Python {host['python']}.",
        "",
        "Every candidate the manifest provides (baseline, hand-written files, tunable value sets) is compiled for "
        "the GPU's arch, gated, checked for correctness (4 input distributions, a CUDA-graph capture probe and a "
        "graph replay on the given stream, 2 shared-memory poison runs, guard bands, offset pointers, every test "
        "shape; compute-sanitizer memcheck, racecheck and initcheck on small shapes) and timed (CUDA events on the "
        "stream, L2 flushed before every sample, input sets rotated, a sample of several back-to-back launches when "
        "one input set is over twice the L2, graphs under 10 us). Floors: bytes moved over the measured copy "
        "bandwidth, flops over the measured fp32 peak. `vs cupy`: the numpy reference run with numpy rebound to "
        "cupy (the references compute in float64, so this flatters the kernels).",
        "",
        "| kernel | arch | candidate | status | time us | spread | floor us | share of floor | vs baseline "
        "| vs cupy | time, run 2 | diff |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    second = {(r["kernel"], r["arch"], r["digest"]): r for r in runs[1]["rows"]} if len(runs) > 1 else {}
    for r in first["rows"]:
        other = second.get((r["kernel"], r["arch"], r["digest"]))
        t2 = other["time_us"] if other else None
        diff = abs(t2 - r["time_us"]) / r["time_us"] if t2 and r["time_us"] else None
        name = f"**{r['candidate']}**" if r["winner"] else r["candidate"]
        lines.append(
            f"| {r['kernel']} | {r['arch']} | {name} | {r['status']} | {fmt(r['time_us'], '.2f')} "
            f"| {fmt(None if r['spread'] is None else r['spread'] * 100, '.2f', '%')} | {fmt(r['floor_us'], '.2f')} "
            f"| {fmt(r['share_of_floor'], '.3f')} | {fmt(r['vs_baseline'], '.2f')} | {fmt(r['vs_cupy'], '.2f')} "
            f"| {fmt(t2, '.2f')} | {fmt(None if diff is None else diff * 100, '.2f', '%')} |"
        )
    failed = [r for r in first["rows"] if r["status"] != "passed"]
    if failed:
        lines += [""] + [f"- {r['kernel']} {r['candidate']}: {r['status']}: {r['detail']}" for r in failed]
    lines += [
        "",
        "Winners in bold. Unmeasured (no local GPU of that arch): " + (", ".join(first["unmeasured"]) or "none") + ".",
        "",
        "| run | candidates | wall s | candidates per minute | worker restarts |",
        "|---|---:|---:|---:|---:|",
    ]
    for i, run in enumerate(runs, 1):
        how = (
            "evaluate_all of every job"
            if run["mode"] == "all"
            else "prepare(all jobs), then evaluate(job) one at a time"
        )
        lines.append(
            f"| {i}: {how}, cold (fresh cache and builds) | {run['candidates']} | {run['wall_s']:.1f} "
            f"| {run['per_minute']:.1f} | {int(run['stats'].get('worker_restarts', 0))} |"
        )
    if report.get("resolve"):
        res = report["resolve"]
        lines.append(
            f"| r1build.resolve --refresh --offline (all archs, gate of every winner) "
            f"| {res['measured_candidates']} | {res['wall_s']:.1f} | {res['per_minute']:.1f} | |"
        )
    lines += ["", *breakdown(first), "", *job_rows(first)]
    phases = first["stats"]
    lines += [
        "",
        "Run 1, seconds in each phase of the GPU thread: builds and correctness checks "
        f"{phases.get('check_phase_s', 0):.1f}, "
        f"waiting for compute-sanitizer {phases.get('wait_sanitizer_s', 0):.1f}, timing (floors, cupy "
        f"reference, candidates) {phases.get('timing_s', 0):.1f}; {int(phases.get('sanitizer_runs', 0))} "
        f"compute-sanitizer runs took {phases.get('sanitizer_s', 0):.1f} s together; the machine's CPU cores were "
        f"{phases.get('machine_cpu_busy', 0):.0%} busy over the run.",
    ]
    lines += [
        "",
        "Targets: "
        + "; ".join(f"{k}: {'met' if v['met'] else 'MISSED'} ({v['value']})" for k, v in report["targets"].items()),
        "",
    ]
    return "\n".join(lines)


def breakdown(run: dict[str, Any]) -> list[str]:
    """Where a candidate's time goes (run 1): seconds per candidate of each kind of work (CPU work summed over
    the threads that did it) and of the GPU thread's wall time, so the next bottleneck is visible."""
    st = run["stats"]
    n = max(1, run["candidates"])
    cpu = [
        ("static gate (nvcc per arch, ptxas report, symbols)", "gate_s"),
        ("shared-library builds (nvcc, symbol check, link)", "build_s"),
        (f"compute-sanitizer ({int(st.get('sanitizer_runs', 0))} runs)", "sanitizer_s"),
        ("- of which held (stopped while the GPU timed a job)", "sanitizer_held_s"),
        ("- memcheck runs", "sanitizer_memcheck_s"),
        ("- racecheck runs", "sanitizer_racecheck_s"),
        ("- initcheck runs", "sanitizer_initcheck_s"),
        ("judging what the timed calls left (benchmark shapes)", "judge_bench_s"),
    ]
    judged = (
        f"{int(st.get('outputs_judged_on_gpu', 0))} outputs judged on the GPU, "
        f"{int(st.get('outputs_judged_on_cpu', 0))} written for the CPU"
    )
    workers = [
        ("waiting for builds and the gate", "wait_build_s"),
        ("correctness checks (all but the shared-memory fills)", "checks_s"),
        ("- of which waiting for the GPU between shapes (timing holds it)", "check_hold_s"),
        ("- loading the library in the worker", "check_load_s"),
        ("- building the requests (inputs to bytes)", "check_request_s"),
        ("- in the worker (calls, uploads, read-back, transfer)", "check_worker_s"),
        ("- judging the replies", "check_judge_s"),
    ]
    gpu = [
        ("waiting for a job whose checks and sanitizer runs are all in", "wait_ready_s"),
        ("- of which the library's first calls of jobs not ready yet (sharing the GPU)", "warm_ahead_s"),
        ("check phase (builds awaited, checks on the check workers)", "check_phase_s"),
        ("waiting for compute-sanitizer", "wait_sanitizer_s"),
        ("the library's first calls, sharing the GPU (what cupy compiles for it)", "warm_library_s"),
        ("waiting to take the GPU alone (checks end, sanitizer runs stop)", "wait_quiet_s"),
        ("- from the hold, until every sanitizer run stopped or finished (checks go on)", "wait_quiet_runs_s"),
        ("- from the hold, until then the running checks ended (the whole wait)", "wait_quiet_checks_s"),
        ("checks alone on the GPU (shared memory filled before the call)", "checks_alone_s"),
        ("floors and the cupy reference", "reference_s"),
        ("timing candidates", "time_candidates_s"),
    ]
    timing = [
        ("- uploading the input sets", "worker_sets_s"),
        ("- estimates, warm-up and the timed samples", "worker_samples_s"),
        ("- checks after the samples (calls, outputs parked or to files, capture)", "worker_checks_s"),
        (f"- the comparer process on the GPU ({judged})", "judge_gpu_s"),
    ]
    lines = [
        f"Per candidate (run 1, {run['candidates']} candidates, {run['wall_s']:.1f} s wall):",
        "",
        "| work | where | total s | ms per candidate |",
        "|---|---|---:|---:|",
    ]
    lines += [f"| {name} | CPU pool | {st.get(k, 0):.1f} | {st.get(k, 0) / n * 1e3:.0f} |" for name, k in cpu]
    workers += _parts(st, "check_call_", "  - calls of the `{}` check ({} calls)", "check_calls_")
    timing += _parts(st, "worker_check_", "  - `{}` after the samples")
    lines += [
        f"| {name} | check workers (summed) | {st.get(k, 0):.1f} | {st.get(k, 0) / n * 1e3:.0f} |"
        for name, k in workers
    ]
    lines += [f"| {name} | GPU thread | {st.get(k, 0):.1f} | {st.get(k, 0) / n * 1e3:.0f} |" for name, k in gpu]
    lines += [f"| {name} | timing worker | {st.get(k, 0):.1f} | {st.get(k, 0) / n * 1e3:.0f} |" for name, k in timing]
    lines.append(
        f"| waiting for the judging of the timed calls (the GPU goes on) | settling thread | "
        f"{st.get('wait_judge_s', 0):.1f} | {st.get('wait_judge_s', 0) / n * 1e3:.0f} |"
    )
    accounted = sum(st.get(k, 0) for _, k in gpu)
    lines.append(
        f"| other (start, gate-only archs, results) | GPU thread | {run['wall_s'] - accounted:.1f} "
        f"| {(run['wall_s'] - accounted) / n * 1e3:.0f} |"
    )
    return lines


def _parts(st: dict[str, float], prefix: str, label: str, calls: str = "") -> list[tuple[str, str]]:
    """Rows for the counters ``<prefix><check>_s``, largest first: where one kind of work's time went by check
    (``label`` formatted with the check's name and, with ``calls``, the count ``<calls><check>``)."""
    found = sorted((k for k in st if k.startswith(prefix) and k.endswith("_s")), key=lambda k: st[k], reverse=True)
    rows = []
    for k in found:
        check = k[len(prefix) : -2]
        rows.append((label.format(check, int(st.get(calls + check, 0))), k))
    return rows


def job_rows(run: dict[str, Any]) -> list[str]:
    """Per job of run 1, in the order the GPU thread reached it: when (seconds since the evaluator started) its
    work of each kind ended, and how long the GPU thread waited at it."""
    cols = [
        ("gate", "gate"),
        ("built", "built"),
        ("checked", "checked"),
        ("sanitized", "sanitized"),
        ("GPU reached", "gpu_reached"),
        ("wait ready s", "wait_ready_s"),
        ("check phase s", "check_phase_s"),
        ("wait sanitizer s", "wait_sanitizer_s"),
        ("timing s", "timing_s"),
        ("timed", "timed"),
        ("settled", "settled"),
        ("sanitizer runs", "sanitizer_runs"),
    ]
    lines = [
        "Per job (run 1; times in seconds since the evaluator started, the last of each kind of work):",
        "",
        "| job | " + " | ".join(name for name, _ in cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for row in run.get("milestones", []):
        cells = [fmt(row.get(key), ".1f") if key != "sanitizer_runs" else str(row.get(key, 0)) for _, key in cols]
        lines.append(f"| {row['job']} | " + " | ".join(cells) + " |")
    return lines


PASSED_ON = ("sanitize_batch", "check_workers", "sanitize_runs", "start_by", "racecheck_runs")
"""Options whose value goes to :class:`EvaluatorOptions` as given (None: its default)."""
FLAGS = {
    "in_order": ("in_order", True),
    "largest_first": ("small_first", False),
    "racecheck_first": ("racecheck_first", True),
    "time_before_sanitized": ("time_before_sanitized", True),
    "no_compare_on_gpu": ("compare_on_gpu", False),
    "no_sanitize": ("sanitize", False),
}
"""Switches, each setting one :class:`EvaluatorOptions` field to a value when given."""


def evaluator_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`EvaluatorOptions` fields the command line sets."""
    options = {name: getattr(args, name) for name in PASSED_ON if getattr(args, name) is not None}
    options.update(dict(value for flag, value in FLAGS.items() if getattr(args, flag)))
    return options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=ROOT / "kernels.toml")
    parser.add_argument("--runs", type=int, default=2, help="runs of evaluate_all (one more runs job by job)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--no-resolve", action="store_true", help="skip the run through r1build.resolve")
    parser.add_argument("--no-job-by-job", action="store_true", help="skip the run that evaluates job by job")
    parser.add_argument(
        "--copies", type=int, default=1, help="evaluate this many distinct copies of every candidate (throughput)"
    )
    parser.add_argument(
        "--sanitize-batch", type=int, default=None, help="candidates per compute-sanitizer run (1: one run each)"
    )
    parser.add_argument("--check-workers", type=int, default=None, help="check workers per GPU")
    parser.add_argument(
        "--sanitize-runs", type=int, default=None, help="compute-sanitizer runs of a kernel and tool at once"
    )
    parser.add_argument("--in-order", action="store_true", help="time jobs in the order given, not the first one ready")
    parser.add_argument(
        "--racecheck-first",
        action="store_true",
        help="experiment: a freed compute-sanitizer place goes to a waiting racecheck run first",
    )
    parser.add_argument(
        "--largest-first",
        action="store_true",
        help="start jobs most work first throughout (not the smallest job first; --start-by says what is work)",
    )
    parser.add_argument(
        "--racecheck-runs",
        type=int,
        default=None,
        help="experiment: most racecheck runs of one kernel at once (EvaluatorOptions.racecheck_runs)",
    )
    parser.add_argument(
        "--start-by",
        choices=["candidates", "sanitizer-work"],
        default=None,
        help="what orders the jobs' start, the most first (EvaluatorOptions.start_by)",
    )
    parser.add_argument(
        "--time-before-sanitized",
        action="store_true",
        help="time a job once its checks are in, its compute-sanitizer runs going on (their findings applied after)",
    )
    parser.add_argument(
        "--most-runs",
        type=int,
        default=None,
        help="experiment: compute-sanitizer runs one kernel and tool may have on idle places (sanitizing.MOST_RUNS)",
    )
    parser.add_argument(
        "--no-sanitize", action="store_true", help="experiment: no compute-sanitizer runs (what they cost the checks)"
    )
    parser.add_argument(
        "--sanitizer-processes",
        type=int,
        default=None,
        help="experiment: compute-sanitizer processes at once (default: one per core)",
    )
    parser.add_argument(
        "--no-compare-on-gpu",
        action="store_true",
        help="write what the timed calls left to files for the CPU (as before the comparer process)",
    )
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)8.0f ms %(name)s: %(message)s")
    options = evaluator_options(args)
    if args.most_runs is not None:
        from r1build.evaluate.sanitizer import schedule as sanitizing

        sanitizing.MOST_RUNS = args.most_runs
    gpus = detect_gpus()
    if not gpus:
        print("no GPU visible (cupy missing or no device): nothing to measure", file=sys.stderr)
        return 2
    runs = []
    for i in range(args.runs + (0 if args.no_job_by_job else 1)):
        run = one_run(
            args.manifest.resolve(),
            one_at_a_time=i == args.runs,
            copies=args.copies,
            evaluator_options=options,
            sanitizer_processes=args.sanitizer_processes,
        )
        runs.append(run)
        print(
            f"run {i + 1} ({run['mode']}): {run['candidates']} candidates in {run['wall_s']:.1f} s "
            f"({run['per_minute']:.1f}/min)",
            flush=True,
        )
    resolved = None if args.no_resolve else resolve_run(args.manifest.resolve())
    if resolved:
        print(f"resolve: {resolved['wall_s']:.1f} s ({resolved['per_minute']:.1f}/min)", flush=True)

    rows = runs[0]["rows"]
    errors = [median_error(r["spread"], r["samples"]) for r in rows if r["time_us"] and r["time_us"] >= 50]
    diffs = []
    if len(runs) > 1:
        second = {(r["kernel"], r["arch"], r["digest"]): r for r in runs[1]["rows"]}
        for r in rows:
            o = second.get((r["kernel"], r["arch"], r["digest"]))
            if r["time_us"] and o and o["time_us"]:
                diffs.append(abs(o["time_us"] - r["time_us"]) / r["time_us"])
    best_rate = min(run["per_minute"] for run in runs)
    targets = {
        "candidates per minute >= 30 (every run)": {
            "met": best_rate >= TARGET_PER_MINUTE,
            "value": ", ".join(f"{run['per_minute']:.1f}" for run in runs),
        },
        "median error <= 0.5% at >= 50 us": {
            "met": all(e <= TARGET_MEDIAN_ERROR for e in errors),
            "value": f"max {max(errors) * 100:.2f}%" if errors else "no such kernel",
        },
        "repeat within 3%": {
            "met": all(d <= TARGET_REPEAT for d in diffs),
            "value": f"max {max(diffs) * 100:.2f}%" if diffs else "one run",
        },
        "every manifest candidate passes": {
            "met": all(r["status"] == "passed" for r in rows),
            "value": f"{sum(r['status'] == 'passed' for r in rows)}/{len(rows)}",
        },
    }
    report = {
        "command": command_line(__file__, argv),
        "date": utc_now(),
        "device": f"{gpus[0].name} ({len(gpus)} visible, {gpus[0].arch}, {gpus[0].memory / 2**30:.0f} GiB)",
        "host": host_info(),
        "runs": runs,
        "resolve": resolved,
        "targets": targets,
    }
    write_results(args.out, "evaluate_root", report, markdown(report))
    return 0 if all(t["met"] for t in targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
