"""Where the first run's time goes: the full path of ``r1build resolve --locked`` (no record: a CI job's fresh
machine) beside the imports it cannot do without, each in fresh processes, paired with ``python -c pass``.

Rows (min wall over ``--runs`` fresh processes, each after a ``python -c pass`` whose min is the unit):

- ``python -c pass``;
- the standard library the full path imports whatever r1build does (argparse, hashlib, json, logging, pathlib,
  sqlite3, tomllib, typing): the floor of any CLI that parses its arguments, reads TOML and a SQLite index and logs;
- ``import r1build.manifest`` (the manifest model and loader), ``import r1build.lock`` (plus the lock and the
  records), ``import r1build.cli.project`` (every module the full path imports);
- the full path itself (the ``r1build`` console script where installed), on the root manifest and a warm cache,
  each run with an empty user state folder;
- and in one process, the time spent declaring r1build's records while the full path's modules are imported
  (:func:`r1build.convert.record`; counted by wrapping its declaration before the import).

Writes ``bench/results/first_run_floor.json`` / ``.md``.

    python bench/first_run_floor.py [--runs 15] [--out bench/results]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, r1build_cli, utc_now, write_results  # noqa: E402

STDLIB = "import argparse, hashlib, json, logging, pathlib, sqlite3, tomllib, typing"
RECORD_COST = """
import json, sys, time
from r1build import convert
made, spent = [], [0.0]
plain = convert._declare
def timed(cls, *args):
    t = time.perf_counter(); out = plain(cls, *args); spent[0] += time.perf_counter() - t
    made.append(cls.__module__ + "." + cls.__qualname__); return out
convert._declare = timed
t = time.perf_counter()
import r1build.cli.project
total = time.perf_counter() - t
print(json.dumps({"classes": len([m for m in made if m.startswith("r1build")]), "record_ms": spent[0] * 1000,
                  "import_ms": total * 1000}))
"""


def _min_ms(cmd: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    """Least wall time of ``cmd`` and of a ``python -c pass`` run just before each run of it (ms)."""
    best = unit = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        unit = min(unit, (time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        best = min(best, (time.perf_counter() - t) * 1000)
    return round(best, 1), round(unit, 1)


def _project(work: Path, env: dict[str, str]) -> Path:
    """The root manifest, locked offline on an empty cache (every baseline through the static gate)."""
    project = work / "project"
    project.mkdir()
    shutil.copy(ROOT / "kernels.toml", project / "kernels.toml")
    shutil.copytree(ROOT / "kernels", project / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
    lock = [sys.executable, "-m", "r1build.cli.main", "lock", "--offline", "--no-gpu", "-m", str(project)]
    subprocess.run(lock, env=env, check=True, capture_output=True)
    return project


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "r1build"), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": str(ROOT)}
    rows: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env["R1BUILD_CACHE_DIR"] = str(work / "cache")
        env["XDG_STATE_HOME"] = str(work / "state")
        project = _project(work, env)
        py = [sys.executable, "-c"]
        rows["the standard library the full path needs"] = _min_ms([*py, STDLIB], env, args.runs)
        rows["import r1build.manifest"] = _min_ms([*py, "import r1build.manifest"], env, args.runs)
        rows["import r1build.lock"] = _min_ms([*py, "import r1build.lock"], env, args.runs)
        rows["import r1build.cli.project (every module of the full path)"] = _min_ms(
            [*py, "import r1build.cli.project"], env, args.runs
        )
        full = [*r1build_cli(), "resolve", "--locked", "--no-gpu", "-m", str(project)]
        best = unit = float("inf")
        for i in range(args.runs):  # each on a new machine: an empty state folder, no record
            b, u = _min_ms(full, env | {"XDG_STATE_HOME": str(work / f"state-{i}")}, 1)
            best, unit = min(best, b), min(unit, u)
        rows["`r1build resolve --locked`, the full path (no record)"] = (best, unit)
        cost = subprocess.run([*py, RECORD_COST], env=env, check=True, capture_output=True, text=True)
    records_made: dict[str, Any] = json.loads(cost.stdout)
    result = {
        "benchmark": "first_run_floor",
        "date": utc_now(),
        "host": host_info(),
        "command": command_line(__file__),
        "rows": {k: {"min_ms": b, "python_pass_min_ms": u, "ratio": round(b / u, 1)} for k, (b, u) in rows.items()},
        "records": {k: round(v, 1) if isinstance(v, float) else v for k, v in records_made.items()},
    }
    write_results(args.out, "first_run_floor", result, _markdown(result))
    return 0


def _markdown(r: dict[str, Any]) -> str:
    host, dc = r["host"], r["records"]
    lines = [
        "# Where the first run's time goes: the full path of `resolve --locked` beside what it imports",
        "",
        f"- date: {r['date']}; host: {host['cpu']}, {host['cpus']} cores, Python {host['python']}",
        f"- command: `{r['command']}`",
        "",
        "| what runs (a fresh process each time) | min | paired `python -c pass` min | ratio |",
        "| --- | ---: | ---: | ---: |",
        *[
            f"| {label} | {v['min_ms']:.1f} ms | {v['python_pass_min_ms']:.1f} ms | {v['ratio']}x |"
            for label, v in r["rows"].items()
        ],
        "",
        f"Importing every module of the full path declares {dc['classes']} of r1build's records "
        f"(`convert.record`), {dc['record_ms']:.1f} ms of the {dc['import_ms']:.1f} ms the import takes in one "
        "process.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
