"""What every benchmark in ``bench/`` records beside its numbers: when, on what host, by which command; and how it
writes them (``<name>.json`` and ``<name>.md`` in the results folder, the Markdown also on stdout)."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def utc_now() -> str:
    """The current time, UTC, to the second (ISO 8601)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def command_line(script: str, argv: Sequence[str] | None = None) -> str:
    """How the benchmark was run, as a user would type it from the repository root (``argv``: its arguments,
    ``sys.argv[1:]`` when None)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return "python " + shlex.join([f"bench/{Path(script).name}", *args])


def cpu_name() -> str:
    """The CPU's model name (from ``/proc/cpuinfo`` where there is one)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def host_info(**extra: Any) -> dict[str, Any]:
    """CPU, CPU count, OS and Python, then ``extra`` (library and tool versions, the device)."""
    return {
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        **extra,
    }


def write_results(out: Path, name: str, doc: Mapping[str, Any], markdown: str) -> None:
    """``doc`` to ``out/<name>.json`` and ``markdown`` to ``out/<name>.md``; the Markdown also to stdout."""
    if not markdown.endswith("\n"):
        markdown += "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text(markdown, encoding="utf-8")
    sys.stdout.write(markdown)


def r1build_cli() -> list[str]:
    """The command a user runs: the ``r1build`` console script beside this Python where it is installed (the
    timings are of what a user's shell starts), else ``python -m r1build.cli.main``."""
    script = Path(sys.executable).with_name("r1build")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "r1build.cli.main"]
