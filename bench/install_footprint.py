"""What a host build installs: the size and install time of r1build's own requirements, before and after the
light build (issue 15).

An isolated host build (``pip wheel ./project`` with ``requires = ["r1build", "scikit-build-core"]``) installs
r1build and its requirements into a fresh build environment. This benchmark does the same for each git ref
given: builds an r1build wheel from that ref (``git archive``), then, ``--runs`` times, makes a fresh venv and
times ``pip install <wheel> scikit-build-core`` in it, and measures what that added to site-packages (bytes on
disk of every installed distribution's files, pip and setuptools left out) and which distributions. pip's own
cache is warmed by a first, untimed install, so the times compare installing, not downloading. Writes
``bench/results/install_footprint.json`` and ``.md``.

    python bench/install_footprint.py [--before 3cee6ae] [--after WORKTREE] [--runs 3] [--out bench/results]

``--after WORKTREE`` (the default) builds from the working tree as it is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

_BASE = {"pip", "setuptools", "wheel"}
_MEASURE = """
import importlib.metadata as md, json, os
rows = {}
for d in md.distributions():
    size = 0
    for f in d.files or []:
        try:
            size += os.path.getsize(d.locate_file(f))
        except OSError:
            pass
    rows[d.metadata["Name"]] = [d.version, size]
print(json.dumps(rows))
"""


def _wheel(ref: str, work: Path) -> Path:
    """An r1build wheel built from ``ref`` (``WORKTREE``: the working tree)."""
    source = ROOT
    if ref != "WORKTREE":
        source = work / f"src-{ref}"
        source.mkdir()
        archive = work / f"{ref}.tar"
        subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), ref], check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(source, filter="data")
    out = work / f"wheel-{ref}"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)], check=True)
    (wheel,) = out.glob("r1build-*.whl")
    return wheel


def _install(wheel: Path, venv: Path) -> tuple[float, dict[str, Any]]:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    start = time.perf_counter()
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel), "scikit-build-core"],
        check=True,
        stderr=subprocess.DEVNULL,
    )
    took = time.perf_counter() - start
    out = subprocess.run([str(python), "-c", _MEASURE], check=True, stdout=subprocess.PIPE, text=True).stdout
    return took, json.loads(out)


def measure(ref: str, runs: int, work: Path) -> dict[str, Any]:
    wheel = _wheel(ref, work)
    _install(wheel, work / f"warm-{ref}")  # fills pip's cache: the timed runs install, they do not download
    times: list[float] = []
    dists: dict[str, Any] = {}
    for i in range(runs):
        took, dists = _install(wheel, work / f"venv-{ref}-{i}")
        times.append(took)
    installed = {name: v for name, v in dists.items() if name.lower() not in _BASE}
    return {
        "ref": ref,
        "install_s": times,
        "install_s_median": statistics.median(times),
        "bytes": sum(size for _, size in installed.values()),
        "distributions": {name: {"version": v, "bytes": size} for name, (v, size) in sorted(installed.items())},
    }


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="3cee6ae", help="git ref of the heavy build (default: 3cee6ae)")
    parser.add_argument("--after", default="WORKTREE", help="git ref of the light build (default: the working tree)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="r1build-footprint-") as tmp:
        before = measure(args.before, args.runs, Path(tmp))
        after = measure(args.after, args.runs, Path(tmp))
    doc = {"date": utc_now(), "command": command_line(__file__), "host": host_info(), "before": before, "after": after}
    gone = sorted(set(before["distributions"]) - set(after["distributions"]), key=str.lower)
    md = [
        "# Install footprint of a host build's requirements (r1build + scikit-build-core)",
        "",
        f"- date: {doc['date']}",
        f"- host: {doc['host']['cpu']}, {doc['host']['cpus']} CPUs, {doc['host']['os']}, "
        f"Python {doc['host']['python']}",
        f"- command: `{doc['command']}`",
        "- what: a fresh venv, `pip install <r1build wheel> scikit-build-core` (pip's cache warm, a local package "
        "index), timed; the bytes on disk of every distribution it installed (pip and setuptools left out). "
        f"Median of {args.runs} runs.",
        "",
        "| build | distributions | installed size | install time (median) |",
        "| --- | --- | --- | --- |",
    ]
    for name, r in (("before", before), ("after", after)):
        md.append(
            f"| {name} ({r['ref']}) | {len(r['distributions'])} | {_mb(r['bytes'])} | {r['install_s_median']:.1f} s |"
        )
    md += [
        "",
        f"No longer installed by a host build: {', '.join(gone) or 'nothing'}.",
        "",
        "Largest distributions after:",
        "",
    ]
    biggest = sorted(after["distributions"].items(), key=lambda kv: -kv[1]["bytes"])[:8]
    md += [f"- {name} {d['version']}: {_mb(d['bytes'])}" for name, d in biggest]
    write_results(args.out, "install_footprint", doc, "\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
