"""``r1build report``: one self-contained HTML page of the manifest's winners and searches."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..events import sink
from ..filemode import replace_problem, write_atomically
from .common import (
    add_cache_arg,
    add_force_arg,
    add_locked_arg,
    add_manifest_arg,
    given_path,
    load_from_args,
    open_cache,
    refuse_foreign_output,
    refuse_overwriting,
    require_current_lock,
)
from .render import Console

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``report``."""
    p = sub.add_parser("report", help="write one self-contained HTML page of the winners and the searches")
    add_manifest_arg(p)
    add_cache_arg(p, remote=True)
    p.add_argument(
        "-o",
        "--output",
        type=given_path,
        default=Path("report.html"),
        metavar="FILE",
        help="where to write the page (default: report.html)",
    )
    add_force_arg(p, "a report page")
    add_locked_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    from ..report import build_report

    manifest = load_from_args(args, check_references=False)
    require_current_lock(args, manifest)
    output: Path = args.output
    if output.is_dir():
        raise UsageError(f"--output {output} is a folder; name the HTML file to write")
    refused = replace_problem(output)
    if refused is not None:
        raise UsageError(f"--output {refused}")
    with sink(console.event), open_cache(args, manifest=manifest) as cache:
        refuse_overwriting("--output", output, manifest, cache)
        refuse_foreign_output("--output", output, "report", force=args.force)
        page = build_report(manifest, cache)
    try:
        write_atomically(output, page)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    if args.json:
        console.json(
            json.dumps(
                {"output": str(output), "bytes": len(page.encode()), "kernels": [s.name for s in manifest.kernels]},
                indent=2,
            )
        )
        return 0
    console.print(f"wrote {output} ({len(page) / 1e6:.1f} MB, {len(manifest.kernels)} kernels)")
    return 0
