"""``r1build audit``: judge every locked winner again on a GPU with this r1build's GPU checks, demote those that now
fail (the lock entry keeps the reason), and end with a table (:mod:`r1build.resolve.audit`).

Exit codes: 0 every audited winner passed; 1 some winner is demoted (by this audit or an earlier one); 2 no GPU
here judges any locked arch (nothing audited, no pass claimed), no lock, or bad input.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..convert import asdict
from ..events import sink
from ..judge import CHECKS_VERSION
from ..lock import lock_path
from .common import add_cache_arg, add_cluster_args, add_manifest_arg, cluster_of, load_from_args, open_cache
from .render import Console, counted

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``audit``."""
    p = sub.add_parser(
        "audit",
        help="judge every locked winner again on a GPU with the current checks; demote those that now fail",
    )
    add_manifest_arg(p)
    add_cache_arg(p, remote=True)
    add_cluster_args(p, "judge the locked winners")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_audit)


def cmd_audit(args: argparse.Namespace, console: Console) -> int:
    from ..resolve.audit import audit
    from ..resolve.judges import Judges

    manifest = load_from_args(args, check_references=False)
    cluster = cluster_of(args, manifest)
    with sink(console.event), open_cache(args, manifest=manifest) as cache:
        judges = Judges(cache, None, cluster, manifest.settings.evaluation.connect_timeout_s)
        try:
            found = audit(manifest, cache, judges)
        finally:
            judges.close()
    code = 1 if found.demoted else 0
    if args.json:
        doc = {
            "manifest": str(manifest.path),
            "checks": CHECKS_VERSION,
            "lock_changed": found.lock_changed,
            "kernels": [asdict(r) for r in found.rows],
        }
        console.json(json.dumps(doc, indent=2))
        return code
    console.table(
        ["kernel", "arch", "winner", "checks", "verdict", "time", "gpu", "reason"],
        [
            [
                r.kernel,
                r.arch,
                r.winner,
                f"v{r.checks or 0} → v{CHECKS_VERSION}" if r.verdict == "passed" else f"v{r.checks or 0}",
                r.verdict,
                f"{r.time_us:.2f} us" if r.time_us is not None else "-",
                r.gpu or "-",
                r.reason,
            ]
            for r in found.rows
        ],
        title=f"r1build audit: {manifest.path} (GPU checks v{CHECKS_VERSION})",
    )
    name = lock_path(manifest).name
    if found.demoted:
        console.print(
            f"{counted(len(found.demoted), 'winner')} demoted in {name}: a --locked build fails on them; "
            "`r1build resolve` on a GPU of their arch decides them again"
        )
    return code
