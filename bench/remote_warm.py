"""Remote cache on runs that need little of it: a warm ``resolve --locked`` of the root manifest with a reachable
empty remote configured vs without one, and a cold ``resolve --offline --no-gpu`` (the gate compiles every locked
winner; no GPU) with a black-holed remote (a socket that accepts and never answers) vs without one.

Runs alternate (paired) in fresh processes, as a user runs them. The reachable remote is nginx with WebDAV on
127.0.0.1 (the remote-cache tests' server); the number of requests it got is counted from its access log.
Acceptance (issue 29): warm ratio <= 1.2; cold with the black hole <= cold without + ``timeout-s``.
Writes ``bench/results/remote_warm.json`` and ``.md``.

    python bench/remote_warm.py [--reps 7] [--cold-reps 3] [--timeout 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import command_line, host_info, utc_now, write_results

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from r1build.trust.signing import KeyPair  # noqa: E402
from tests.cache.remote.remote_servers import Nginx  # noqa: E402  (the remote-cache tests' server)
from tests.cache.remote.remote_support import measured_root, root_project  # noqa: E402


def _run(cli: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cli, env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cli)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return elapsed


def _warm(
    args: argparse.Namespace, work: Path, env: dict[str, str], nginx: Nginx, *, fresh: bool = False
) -> dict[str, Any]:
    """Paired warm ``resolve --locked`` runs with and without the remote; with ``fresh``, every run gets an empty
    user state folder, so no replay record answers (a CI job's first run on a new machine: the full path; an
    edit to the manifest no longer does that, as a comment leaves what r1build reads of it unchanged)."""
    name = "first" if fresh else "warm"
    project = root_project(work / name, KeyPair.generate().public.line)
    cache = work / f"{name}-cache"
    measured_root(project, cache)
    base = [sys.executable, "-m", "r1build.cli.main", "resolve", "--locked", "--no-gpu", "-m", str(project)]
    base += ["--cache-dir", str(cache)]
    with_remote = [*base, "--remote-cache", f"{nginx.url}/bench"]
    times: dict[str, list[float]] = {"without": [], "with": []}
    for cli in (base, with_remote):
        _run(cli, env, project)  # the first run of each records for the warm path
    before = _requests(nginx)
    for i in range(args.reps):
        for key, cli in (("without", base), ("with", with_remote)):
            run_env = env | {"XDG_STATE_HOME": str(work / f"state-{name}-{i}-{key}")} if fresh else env
            times[key].append(_run(cli, run_env, project))
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {
        "times_s": times,
        "median_s": medians,
        "ratio": medians["with"] / medians["without"],
        "requests": _requests(nginx) - before,
    }


def _requests(nginx: Nginx) -> int:
    log = nginx.dir / "access.log"
    return len(log.read_text(encoding="utf-8").splitlines()) if log.exists() else 0


def _cold(args: argparse.Namespace, work: Path, env: dict[str, str]) -> dict[str, Any]:
    project = root_project(work / "cold", KeyPair.generate().public.line)
    toml = project / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8") + f"timeout-s = {args.timeout:g}\n", encoding="utf-8")
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(256)  # accepts (the kernel's backlog) and never answers
    base = [sys.executable, "-m", "r1build.cli.main", "resolve", "--offline", "--no-gpu", "-m", str(project)]
    times: dict[str, list[float]] = {"without": [], "black hole": []}
    try:
        for i in range(args.cold_reps):
            times["without"].append(_run([*base, "--cache-dir", str(work / f"c{i}a")], env, project))
            url = f"http://127.0.0.1:{hole.getsockname()[1]}/bench"
            times["black hole"].append(
                _run([*base, "--cache-dir", str(work / f"c{i}b"), "--remote-cache", url], env, project)
            )
    finally:
        hole.close()
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {"times_s": times, "median_s": medians, "timeout_s": args.timeout}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="paired warm runs")
    parser.add_argument("--cold-reps", type=int, default=3, help="paired cold runs")
    parser.add_argument("--timeout", type=float, default=5.0, help="the remote's timeout-s")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="r1build-remote-warm-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("R1BUILD_", "DEEPSEEK", "OPENAI", "NVIDIA_API"))}
    env["PYTHONPATH"] = str(ROOT)
    env["XDG_STATE_HOME"] = str(work / "state")
    os.environ["PYTHONPATH"] = str(ROOT)
    nginx = Nginx(work / "nginx")
    conf = nginx.dir / "nginx.conf"
    conf.write_text(conf.read_text().replace("access_log off;", f"access_log {nginx.dir}/access.log;"))
    nginx.start()
    try:
        warm = _warm(args, work, env, nginx)
        first = _warm(args, work, env, nginx, fresh=True)
        cold = _cold(args, work, env)
    finally:
        nginx.stop()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "date": utc_now(),
        "command": command_line("bench/remote_warm.py", argv),
        "host": host_info(load_start=load_start, load_end=os.getloadavg()[0]),
        "warm_locked": warm,
        "first_run_locked": first,
        "cold_black_hole": cold,
    }
    write_results(args.out, "remote_warm", result, _markdown(result))
    return 0


def _markdown(r: dict[str, Any]) -> str:
    w, f, c = r["warm_locked"], r["first_run_locked"], r["cold_black_hole"]
    cw, ch = c["median_s"]["without"], c["median_s"]["black hole"]
    return "\n".join(
        [
            "# Remote cache on warm and cold runs (issue 29)",
            "",
            f"{r['date']}, `{r['command']}`; host: {r['host']}",
            "",
            "| run | without a remote | with it | ratio / added | requests | acceptance |",
            "|---|---|---|---|---|---|",
            f"| warm `resolve --locked`, root, reachable empty remote (median of {len(w['times_s']['with'])}) "
            f"| {w['median_s']['without'] * 1000:.0f} ms | {w['median_s']['with'] * 1000:.0f} ms "
            f"| {w['ratio']:.2f}x | {w['requests']} | <= 1.2x |",
            f"| first run on a new machine (an empty state folder: the full path), otherwise as above (median of "
            f"{len(f['times_s']['with'])}) | {f['median_s']['without'] * 1000:.0f} ms | "
            f"{f['median_s']['with'] * 1000:.0f} ms | {f['ratio']:.2f}x | {f['requests']} | <= 1.2x |",
            f"| cold `resolve --offline --no-gpu`, root, black-holed remote, timeout-s {c['timeout_s']:g} "
            f"(median of {len(c['times_s']['without'])}) | {cw:.2f} s | {ch:.2f} s | +{ch - cw:.2f} s | - "
            f"| <= +{c['timeout_s']:g} s |",
            "",
            "Runs alternate with and without, each in a fresh process; the warm runs follow one recording run each "
            "(the warm path's replay record), so both are replays: before the change, the run with the remote "
            "was never recorded and asked it 6 GETs a run. The first-run rows give every run an empty user state "
            "folder, so no record answers and each run takes the full path. 2 cores shared with other work: "
            "medians.",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
