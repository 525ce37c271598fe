"""``r1build doctor``: nvcc, archs, GPUs, cupy, the endpoint, the cache and the project in one report.

Exit codes: 0 when nothing is an error (warnings and notes included), 1 when something a command needs is broken
(no nvcc, a damaged cache index, a manifest or lock that does not load).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..convert import asdict
from ..events import sink
from ..report.doctor import diagnose
from .common import add_cache_arg, add_manifest_arg
from .render import Console

__all__ = ["register"]

_STYLE = {"ok": "ok", "note": "note", "warning": "WARNING", "error": "ERROR"}


def register(sub: Any) -> None:
    """Add ``doctor``."""
    p = sub.add_parser(
        "doctor",
        help="what this machine offers r1build: nvcc, archs, GPUs, cupy, the LLM endpoint, "
        "the cache and the project, in one report",
    )
    add_manifest_arg(p)
    add_cache_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace, console: Console) -> int:
    with sink(console.event):
        findings = diagnose(manifest_path=args.manifest, cache_dir=args.cache_dir)
    failed = any(f.level == "error" for f in findings)
    if args.json:
        console.json(json.dumps({"ok": not failed, "findings": [asdict(f) for f in findings]}, indent=2))
    else:
        console.table(
            ["what", "", "found"], [[f.name, _STYLE[f.level], f.detail] for f in findings], title="r1build doctor"
        )
    return 1 if failed else 0
