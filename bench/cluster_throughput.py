"""Throughput of ``resolve --cluster``: the root manifest resolved through a Dask scheduler on this host and
``r1build worker`` on N of its GPUs, against the same with one GPU.

For each worker count (1, then every visible GPU, or ``--gpus``), a fresh ``r1build worker --scheduler ...
--gpus 0[,1,...]`` joins a scheduler started here; the root manifest (a copy, no lock) is resolved ``--runs``
times, each from an empty cache (``offline``, the first GPU's arch only), and timed end to end; every candidate
the GPU workers judged counts. The first run of a worker set also pays its workers' start (cupy, the GPU worker
processes, the floors); the ratio is taken from the last run of each set. Target (issue 12): N=2 ÷ N=1 ≥ 1.8.
Also records which worker ran each job (from the workers' progress events), so "every GPU busy" is visible.

Writes ``bench/results/cluster_throughput.json`` and ``.md``; exits 2 without a GPU or without ``distributed``.
With one GPU it reports the one-worker figure alone.

    python bench/cluster_throughput.py [--manifest kernels.toml] [--gpus 2] [--runs 2] [--compile-slots 4]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

from r1build.cache import Cache  # noqa: E402
from r1build.cluster.facts import process_facts  # noqa: E402
from r1build.cluster.tasks import PROGRESS_TOPIC  # noqa: E402
from r1build.evaluate import detect_gpus  # noqa: E402
from r1build.events import sink  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.resolve import ResolveOptions, resolve  # noqa: E402

TARGET_RATIO = 1.8


def project_copy(manifest: Path, where: Path) -> Path:
    """The manifest's project (the manifest, ``kernels/``) copied without its lock."""
    where.mkdir(parents=True)
    shutil.copy(manifest, where / manifest.name)
    kernels = manifest.parent / "kernels"
    if kernels.is_dir():
        shutil.copytree(kernels, where / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
    return where / manifest.name


def start_workers(address: str, gpus: list[int], compile_slots: int, log: Path) -> subprocess.Popen[bytes]:
    """``r1build worker`` on these GPUs, joined to the scheduler (returns once every worker is in)."""
    from distributed import Client

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "r1build.cli.main",
            "worker",
            "--scheduler",
            address,
            "--gpus",
            ",".join(map(str, gpus)),
            "--compile-slots",
            str(compile_slots),
        ],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    with Client(address, set_as_default=False) as client:
        client.wait_for_workers(len(gpus) + (1 if compile_slots else 0), timeout=300)
    return proc


def stop_workers(proc: subprocess.Popen[bytes], address: str) -> None:
    from distributed import Client

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    with Client(address, set_as_default=False) as client:
        deadline = time.monotonic() + 60
        while client.scheduler_info(n_workers=-1)["workers"] and time.monotonic() < deadline:
            time.sleep(0.5)


def one_run(manifest_path: Path, arch: str, address: str) -> dict[str, Any]:
    """One resolve of the manifest on the cluster from an empty cache: wall time and what the GPUs judged."""
    from distributed import Client

    manifest = load_manifest(manifest_path)
    with Client(address, set_as_default=False) as client:
        seen = len(client.get_events(PROGRESS_TOPIC))
    with (
        tempfile.TemporaryDirectory(prefix="r1build-bench-") as tmp,
        Cache(Path(tmp) / "cache") as cache,
        sink(lambda event: None),
    ):
        start = time.perf_counter()
        resolution = resolve(
            manifest, cache, ResolveOptions(generate=False, archs=[arch], cluster=address, write_lock=False)
        )
        wall = time.perf_counter() - start
        decisions = cache.decisions()
    judged = sum(1 for d in decisions for r in d.results if r.stage == "evaluate")
    with Client(address, set_as_default=False) as client:
        events = client.get_events(PROGRESS_TOPIC)[seen:]
    per_worker = Counter(str(m.get("name")) for _, m in events if isinstance(m, dict))
    return {
        "wall_s": round(wall, 2),
        "judged_on_gpu": judged,
        "candidates_per_min": round(judged / wall * 60, 2) if wall else None,
        "jobs_per_worker": dict(sorted(per_worker.items())),
        "winners": {f"{r.spec.name}/{r.arch}": [r.validation, r.time_us] for r in resolution.entries},
        "unresolved": [f"{u.kernel}/{u.arch}" for u in resolution.unresolved],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=ROOT / "kernels.toml")
    parser.add_argument("--gpus", type=int, help="the larger worker count (default: every visible GPU)")
    parser.add_argument("--runs", type=int, default=2, help="resolves per worker count (default 2)")
    parser.add_argument("--compile-slots", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    try:
        from distributed import LocalCluster
    except ImportError:
        print("needs the cluster extra: pip install 'r1build[cluster]'", file=sys.stderr)
        return 2
    gpus = detect_gpus()
    if not gpus:
        print("no GPU visible: nothing to measure", file=sys.stderr)
        return 2
    arch = gpus[0].arch
    same = [g.index for g in gpus if g.arch == arch]
    most = min(args.gpus or len(same), len(same))
    counts = [1] if most == 1 else [1, most]
    configs: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="r1build-bench-cluster-") as tmp,
        LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=":0") as scheduler,
    ):
        address = scheduler.scheduler_address
        manifest_path = project_copy(args.manifest, Path(tmp) / "project")
        for n in counts:
            log = Path(tmp) / f"workers-{n}.log"
            proc = start_workers(address, same[:n], args.compile_slots, log)
            try:
                runs = [one_run(manifest_path, arch, address) for _ in range(args.runs)]
            finally:
                stop_workers(proc, address)
            configs[str(n)] = {
                "gpus": [f"{g.name} (device {g.index})" for g in gpus if g.index in same[:n]],
                "runs": runs,
            }
            print(
                f"{n} worker(s): " + ", ".join(f"{r['candidates_per_min']}/min in {r['wall_s']} s" for r in runs),
                file=sys.stderr,
            )
    one = configs["1"]["runs"][-1]["candidates_per_min"]
    ratio = None
    if len(counts) > 1 and one:
        ratio = round(configs[str(most)]["runs"][-1]["candidates_per_min"] / one, 3)
    doc: dict[str, Any] = {
        "benchmark": "cluster_throughput",
        "date": utc_now(),
        "command": command_line(__file__),
        "host": host_info(gpus=[f"{g.name} ({g.arch})" for g in gpus], r1build=process_facts().describe()),
        "manifest": str(args.manifest),
        "arch": arch,
        "workers": configs,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
    }
    lines = [
        "# resolve --cluster throughput: the root manifest on N GPU workers vs 1",
        "",
        f"- date: {doc['date']}",
        f"- command: `{doc['command']}`",
        f"- host: {doc['host']['cpu']} ({doc['host']['cpus']} CPUs), GPUs: {', '.join(doc['host']['gpus'])}",
        f"- {doc['host']['r1build']}; arch measured: {arch}; a scheduler here and `r1build worker --gpus ...` per "
        "worker set; each run resolves from an empty cache (offline)",
        "",
        "| workers | run | wall (s) | judged on GPU | candidates/min | jobs per worker |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for n, config in configs.items():
        for i, run in enumerate(config["runs"], 1):
            jobs = ", ".join(f"{w}: {c}" for w, c in run["jobs_per_worker"].items())
            lines.append(
                f"| {n} | {i} | {run['wall_s']} | {run['judged_on_gpu']} | {run['candidates_per_min']} | {jobs} |"
            )
    lines.append("")
    if ratio is None:
        lines.append(f"One GPU of {arch} visible: the one-worker figure alone ({one}/min); the N ÷ 1 ratio needs two.")
    else:
        verdict = "met" if ratio >= TARGET_RATIO else "missed"
        lines.append(f"Ratio (last runs): {most} workers ÷ 1 = **{ratio}** (target ≥ {TARGET_RATIO}: {verdict}).")
    write_results(args.out, "cluster_throughput", doc, "\n".join(lines))
    return 0 if ratio is None or ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
