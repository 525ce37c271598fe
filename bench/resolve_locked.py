"""``r1build resolve --locked`` on a warm cache for the root manifest: target at most 300 ms.

Copies the root manifest to a temp folder, resolves once (offline, no GPU: fills the cache and writes the lock),
then times the command ``r1build resolve --locked --no-gpu`` as a user runs it (a fresh process each time,
Python start-up and imports included) and, separately, the resolve call inside one process. Byte-compiled
modules are written first, as an installed package would have them. Writes ``bench/results/resolve_locked.json``
and ``.md``; exits 1 when the command's median misses the target.

    python bench/resolve_locked.py [--runs 15] [--out bench/results]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

from r1build.cache import Cache  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.resolve import ResolveOptions, resolve  # noqa: E402

TARGET_MS = 300.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "r1build"), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(ROOT / "kernels.toml", work / "kernels.toml")
        shutil.copytree(ROOT / "kernels", work / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
        env["R1BUILD_CACHE_DIR"] = str(work / "cache")
        for var in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_BASE_URL"):
            env.pop(var, None)
        cmd = [sys.executable, "-m", "r1build.cli.main", "resolve", "--locked", "--no-gpu", "-m", str(work)]
        t0 = time.perf_counter()
        subprocess.run([*cmd[:4], "--offline", "--no-gpu", "-m", str(work)], env=env, check=True,
                       capture_output=True)
        cold_s = time.perf_counter() - t0
        subprocess.run(cmd, env=env, check=True, capture_output=True)  # warm-up
        wall = []
        for _ in range(args.runs):
            t = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            wall.append((time.perf_counter() - t) * 1000)
        manifest = load_manifest(work / "kernels.toml", check_references=False)
        inproc = []
        os.environ["R1BUILD_CACHE_DIR"] = str(work / "cache")
        for _ in range(args.runs):
            t = time.perf_counter()
            with Cache(work / "cache") as cache:
                res = resolve(manifest, cache, ResolveOptions(locked=True, use_gpu=False, write_lock=False))
            inproc.append((time.perf_counter() - t) * 1000)
        entries = len(res.entries)
    median = statistics.median(wall)
    result = {
        "benchmark": "resolve_locked",
        "date": utc_now(),
        "host": host_info(),
        "command": command_line(__file__),
        "manifest": "kernels.toml (root)",
        "kernel_archs": entries,
        "cold_resolve_s": round(cold_s, 2),
        "command_ms": {"median": round(median, 1), "min": round(min(wall), 1), "max": round(max(wall), 1),
                       "runs": len(wall)},
        "in_process_ms": {"median": round(statistics.median(inproc), 2), "min": round(min(inproc), 2)},
        "target_ms": TARGET_MS,
        "ok": median <= TARGET_MS,
    }
    md = [
        "# `r1build resolve --locked`, warm cache, root manifest",
        "",
        f"- date: {result['date']}; host: {result['host']['cpu']}, {result['host']['cpus']} cores, "
        f"Python {result['host']['python']}",
        f"- command: `{result['command']}`",
        f"- {entries} kernel × arch entries; the cold offline resolve that filled the cache took {cold_s:.1f} s",
        "",
        "| measure | median | min | max |",
        "| --- | ---: | ---: | ---: |",
        f"| `r1build resolve --locked` (fresh process) | {median:.0f} ms | {min(wall):.0f} ms | {max(wall):.0f} ms |",
        f"| `resolve()` in one process | {statistics.median(inproc):.1f} ms | {min(inproc):.1f} ms | |",
        "",
        f"Target: at most {TARGET_MS:.0f} ms for the command: {'met' if result['ok'] else 'MISSED'}.",
    ]
    write_results(args.out, "resolve_locked", result, "\n".join(md))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
