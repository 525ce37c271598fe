"""``r1build export-dataset``: the searches as a chat fine-tuning set (JSON lines)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..events import Note, sink
from ..filemode import replace_problem
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
    """Add ``export-dataset``."""
    p = sub.add_parser("export-dataset", help="write every generated candidate as a chat fine-tuning record (JSONL)")
    add_manifest_arg(p)
    add_cache_arg(p, remote=True)
    p.add_argument(
        "-o",
        "--output",
        type=given_path,
        default=Path("r1build-dataset.jsonl"),
        metavar="FILE",
        help="where to write the records (default: r1build-dataset.jsonl)",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--passed-only", action="store_true", help="only candidates that passed their judge")
    which.add_argument("--winners-only", action="store_true", help="only each kernel x arch's winner")
    add_force_arg(p, "a dataset")
    add_locked_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_export_dataset)


def cmd_export_dataset(args: argparse.Namespace, console: Console) -> int:
    from ..report.dataset import DatasetFilter, dataset_records, unjudged_searches, write_dataset

    manifest = load_from_args(args, check_references=False)
    require_current_lock(args, manifest)
    output: Path = args.output
    if output.is_dir():
        raise UsageError(f"--output {output} is a folder; name the JSONL file to write")
    refused = replace_problem(output)
    if refused is not None:
        raise UsageError(f"--output {refused}")
    which: DatasetFilter = "winners" if args.winners_only else "passed" if args.passed_only else "all"
    with sink(console.event), open_cache(args, manifest=manifest) as cache:
        refuse_overwriting("--output", output, manifest, cache)
        refuse_foreign_output("--output", output, "dataset", force=args.force)
        records = dataset_records(manifest, cache, which=which)
        waiting = unjudged_searches(manifest, cache) if not records else []
    try:
        write_dataset(records, output)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    if args.json:
        console.json(json.dumps({"output": str(output), "records": len(records), "filter": which}, indent=2))
        return 0
    console.print(f"wrote {output}: {len(records)} records ({which})")
    if waiting:
        console.event(
            Note(
                "warning",
                f"{'; '.join(waiting)}, not judged by a resolve yet (the dataset holds judged candidates): "
                "run `r1build resolve` first",
            )
        )
    return 0
