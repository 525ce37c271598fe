"""Remote cache: a cold local cache with a warm remote vs a warm local cache (and vs no cache at all).

Machine A holds the measured decisions of a project (rebuilt from its committed lock's validated entries: winner,
time and GPU as measured on the H200) and every winner's static-gate result, and publishes them, signed, to two
real remotes started here on 127.0.0.1: nginx with its WebDAV module (``http://``) and moto's S3 server
(``s3://``). Machine B is a fresh cache directory. Each configuration runs in fresh processes, as a user or CI
runs it:

* ``resolve --locked`` of the root manifest (``r1build resolve --locked --no-gpu``);
* ``prepare_build`` of sample_project (resolve + emit, what its locked build does before CMake), in a fresh process
  with the build stamp removed;
* a whole locked build of sample_project (the backend's ``build_wheel`` hook in a fresh process, a fresh build
  directory: CMake and nvcc included), fewer repetitions.

Configurations: warm local cache; cold local cache + warm http remote; cold local cache + warm s3 remote; cold
local cache and no remote (every winner gated again by nvcc). Writes ``bench/results/remote_cache.json`` and
``.md``.

    python bench/remote_cache.py [--reps 7] [--build-reps 1] [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
import shutil
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
from tests.cache.remote.remote_servers import Moto, Nginx  # noqa: E402  (the remote-cache tests' servers)
from tests.cache.remote.remote_support import measured_root, root_project, trust  # noqa: E402  (and machine A)

PREPARE = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "t0 = time.perf_counter()\n"
    "from r1build.resolve import prepare_build\n"
    "prepare_build(Path(sys.argv[1]), locked=True, out_dir=Path(sys.argv[2]))\n"
    "print(f'prepare_build_s={time.perf_counter() - t0:.6f}')\n"
)
BUILD = "import sys, r1build.build as b; print(b.build_wheel(sys.argv[1], {'build-dir': sys.argv[2]}))"
BOTO3 = (
    "import time; t0 = time.perf_counter(); import boto3; boto3.session.Session().client('s3'); "
    "print(f'{time.perf_counter() - t0:.6f}')"
)
CONFIGS = ("warm local", "cold local + http remote", "cold local + s3 remote", "cold local, no remote")


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    return elapsed, proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="runs of resolve / prepare_build per configuration")
    parser.add_argument("--build-reps", type=int, default=1, help="whole builds per configuration")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="r1build-remote-bench-"))
    nginx = Nginx(work / "nginx").start()
    moto = Moto().start()
    try:
        return _bench(args, argv, work, nginx, moto, load_start)
    finally:
        nginx.stop()
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)


def _bench(
    args: argparse.Namespace, argv: list[str] | None, work: Path, nginx: Nginx, moto: Moto, load_start: float
) -> int:
    import boto3

    key = KeyPair.generate()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("R1BUILD_", "DEEPSEEK", "OPENAI", "NVIDIA_API"))}
    base["PYTHONPATH"] = str(ROOT)
    s3_env = base | moto.env()
    boto3.client(
        "s3",
        endpoint_url=moto.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket="bench")
    remotes = {"http": (f"{nginx.url}/bench", base), "s3": ("s3://bench/cache", s3_env)}

    root = root_project(work / "root", key.public.line)
    sample = work / "sample_project"
    shutil.copytree(
        ROOT / "sample_project",
        sample,
        ignore=shutil.ignore_patterns(".r1build", "build", "dist", "__pycache__", "tests"),
    )
    trust(sample, key.public.line)
    warm = {"root": work / "a-root", "sample": work / "a-sample"}
    os.environ.update({"PYTHONPATH": str(ROOT)})
    decisions = {"root": len(measured_root(root, warm["root"])), "sample": len(measured_root(sample, warm["sample"]))}
    cli = [sys.executable, "-m", "r1build.cli.main"]
    for name, project in (("root", root), ("sample", sample)):
        for url, env in remotes.values():
            run(
                [*cli, "cache", "push", "-m", str(project), "--cache-dir", str(warm[name]), "--remote-cache", url],
                env | {"R1BUILD_SIGNING_KEY": key.private.raw_base64()},
                ROOT,
            )

    counter = iter(range(10**6))

    def env_for(config: str, name: str) -> dict[str, str]:
        if config == "warm local":
            return base | {"R1BUILD_CACHE_DIR": str(warm[name])}
        fresh = {"R1BUILD_CACHE_DIR": str(work / f"b{next(counter)}")}
        if config == "cold local, no remote":
            return base | fresh
        url, env = remotes["http" if "http" in config else "s3"]
        return env | fresh | {"R1BUILD_REMOTE_CACHE": url}

    series: dict[str, dict[str, list[float]]] = {
        "resolve_locked_root": {},
        "prepare_build_sample": {},
        "locked_build_sample": {},
    }
    notes: dict[str, str] = {}
    for config in CONFIGS:
        reps = args.reps if config != "cold local, no remote" else max(1, min(args.reps, 3))
        for _ in range(reps):
            t, out = run([*cli, "resolve", "--locked", "--no-gpu", "-m", str(root)], env_for(config, "root"), ROOT)
            series["resolve_locked_root"].setdefault(config, []).append(t)
            notes.setdefault(f"root: {config}", next((ln for ln in out.splitlines() if "remote cache" in ln), ""))
            stamp = sample / ".r1build" / "build-stamp.json"
            stamp.unlink(missing_ok=True)
            t, out = run(
                [sys.executable, "-c", PREPARE, str(sample), str(work / "generated")], env_for(config, "sample"), sample
            )
            series["prepare_build_sample"].setdefault(config, []).append(float(out.strip().rpartition("=")[2]))
        for _ in range(args.build_reps):
            if "s3" in config:
                continue  # the whole build adds nvcc and CMake, the same for both remotes: http stands for both
            build_dir = work / f"build{next(counter)}"
            (sample / ".r1build" / "build-stamp.json").unlink(missing_ok=True)
            t, _ = run(
                [sys.executable, "-c", BUILD, str(work / "wheels"), str(build_dir)],
                env_for(config, "sample") | {"R1BUILD_LOCKED": "1"},
                sample,
            )
            series["locked_build_sample"].setdefault(config, []).append(t)
            shutil.rmtree(build_dir, ignore_errors=True)
        print(f"{config}: done", file=sys.stderr)

    boto3_s = [run([sys.executable, "-c", BOTO3], s3_env, ROOT)[1] for _ in range(3)]
    medians = {what: {c: round(statistics.median(v), 4) for c, v in by.items()} for what, by in series.items()}
    result = {
        "benchmark": "remote_cache",
        "date": utc_now(),
        "command": command_line(__file__, argv),
        "host": host_info(
            device="none: no GPU is used (decisions come from the lock's H200 measurements)",
            nginx=nginx_version(nginx),
            moto=_version("moto"),
            boto3=_version("boto3"),
        ),
        "load_average_1min": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
        "decisions": decisions,
        "reps": args.reps,
        "build_reps": args.build_reps,
        "series_s": {w: {c: [round(t, 4) for t in v] for c, v in by.items()} for w, by in series.items()},
        "median_s": medians,
        "remote_notes": notes,
        "boto3_import_and_client_s": round(statistics.median(float(t.strip()) for t in boto3_s), 4),
    }
    write_results(args.out, "remote_cache", result, render_markdown(result))
    return 0


def _version(module: str) -> str:
    from importlib.metadata import version

    return version(module)


def nginx_version(nginx: Nginx) -> str:
    proc = subprocess.run([nginx.binary, "-v"], capture_output=True, text=True, check=False)
    return (proc.stderr or proc.stdout).strip().rpartition(":")[2].strip()


def _build_cell(config: str, build: float | None) -> str:
    if build is not None:
        return f"{build:.1f}"
    return "(not run: the same CMake and nvcc work as http)" if "s3" in config else "(not run)"


def render_markdown(r: dict[str, Any]) -> str:
    host = r["host"]
    m = r["median_s"]
    lines = [
        "# Remote cache: cold local cache + warm remote vs warm local cache",
        "",
        f"- date: {r['date']}",
        f"- command: `{r['command']}`",
        f"- host: {host['cpu']}, {host['cpus']} CPUs, {host['os']}, Python {host['python']}; {host['device']}; "
        f"1-minute load average {r['load_average_1min']['start']} at the start, {r['load_average_1min']['end']} at "
        "the end (a shared machine)",
        f"- remotes on 127.0.0.1: nginx {host['nginx']} (WebDAV PUT), moto {host['moto']} S3 server through boto3 "
        f"{host['boto3']}",
        f"- machine A: {r['decisions']['root']} measured decisions of the root manifest and "
        f"{r['decisions']['sample']} of sample_project (from their locks' validated entries), every winner's gate "
        "result, pushed signed to each remote; machine B: an empty cache directory per run",
        f"- every run a fresh process; {r['reps']} runs of resolve / prepare_build per configuration (3 without a "
        f"remote), {r['build_reps']} whole build(s)",
        "",
        "| configuration | `resolve --locked`, root (s) | `prepare_build`, sample_project (s) | whole locked build, "
        "sample_project (s) |",
        "|---|---|---|---|",
    ]
    for config in CONFIGS:
        build = m["locked_build_sample"].get(config)
        lines.append(
            f"| {config} | {m['resolve_locked_root'][config]:.3f} | {m['prepare_build_sample'][config]:.3f} | "
            f"{_build_cell(config, build)} |"
        )
    warm_root = m["resolve_locked_root"]["warm local"]
    http_root = m["resolve_locked_root"]["cold local + http remote"]
    none_root = m["resolve_locked_root"]["cold local, no remote"]
    lines += [
        "",
        f"The remote adds {http_root - warm_root:+.3f} s (http) and "
        f"{m['resolve_locked_root']['cold local + s3 remote'] - warm_root:+.3f} s (s3) to a root `resolve --locked` "
        f"over a warm local cache, and saves {none_root - http_root:.3f} s over no cache at all (the static gate's "
        "nvcc runs). Medians; the runs are in the JSON file. Of the s3 remote's extra, importing boto3 and making "
        f"its client takes {r['boto3_import_and_client_s']:.3f} s in a fresh process (median of 3); the rest is "
        "one request per object, as with http.",
        "",
        "What the remote gave (one line per configuration, from the first run):",
        "",
        *[f"- {k}: `{v}`" for k, v in r["remote_notes"].items() if v],
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
