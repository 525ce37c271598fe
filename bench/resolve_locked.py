"""Warm commands on a warm cache, each in a fresh process as a user runs it: ``r1build resolve --locked``,
``status`` and ``check --locked``; and the cold lock that warmed the cache, watched.

The project is a copy of the root manifest, or with ``--kernels N`` a synthetic one of N small kernels for
``--archs`` (``bench/_synthetic.py``). First ``r1build lock --offline --no-gpu`` runs on an empty cache (the cold
lock: every baseline through the static gate for every arch), with an nvcc wrapper that logs each compile (the
most compilers at once) and a sampler of the memory of every process below it (the compilers' peak memory);
its wall and CPU time are recorded. Then each warm command runs once untimed (it records its answer, see
``r1build/cli/fastpath.py``) and ``--runs`` times timed: wall time (min and median: the machine may be shared
with other work, so the minimum is the figure least disturbed by it) and CPU time of the process. Separately,
the ``resolve()`` call inside one process (the full path, no record). Then the first run as a CI job sees it:
``resolve --locked`` and ``status`` with a new, unrelated variable each run (``CI_JOB_ID``: the record still
answers, a replay), after an unrelated edit of the manifest each run (a new comment: the record checks what r1build
reads of the manifest, and still answers), and on a new machine each run (an empty user state folder: no record,
the full path), each paired with ``python -c pass`` (ratios; targets 8x at the root, 12x at 50 x 3). Byte-compiled
modules are written first,
as an installed package has them. Writes ``bench/results/resolve_locked.json`` / ``.md`` (root) or
``resolve_locked_<N>x<archs>.*``; exits 1 when a command's minimum misses its target.

    python bench/resolve_locked.py [--runs 15] [--kernels 50 --archs sm_80,sm_89,sm_90] [--out bench/results]
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _compilers import MemorySampler, nvcc_wrapper, peak_concurrency  # noqa: E402
from _report import command_line, host_info, r1build_cli, utc_now, write_results  # noqa: E402
from _synthetic import write_project  # noqa: E402

from r1build.cache import Cache  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.resolve import ResolveOptions, resolve  # noqa: E402
from r1build.toolchain.nvcc import find_nvcc  # noqa: E402

TARGET_MS = 100.0
"""Each warm command on the root manifest."""
SCALE_TARGET_MS = 150.0
"""Each warm command on 50 kernels x 3 archs."""
COMMANDS = {
    "resolve --locked": ["resolve", "--locked", "--no-gpu"],
    "status": ["status"],
    "check --locked": ["check", "--locked"],
}


def children_cpu() -> float:
    """User + system seconds of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cold_lock(work: Path, env: dict[str, str]) -> dict[str, Any]:
    """``r1build lock --offline --no-gpu`` on an empty cache, watched: wall, CPU, compiles, most at once, peak
    compiler memory."""
    wrapper, log = nvcc_wrapper(work / "wrapped-nvcc", find_nvcc())
    cmd = [sys.executable, "-m", "r1build.cli.main", "lock", "--offline", "--no-gpu", "-m", str(work / "project")]
    cpu0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env | {"R1BUILD_NVCC": str(wrapper)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    sampler = MemorySampler(proc.pid)
    output, _ = proc.communicate()
    peak_rss = sampler.stop()
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    if proc.returncode != 0:
        sys.exit(f"the cold lock failed ({proc.returncode}):\n{output[-4000:]}")
    compiles, most = peak_concurrency(log)
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "compiles": compiles,
        "most_at_once": most,
        "cores": os.cpu_count(),
        "peak_compiler_memory_gib": round(peak_rss / 2**30, 2),
        "cpu_per_compile_s": round(cpu / compiles, 2) if compiles else None,
    }


def time_command(args: list[str], env: dict[str, str], runs: int) -> dict[str, Any]:
    """A warm command in fresh processes: one untimed run (it records its answer), then ``runs`` timed."""
    cmd = [*r1build_cli(), *args]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if first.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({first.returncode}):\n{first.stdout}{first.stderr}")
    wall, cpu = [], []
    for _ in range(runs):
        c0, t0 = children_cpu(), time.perf_counter()
        subprocess.run(cmd, env=env, capture_output=True, check=True)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((children_cpu() - c0) * 1000)
    return {
        "min_ms": round(min(wall), 1),
        "median_ms": round(statistics.median(wall), 1),
        "max_ms": round(max(wall), 1),
        "cpu_min_ms": round(min(cpu), 1),
        "cpu_median_ms": round(statistics.median(cpu), 1),
        "runs": runs,
    }


FIRST_RUN_RATIO = 8.0
"""First run (new variable, after an edit) over ``python -c pass``, root manifest (issue 29)."""
SCALE_FIRST_RUN_RATIO = 12.0
"""The same at 50 kernels x 3 archs."""
FIRST_RUN = {"resolve --locked": COMMANDS["resolve --locked"], "status": COMMANDS["status"]}


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one run of ``cmd`` (its output discarded; it must succeed)."""
    c0, t0 = children_cpu(), time.perf_counter()
    subprocess.run(cmd, env=env, capture_output=True, check=True)
    return (time.perf_counter() - t0) * 1000, (children_cpu() - c0) * 1000


def time_varied(args: list[str], env: dict[str, str], runs: int, manifest: Path, how: str) -> dict[str, Any]:
    """``args`` in fresh processes, each run with something new: ``variable`` (a new ``CI_JOB_ID``, as every CI
    job has), ``edit`` (a new comment appended to the manifest; the file is restored after) or ``new machine`` (a
    new, empty user state folder: no record and no key to sign one, as on a CI job's fresh machine). Each run is
    paired with a ``python -c pass`` just before it (the machine may be shared: the pair sees the same load)."""
    cmd = [*r1build_cli(), *args]
    saved = manifest.read_bytes()
    wall, cpu, pass_wall, pass_cpu = [], [], [], []
    try:
        with tempfile.TemporaryDirectory() as states:
            for i in range(runs):
                run_env = env
                if how == "variable":
                    run_env = env | {"CI_JOB_ID": f"{os.getpid()}-{i}-{time.time_ns()}"}
                elif how == "new machine":
                    run_env = env | {"XDG_STATE_HOME": str(Path(states) / str(i))}
                else:
                    manifest.write_bytes(saved + f"\n# edit {time.time_ns()}\n".encode())
                w, c = _timed([sys.executable, "-c", "pass"], env)
                pass_wall.append(w)
                pass_cpu.append(c)
                w, c = _timed(cmd, run_env)
                wall.append(w)
                cpu.append(c)
    finally:
        manifest.write_bytes(saved)
    return {
        "min_ms": round(min(wall), 1),
        "median_ms": round(statistics.median(wall), 1),
        "cpu_min_ms": round(min(cpu), 1),
        "python_pass_min_ms": round(min(pass_wall), 1),
        "python_pass_cpu_min_ms": round(min(pass_cpu), 1),
        "runs": runs,
    }


FIRST_RUN_WAYS = ("variable", "edit", "new machine")
"""How a first run differs from the run before it (:func:`time_varied`)."""


def first_runs(project: Path, env: dict[str, str], runs: int) -> dict[str, Any]:
    """:func:`time_varied` of ``resolve --locked`` and ``status`` each way, with each minimum's ratio to the
    minimum of the ``python -c pass`` runs paired with it (wall, and CPU)."""
    out: dict[str, Any] = {}
    for how in FIRST_RUN_WAYS:
        for label, argv in FIRST_RUN.items():
            r = time_varied([*argv, "-m", str(project)], env, runs, project / "kernels.toml", how)
            out[f"{label} ({how})"] = r | {
                "ratio_to_python_pass": round(r["min_ms"] / r["python_pass_min_ms"], 1),
                "cpu_ratio_to_python_pass": round(r["cpu_min_ms"] / max(r["python_pass_cpu_min_ms"], 0.1), 1),
            }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--kernels", type=int, default=0, help="a synthetic project of this many kernels (0: root)")
    parser.add_argument("--archs", default="sm_80,sm_89,sm_90", help="the synthetic project's archs")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "r1build"), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    for var in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_BASE_URL", "R1BUILD_NVCC"):
        env.pop(var, None)
    archs = [a for a in args.archs.split(",") if a]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        project = work / "project"
        if args.kernels:
            write_project(project, args.kernels, archs)
            name, what = f"resolve_locked_{args.kernels}x{len(archs)}", f"{args.kernels} synthetic kernels"
            target, ratio = SCALE_TARGET_MS, SCALE_FIRST_RUN_RATIO
        else:
            project.mkdir()
            shutil.copy(ROOT / "kernels.toml", project / "kernels.toml")
            shutil.copytree(
                ROOT / "kernels", project / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__")
            )
            name, what, target, ratio = "resolve_locked", "kernels.toml (root)", TARGET_MS, FIRST_RUN_RATIO
        env["R1BUILD_CACHE_DIR"] = str(work / "cache")
        cold = cold_lock(work, env)
        load_start = os.getloadavg()[0]
        commands = {
            label: time_command([*argv, "-m", str(project)], env, args.runs) for label, argv in COMMANDS.items()
        }
        manifest = load_manifest(project / "kernels.toml", check_references=False)
        inproc = []
        os.environ["R1BUILD_CACHE_DIR"] = str(work / "cache")
        for _ in range(args.runs):
            t = time.perf_counter()
            with Cache(work / "cache") as cache:
                res = resolve(manifest, cache, ResolveOptions(locked=True, evaluate=False, write_lock=False))
            inproc.append((time.perf_counter() - t) * 1000)
        entries = len(res.entries)
        pass_ = [python_pass_ms(env, args.runs)]
        first = first_runs(project, env, args.runs)
    result = {
        "benchmark": name,
        "date": utc_now(),
        "host": host_info(),
        "command": command_line(__file__),
        "manifest": what,
        "kernel_archs": entries,
        "load_average_1min": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
        "cold_lock": cold,
        "commands": commands,
        "python_pass_min_ms": pass_[0],
        "in_process_resolve_ms": {"median": round(statistics.median(inproc), 2), "min": round(min(inproc), 2)},
        "first_run": first,
        "first_run_ratio_target": ratio,
        "target_ms": target,
        "ok": all(c["min_ms"] <= target for c in commands.values())
        and all(f["ratio_to_python_pass"] <= ratio for f in first.values()),
    }
    write_results(args.out, name, result, markdown(result))
    return 0 if result["ok"] else 1


def python_pass_ms(env: dict[str, str], runs: int) -> float:
    """The least wall time of ``python -c pass`` (the floor every command pays), for comparison."""
    wall = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        wall.append((time.perf_counter() - t0) * 1000)
    return round(min(wall), 1)


def markdown(r: dict[str, Any]) -> str:
    cold, host = r["cold_lock"], r["host"]
    lines = [
        f"# Warm commands and the cold lock: {r['manifest']}",
        "",
        f"- date: {r['date']}; host: {host['cpu']}, {host['cpus']} cores, Python {host['python']}; 1-minute load "
        f"average {r['load_average_1min']['start']} at the start of the warm runs, {r['load_average_1min']['end']} "
        "at the end (a machine shared with other work: the minimum of the runs is the figure)",
        f"- command: `{r['command']}`",
        f"- {r['kernel_archs']} kernel × arch entries",
        "",
        "| warm command (fresh process) | min | median | max | CPU min | CPU median |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *[
            f"| `r1build {label}` | {c['min_ms']:.0f} ms | {c['median_ms']:.0f} ms | {c['max_ms']:.0f} ms | "
            f"{c['cpu_min_ms']:.0f} ms | {c['cpu_median_ms']:.0f} ms |"
            for label, c in r["commands"].items()
        ],
        f"| `python -c pass` | {r['python_pass_min_ms']:.0f} ms | | | | |",
        f"| `resolve()` in one process (full path) | {r['in_process_resolve_ms']['min']:.1f} ms | "
        f"{r['in_process_resolve_ms']['median']:.1f} ms | | | |",
        "",
        "The first run as a CI job sees it, each run in a fresh process: *variable* = a new, unrelated "
        "`CI_JOB_ID` each run (the record still answers: a replay); *edit* = a new comment appended to the "
        "manifest before each run (the record still answers: it checks the manifest by what r1build reads of it, "
        "a replay); *new machine* = an empty user state folder each run (no record, no key to sign one: the full "
        "path, as on a CI job's fresh machine). Each run is paired with a `python -c pass` run just before it; the "
        "ratios are of the minimums (wall) and of the CPU times (user + system).",
        "",
        "| first run | min | median | paired `python -c pass` min | min / `python -c pass` | CPU min | "
        "CPU min / `python -c pass` CPU |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *[
            f"| `r1build {label}` | {f['min_ms']:.0f} ms | {f['median_ms']:.0f} ms | {f['python_pass_min_ms']:.0f} ms "
            f"| {f['ratio_to_python_pass']}x | {f['cpu_min_ms']:.0f} ms | {f['cpu_ratio_to_python_pass']}x |"
            for label, f in r["first_run"].items()
        ],
        "",
        f"Targets: at most {r['target_ms']:.0f} ms for each warm command (replay), and at most "
        f"{r['first_run_ratio_target']:.0f}x `python -c pass` for each first run: {'met' if r['ok'] else 'MISSED'}.",
        "",
        "The cold lock that filled the cache (`r1build lock --offline --no-gpu`, empty cache, every baseline "
        "through the static gate for every arch):",
        "",
        "| wall | CPU (children) | nvcc runs | most at once | cores | peak compiler memory | CPU per nvcc |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {cold['wall_s']} s | {cold['cpu_s']} s | {cold['compiles']} | {cold['most_at_once']} | {cold['cores']} | "
        f"{cold['peak_compiler_memory_gib']} GiB | {cold['cpu_per_compile_s']} s |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
