"""What ``--cluster`` costs on a machine without a GPU, paired against the same run without it: the gate's nvcc runs
of a cold lock of the root manifest, and a warm ``resolve --locked``.

A Dask scheduler is started here and ``r1build worker --insecure --compile-slots N`` joins it (compile slots only),
both with an nvcc wrapper that logs each compile (``bench/_compilers.py``). Then, on a copy of the root project:

- *cold gate*: ``r1build lock --offline --no-gpu`` from an empty cache, once here and once with ``--cluster``
  (every gate compile on the worker): nvcc runs, the most at once, wall and CPU (this process's children and the
  worker's process tree). Target (issue 29): the cluster's nvcc runs equal the local gate's.
- *warm locked*: ``r1build resolve --locked --no-gpu`` on the warm cache, each run in a fresh process after an
  unrelated edit of the manifest (a new comment: no replay record answers, the full path), alternating without and
  with ``--cluster``; min and median wall. A warm run needs no worker and should not connect to the scheduler.

Writes ``bench/results/cluster_gate.json`` / ``.md``; exits 1 when the nvcc counts differ, 2 without
``distributed``.

    python bench/cluster_gate.py [--runs 9] [--compile-slots 2] [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _compilers import nvcc_wrapper, peak_concurrency  # noqa: E402
from _report import command_line, host_info, utc_now, write_results  # noqa: E402
from resolve_locked import children_cpu  # noqa: E402

from r1build.toolchain.nvcc import find_nvcc  # noqa: E402


def tree_cpu(pid: int) -> float:
    """User + system seconds of ``pid`` and every live process below it, their waited-for children included."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(f) for f in fields[11:15]) / ticks
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += times.get(p, 0.0)
        todo += [c for c, parent in parents.items() if parent == p]
    return total


def cold_lock(project: Path, env: dict[str, str], log: Path, worker: int, extra: list[str]) -> dict[str, Any]:
    """``r1build lock --offline --no-gpu`` from an empty cache (``extra``: ``--cluster ADDRESS``), watched."""
    shutil.rmtree(env["R1BUILD_CACHE_DIR"], ignore_errors=True)
    (project / "kernels.lock").unlink(missing_ok=True)
    log.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "r1build.cli.main", "lock", "--offline", "--no-gpu", "-m", str(project), *extra]
    cpu0, wcpu0, t0 = children_cpu(), tree_cpu(worker), time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall, cpu, wcpu = time.perf_counter() - t0, children_cpu() - cpu0, tree_cpu(worker) - wcpu0
    if proc.returncode != 0:
        sys.exit(f"the cold lock failed ({proc.returncode}):\n{proc.stdout}{proc.stderr[-4000:]}")
    compiles, most = peak_concurrency(log)
    return {
        "nvcc_runs": compiles,
        "most_at_once": most,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu + wcpu, 1),
    }


def warm_locked(project: Path, env: dict[str, str], address: str, runs: int) -> dict[str, Any]:
    """``resolve --locked --no-gpu`` after an unrelated edit each run, alternating without and with ``--cluster``."""
    manifest = project / "kernels.toml"
    saved = manifest.read_bytes()
    base = [sys.executable, "-m", "r1build.cli.main", "resolve", "--locked", "--no-gpu", "-m", str(project)]
    walls: dict[str, list[float]] = {"without": [], "with --cluster": []}
    try:
        for _ in range(runs):
            for label, extra in (("without", []), ("with --cluster", ["--cluster", address])):
                manifest.write_bytes(saved + f"\n# edit {time.time_ns()}\n".encode())
                t0 = time.perf_counter()
                proc = subprocess.run([*base, *extra], env=env, capture_output=True, text=True, check=False)
                walls[label].append((time.perf_counter() - t0) * 1000)
                if proc.returncode != 0:
                    sys.exit(f"resolve --locked {' '.join(extra)} failed:\n{proc.stderr[-4000:]}")
    finally:
        manifest.write_bytes(saved)
    return {
        label: {"min_ms": round(min(w), 1), "median_ms": round(statistics.median(w), 1), "runs": runs}
        for label, w in walls.items()
    }


def start_worker(address: str, env: dict[str, str], slots: int, log: Path) -> subprocess.Popen[bytes]:
    """``r1build worker`` with compile slots only, joined to the scheduler."""
    from distributed import Client

    cmd = [sys.executable, "-m", "r1build.cli.main", "worker", "--scheduler", address, "--insecure"]
    proc = subprocess.Popen(
        [*cmd, "--compile-slots", str(slots)], env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )
    with Client(address, set_as_default=False) as client:
        deadline = time.monotonic() + 120
        while not client.scheduler_info(n_workers=-1)["workers"]:
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"r1build worker did not join:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.2)
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--compile-slots", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    try:
        from distributed import LocalCluster
    except ImportError:
        print("needs the cluster extra: pip install 'r1build[cluster]'", file=sys.stderr)
        return 2
    with (
        tempfile.TemporaryDirectory(prefix="r1build-bench-cluster-gate-") as tmp,
        LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=":0") as scheduler,
    ):
        work = Path(tmp)
        project = work / "project"
        project.mkdir()
        shutil.copy(ROOT / "kernels.toml", project / "kernels.toml")
        shutil.copytree(ROOT / "kernels", project / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
        wrapper, log = nvcc_wrapper(work / "wrapped-nvcc", find_nvcc())
        secrets = ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_BASE_URL", "R1BUILD_CLUSTER")
        env = {k: v for k, v in os.environ.items() if k not in secrets}
        env |= {"PYTHONPATH": str(ROOT), "R1BUILD_NVCC": str(wrapper), "R1BUILD_CACHE_DIR": str(work / "cache")}
        address = scheduler.scheduler_address
        worker = start_worker(address, env, args.compile_slots, work / "worker.log")
        load_start = os.getloadavg()[0]
        try:
            local = cold_lock(project, env, log, worker.pid, [])
            cluster = cold_lock(project, env, log, worker.pid, ["--cluster", address])
            warm = warm_locked(project, env, address, args.runs)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
    doc = {
        "benchmark": "cluster_gate",
        "date": utc_now(),
        "host": host_info(),
        "command": command_line(__file__),
        "compile_slots": args.compile_slots,
        "load_average_1min": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
        "cold_gate": {"local": local, "cluster": cluster},
        "warm_locked": warm,
        "ok": local["nvcc_runs"] == cluster["nvcc_runs"],
    }
    write_results(args.out, "cluster_gate", doc, markdown(doc))
    return 0 if doc["ok"] else 1


def markdown(r: dict[str, Any]) -> str:
    host, cold, warm = r["host"], r["cold_gate"], r["warm_locked"]
    ratio = warm["with --cluster"]["min_ms"] / warm["without"]["min_ms"]
    return "\n".join(
        [
            "# `--cluster` against the same run without it: root manifest, no GPU",
            "",
            f"- date: {r['date']}; host: {host['cpu']}, {host['cpus']} cores, Python {host['python']}; 1-minute load "
            f"average {r['load_average_1min']['start']} at the start, {r['load_average_1min']['end']} at the end (a "
            "machine shared with other work: the minimum of the runs is the figure)",
            f"- command: `{r['command']}`",
            f"- a Dask scheduler here and `r1build worker --insecure --compile-slots {r['compile_slots']}` on the "
            "same host; nvcc through a wrapper that logs each compile",
            "",
            "Cold gate: `r1build lock --offline --no-gpu` from an empty cache (CPU: this process's children and the "
            "worker's process tree).",
            "",
            "| | nvcc runs | most at once | wall | CPU |",
            "| --- | ---: | ---: | ---: | ---: |",
            *[
                f"| {label} | {c['nvcc_runs']} | {c['most_at_once']} | {c['wall_s']} s | {c['cpu_s']} s |"
                for label, c in (("local gate", cold["local"]), ("`--cluster`", cold["cluster"]))
            ],
            "",
            "Warm `r1build resolve --locked --no-gpu` (fresh process, an unrelated edit of the manifest before each "
            "run: the full path, no replay), alternating:",
            "",
            "| | min | median |",
            "| --- | ---: | ---: |",
            *[f"| {label} | {w['min_ms']:.0f} ms | {w['median_ms']:.0f} ms |" for label, w in warm.items()],
            "",
            f"With `--cluster` ÷ without (min): {ratio:.2f}x. Target: the cluster gate's nvcc runs equal the local "
            f"gate's: {'met' if r['ok'] else 'MISSED'}.",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
