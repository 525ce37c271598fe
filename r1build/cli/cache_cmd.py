"""``r1build cache``: ``dir``, ``stats``, ``ls``, ``verify``, ``repair``, ``gc``, ``prune``, ``clean``, ``export``,
``import``, ``push``. Every sub-command that reports takes ``--json``.

``export --signing-key FILE`` (or ``R1BUILD_SIGNING_KEY``) signs the bundle's entries; ``import`` refuses, with a
warning each, entries not signed by a key in the ``[cache] trusted-keys`` of the manifest ``-m`` names, else of the
nearest one from the current folder up (none: nothing to check against).

Every sub-command but ``import`` needs an existing cache: on a path that holds none it says so (exit 2) rather
than create an empty one. Exit codes: 0 ok; 1 when ``verify`` finds a bad entry or a damaged index (also with
``--repair``, which repairs them), or the cache cannot be used; 2 for a bad bundle, a path without a cache, or
bad arguments. ``verify --remote`` checks the remote cache instead (exit 1 when an object fails or the remote
cannot be read); ``push`` publishes the local decisions and gate results to it, signed.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cache import (
    KINDS,
    BundleSummary,
    Cache,
    clean_cache,
    export_bundle,
    import_bundle,
    list_entries,
    prune_cache,
    resolve_cache_dir,
)
from ..convert import asdict
from ..errors import UsageError
from ..events import sink
from ..judge import CHECKS_VERSION
from ..manifest import Manifest, find_manifest, load_manifest, nearest_manifest
from ..trust.signing import TrustedKeys, load_private_key, trusted_keys
from .common import (
    add_cache_arg,
    add_force_arg,
    add_manifest_arg,
    given_path,
    load_from_args,
    open_cache,
    require_current_lock,
)
from .render import Console, counted

if TYPE_CHECKING:
    from ..cache.remote import RemoteLayer

__all__ = ["format_size", "parse_size", "register"]

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_MAX_SIZE = 2**63


def parse_size(text: str) -> int:
    """Bytes from ``2G``, ``500M``, ``1.5GiB``, ``64k`` or a plain byte count (units are powers of 1024)."""
    match = _SIZE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 2G, 500M, 64K or a byte count)")
    number = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not number < _MAX_SIZE:  # SQLite's integers are 64-bit; inf is no size either
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be below 8 EiB")
    value = int(number)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the size must be positive")
    return value


SMALLEST_LIMIT = 64 * 1024
"""The smallest cache size limit ``cache gc --max-size`` takes: below it a limit holds nothing (one gate report or
source can be larger), so every later run would evict what it cached."""


def parse_limit(text: str) -> int:
    """A cache size limit: :func:`parse_size`, at least :data:`SMALLEST_LIMIT` (``--max-size 1`` is a slip for
    ``1G``, not a wish to empty the cache at every run)."""
    value = parse_size(text)
    if value < SMALLEST_LIMIT:
        match = _SIZE.match(text)
        unitless = match is not None and not match.group(2) and not text.strip().lower().endswith("b")
        hint = f" (a number without a unit is bytes: did you mean {text.strip()}G?)" if unitless else ""
        raise argparse.ArgumentTypeError(
            f"{text!r} is {format_size(value)}: a limit below {format_size(SMALLEST_LIMIT)} holds nothing, and every "
            f"later run would evict what it cached{hint}"
        )
    return value


def format_size(n: int) -> str:
    """Bytes for people: ``512 B``, ``4.0 KiB``, ``1.5 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def register(sub: Any) -> None:
    """Add ``cache`` and its sub-commands."""
    cache = sub.add_parser("cache", help="inspect, check, trim, export and import the cache")
    commands = cache.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", parser_class=type(cache))
    commands.required = True

    _register_inspection(commands)
    _register_trimming(commands)
    _register_exchange(commands)


def _register_inspection(commands: Any) -> None:
    """``cache dir``, ``stats``, ``ls``, ``verify`` and ``repair``."""
    p = commands.add_parser(
        "dir", help="print the cache directory (--cache-dir, else $R1BUILD_CACHE_DIR, else the user cache folder)"
    )
    add_cache_arg(p)
    p.set_defaults(func=cmd_dir)

    p = commands.add_parser("stats", help="entries, size and hit/miss statistics")
    add_cache_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_stats)

    p = commands.add_parser("ls", help="list entries (decisions as kernel, arch, winner, created)")
    add_cache_arg(p)
    p.add_argument("--kind", choices=KINDS, help="only entries of this kind")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_ls)

    p = commands.add_parser("verify", help="check the index and every entry's digest; exit 1 if any is bad")
    add_cache_arg(p, remote=True)
    p.add_argument("--repair", action="store_true", help="repair what is bad (as `cache repair` does)")
    p.add_argument(
        "--remote",
        action="store_true",
        help="check the remote cache instead: digests and signatures of what is there (every object "
        "where it can list, else the decisions the lock names and their blobs)",
    )
    add_manifest_arg(p)
    _add_json(p)
    p.set_defaults(func=cmd_verify)

    _simple(commands, "repair", cmd_repair, "delete bad entries; rebuild a damaged index from what still verifies")


def _register_trimming(commands: Any) -> None:
    """``cache gc``, ``prune`` and ``clean``."""
    p = commands.add_parser("gc", help="delete corrupt entries and evict the least recently used")
    add_cache_arg(p)
    p.add_argument(
        "--max-size", type=parse_limit, metavar="SIZE", help="new size limit, kept for later runs (e.g. 2G, 500M)"
    )
    _add_json(p)
    p.set_defaults(func=cmd_gc)

    _simple(
        commands,
        "prune",
        cmd_prune,
        "delete the blobs no decision, gate result or record names (older than an hour), and corrupt entries",
    )
    _simple(commands, "clean", cmd_clean, "delete every entry of the cache")


def _register_exchange(commands: Any) -> None:
    """``cache export``, ``import`` and ``push``."""
    p = commands.add_parser("export", help="write entries into one bundle file")
    add_cache_arg(p)
    p.add_argument("path", type=given_path, metavar="PATH", help="bundle file to write")
    p.add_argument(
        "--kernel",
        action="append",
        metavar="NAME",
        help="only this kernel's decisions and the blobs they name (repeatable)",
    )
    p.add_argument(
        "--signing-key",
        type=given_path,
        metavar="FILE",
        help="sign the entries with this Ed25519 private key (default: $R1BUILD_SIGNING_KEY; unsigned without either)",
    )
    add_force_arg(p, "a bundle")
    _add_json(p)
    p.set_defaults(func=cmd_export)

    p = commands.add_parser("import", help="verify a bundle, then add its entries")
    add_cache_arg(p)
    p.add_argument("path", type=given_path, metavar="PATH", help="bundle file to read")
    p.add_argument(
        "-m",
        "--manifest",
        type=given_path,
        metavar="PATH",
        help="check signatures against this manifest's [cache] trusted-keys (kernels.toml, a "
        "pyproject.toml or a folder with one; default: the nearest in the current folder or a folder above it); "
        "unsigned and untrusted entries are refused",
    )
    _add_json(p)
    p.set_defaults(func=cmd_import)

    p = commands.add_parser(
        "push",
        help="publish the local decisions and gate results (and the blobs they "
        "name) to the remote cache, signed with the team's key",
    )
    add_cache_arg(p, remote=True)
    add_manifest_arg(p)
    _add_json(p)
    p.set_defaults(func=cmd_push, remote_write=True)


def _simple(commands: Any, name: str, func: Any, helptext: str) -> None:
    """A sub-command that takes ``--cache-dir`` and ``--json`` only."""
    p = commands.add_parser(name, help=helptext)
    add_cache_arg(p)
    _add_json(p)
    p.set_defaults(func=func)


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _json(console: Console, doc: Any) -> None:
    console.json(json.dumps(doc, indent=2))


# -- dir / clean / prune ----------------------------------------------------------------------------------------
def cmd_dir(args: argparse.Namespace, console: Console) -> int:
    console.print(str(resolve_cache_dir(getattr(args, "cache_dir", None))))
    return 0


def cmd_clean(args: argparse.Namespace, console: Console) -> int:
    with sink(console.event), open_cache(args, existing=True) as cache:
        cleaned = clean_cache(cache)
    return _maintained(
        args, console, cache, cleaned, f"deleted {cleaned.entries} entries ({format_size(cleaned.bytes)})"
    )


def cmd_prune(args: argparse.Namespace, console: Console) -> int:
    with sink(console.event), open_cache(args, existing=True) as cache:
        pruned = prune_cache(cache)
    return _maintained(
        args,
        console,
        cache,
        pruned,
        f"deleted {pruned.blobs} blobs nothing names ({format_size(pruned.bytes)}) and "
        f"{pruned.corrupt} corrupt entries; {pruned.kept} entries kept",
    )


def _maintained(args: argparse.Namespace, console: Console, cache: Cache, report: Any, text: str) -> int:
    """Report what a maintenance command did: ``report`` (a dataclass) as JSON, else ``text``."""
    if args.json:
        _json(console, {"directory": str(cache.directory), **asdict(report)})
    else:
        console.print(f"{cache.directory}: {text}")
    return 0


# -- stats ----------------------------------------------------------------------------------------------------
def cmd_stats(args: argparse.Namespace, console: Console) -> int:
    with sink(console.event), open_cache(args, existing=True) as cache:
        stats = cache.stats()
    if args.json:
        doc = asdict(stats)
        doc["hit_rate"] = stats.rate(stats.hits, stats.misses)
        doc["lifetime_hit_rate"] = stats.rate(stats.lifetime_hits, stats.lifetime_misses)
        console.json(json.dumps(doc, indent=2))
        return 0
    share = stats.volume / stats.size_limit if stats.size_limit else 0.0
    console.print(f"cache: {stats.directory}")
    console.print(f"size:  {format_size(stats.volume)} of {format_size(stats.size_limit)} ({share:.0%})")
    rows = [
        [
            kind,
            stats.entries[kind],
            format_size(stats.bytes[kind]),
            stats.lifetime_hits[kind],
            stats.lifetime_misses[kind],
            stats.lifetime_corrupt[kind],
        ]
        for kind in KINDS
    ]
    rows.append(
        [
            "total",
            sum(stats.entries.values()),
            format_size(sum(stats.bytes.values())),
            sum(stats.lifetime_hits.values()),
            sum(stats.lifetime_misses.values()),
            sum(stats.lifetime_corrupt.values()),
        ]
    )
    console.table(["kind", "entries", "bytes", "hits", "misses", "corrupt"], rows, title="entries and lifetime reads")
    rate = stats.rate(stats.lifetime_hits, stats.lifetime_misses)
    console.print("hit rate: " + ("no reads yet" if rate is None else f"{rate:.1%}"))
    return 0


# -- ls -------------------------------------------------------------------------------------------------------
def cmd_ls(args: argparse.Namespace, console: Console) -> int:
    with sink(console.event), open_cache(args, existing=True) as cache:
        rows = [listed.to_json() for listed in list_entries(cache, args.kind)]
    if args.json:
        console.json(json.dumps(rows, indent=2))
        return 0
    if not rows:
        console.print("no entries" + (f" of kind {args.kind}" if args.kind else ""))
        return 0
    if args.kind == "decision":
        console.table(
            ["decision", "kernel", "arch", "winner", "measured", "checks", "created"],
            [
                [
                    r["key"].split("/", 1)[1][:12],
                    r.get("kernel", "(corrupt)"),
                    r.get("arch"),
                    _winner(r),
                    "yes" if r.get("measured") else "no",
                    _checks(r),
                    r.get("created"),
                ]
                for r in rows
            ],
        )
    else:
        console.table(
            ["key", "size", "last used", "what"],
            [[_short(r["key"]), format_size(r["size"]), r["used"][:16].replace("T", " "), _what(r)] for r in rows],
        )
    console.print(f"{len(rows)} {'entry' if len(rows) == 1 else 'entries'}")
    return 0


def _short(key: str) -> str:
    kind, _, rest = key.partition("/")
    return f"{kind}/{rest[:12]}" if kind in ("blob", "decision", "gate") and len(rest) == 64 else key


def _winner(row: dict[str, Any]) -> str:
    if row.get("corrupt"):
        return ""
    if row.get("winner") is None:
        return "none"
    return f"{row['provenance']} {str(row['winner'])[:12]}"


def _checks(row: dict[str, Any]) -> str:
    """The version of the GPU checks that judged a measured decision, marked stale when older than these."""
    if not row.get("measured"):
        return "-"
    version = int(row.get("checks") or 0)
    return f"v{version}" + (f" (stale: now v{CHECKS_VERSION})" if version < CHECKS_VERSION else "")


def _what(row: dict[str, Any]) -> str:
    if row["kind"] != "decision":
        return ""
    if row.get("corrupt"):
        return "corrupt"
    return f"{row['kernel']} {row['arch']}: {_winner(row)}"


# -- verify / gc ----------------------------------------------------------------------------------------------
def cmd_verify(args: argparse.Namespace, console: Console) -> int:
    if args.remote:
        if args.repair:
            raise UsageError(
                "--repair works on the local cache; a remote's objects are immutable (the team's "
                "writer replaces a bad decision by publishing it again)"
            )
        return _verify_remote(args, console)
    if args.repair:
        return _repair(args, console, exit_on_damage=1)
    with sink(console.event), open_cache(args, existing=True) as cache:
        damage = cache.integrity()
        if damage is not None:
            if args.json:
                _json(
                    console,
                    {"directory": str(cache.directory), "index_damage": damage, "entries": None, "problems": []},
                )
            console.error(
                f"the cache index {cache.directory / 'cache.db'} is damaged ({damage}); "
                "`r1build cache repair` rebuilds it from what still verifies"
            )
            return 1
        total = len(cache.entries())
        problems = cache.audit()
    if args.json:
        _json(
            console,
            {
                "directory": str(cache.directory),
                "index_damage": None,
                "entries": total,
                "problems": [asdict(p) for p in problems],
            },
        )
        return 1 if problems else 0
    if not problems:
        console.print(f"{total} entries verified in {cache.directory}: all intact")
        return 0
    console.table(["key", "problem"], [[p.key, p.reason] for p in problems], title="entries that fail verification")
    console.print(f"{len(problems)} of {total} entries are bad; `r1build cache repair` deletes them")
    return 1


def _layer(args: argparse.Namespace) -> tuple[Manifest, RemoteLayer]:
    from ..cache.remote import remote_layer

    manifest = load_from_args(args, check_references=False)
    layer = remote_layer(
        manifest, url=args.remote_cache, write=bool(args.remote_write) or None, signing_key=args.signing_key
    )
    if layer is None:
        raise UsageError("no remote cache: give --remote-cache URL, R1BUILD_REMOTE_CACHE or the manifest's [cache] url")
    return manifest, layer


def _verify_remote(args: argparse.Namespace, console: Console) -> int:
    from ..lock import load_lock

    manifest, layer = _layer(args)
    require_current_lock(args, manifest)  # R1BUILD_LOCKED: the keys to check come from a current lock only
    lock = load_lock(manifest)
    keys = sorted({e.key for e in lock.kernel}) if lock is not None else []
    with sink(console.event):
        try:
            checked, problems = layer.audit(keys)
        finally:
            layer.close()
    if args.json:
        _json(
            console,
            {
                "remote": layer.url,
                "checked": checked,
                "problems": [{"key": p.key, "kind": p.kind, "reason": p.reason} for p in problems],
            },
        )
        return 1 if problems else 0
    if not problems and not checked:  # integrity, not completeness: nothing there is no failure, nor a pass
        console.print(
            f"nothing verified on {layer.url}: it holds no object {'the lock names' if keys else 'of this cache'} "
            "(an empty remote, or one nothing was pushed to; `r1build cache push` publishes)"
        )
        return 0
    if not problems:
        console.print(f"{checked} objects verified on {layer.url}: digests and signatures intact")
        return 0
    console.table(
        ["object", "problem"],
        [[p.key, f"{p.kind}: {p.reason}"] for p in problems],
        title=f"objects on {layer.url} that must not be used",
    )
    console.print(f"{len(problems)} bad of {checked} checked; builds skip them (a miss) with a warning")
    return 1


def cmd_push(args: argparse.Namespace, console: Console) -> int:
    _, layer = _layer(args)
    with sink(console.event), open_cache(args, existing=True) as cache:
        try:
            published, present = layer.push(cache)
        finally:
            layer.close()
    if args.json:
        _json(console, {"remote": layer.url, "published": published, "present": present})
        return 0
    console.print(f"{layer.url}: published {published} records (blobs first), {present} already there")
    return 0


def cmd_repair(args: argparse.Namespace, console: Console) -> int:
    return _repair(args, console, exit_on_damage=0)


def _repair(args: argparse.Namespace, console: Console, *, exit_on_damage: int) -> int:
    """Repair and report; ``exit_on_damage``: the exit code when something had to be repaired."""
    from ..cache import repair_cache

    with sink(console.event):
        report = repair_cache(getattr(args, "cache_dir", None))
    damaged = report.rebuilt or bool(report.bad_entries) or bool(report.fixed)
    if getattr(args, "json", False):
        _json(console, asdict(report))
        return exit_on_damage if damaged else 0
    if report.rebuilt:
        kept = ", ".join(counted(n, kind) for kind, n in report.recovered.items() if n)
        console.warning(
            f"the index of {report.directory} was damaged ({report.damage}); moved it aside to "
            f"{report.moved_aside} (delete it when you no longer need it)"
        )
        console.print(
            f"rebuilt the index from what still verifies: kept {kept or 'nothing'}; dropped "
            f"{report.dropped} unreadable or unverifiable; removed {report.removed_files} old value files"
        )
        return exit_on_damage
    if report.bad_entries:
        console.table(
            ["key", "problem"],
            [[p.key, p.reason] for p in report.bad_entries],
            title="entries that failed verification (deleted)",
        )
    console.print(
        f"{report.directory}: index sound; deleted {len(report.bad_entries)} of {report.checked} entries, "
        f"fixed {counted(report.fixed, 'inconsistency', 'inconsistencies')}"
    )
    return exit_on_damage if report.bad_entries or report.fixed else 0


def cmd_gc(args: argparse.Namespace, console: Console) -> int:
    with sink(console.event), open_cache(args, existing=True) as cache:
        report = cache.gc(size_limit=args.max_size)
    if args.json:
        _json(console, {"directory": str(cache.directory), **asdict(report)})
        return 0
    console.print(
        f"deleted {report.corrupt} corrupt, evicted {report.evicted}, fixed "
        f"{counted(report.repaired, 'inconsistency', 'inconsistencies')}; "
        f"{format_size(report.volume_before)} -> {format_size(report.volume)} "
        f"(limit {format_size(report.size_limit)})"
    )
    return 0


# -- export / import ------------------------------------------------------------------------------------------
def _counts(summary: BundleSummary) -> str:
    parts = [counted(n, kind) for kind, n in summary.entries.items() if n]
    return ", ".join(parts) or "nothing"


def _summary_doc(summary: BundleSummary) -> dict[str, Any]:
    return {**asdict(summary), "total": summary.total}


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    with sink(console.event), open_cache(args, existing=True) as cache:
        keys: list[str] | None = None
        if args.kernel:
            decisions = cache.decisions()
            keys = [f"decision/{d.key}" for d in decisions if d.kernel in args.kernel]
            if not keys:
                known = sorted({d.kernel for d in decisions})
                raise UsageError(
                    f"no cached decisions for {', '.join(args.kernel)} (cached kernels: {', '.join(known) or 'none'})"
                )
        summary = export_bundle(
            cache, args.path, keys, signing_key=load_private_key(args.signing_key), force=args.force
        )
    if args.json:
        _json(console, _summary_doc(summary))
        return 0
    console.print(
        f"wrote {summary.total} entries ({_counts(summary)}; {format_size(summary.payload_bytes)}) "
        f"to {summary.path} ({format_size(summary.file_bytes)})"
    )
    if summary.signed_by:
        console.print(f"signed every entry but blobs with key {summary.signed_by}")
    else:
        console.print(
            "unsigned (no --signing-key or R1BUILD_SIGNING_KEY): projects that list trusted keys refuse its entries"
        )
    if summary.missing:
        console.warning(f"{len(summary.missing)} entries absent or corrupt, left out: {', '.join(summary.missing)}")
    return 0


def _import_manifest(given: Path | None) -> Manifest | None:
    """The manifest whose trusted keys an import checks signatures against: ``-m``'s, else the nearest one from
    the current folder up, as every project command finds it (a project that lists trusted keys is never
    imported into unchecked by forgetting ``-m``); None outside any project."""
    path = find_manifest(given) if given is not None else nearest_manifest(Path.cwd())
    return None if path is None else load_manifest(path, check_references=False)


def cmd_import(args: argparse.Namespace, console: Console) -> int:
    manifest = _import_manifest(args.manifest)
    trusted: TrustedKeys | None = trusted_keys(manifest) if manifest is not None else None
    with sink(console.event), Cache(getattr(args, "cache_dir", None)) as cache:
        summary = import_bundle(cache, args.path, trusted=trusted)
    if args.json:
        doc = {**_summary_doc(summary), "signatures_checked": bool(trusted)}
        _json(console, {**doc, "manifest": str(manifest.path) if manifest is not None else None})
        return 0
    console.print(
        f"{summary.path}: {summary.total} entries ({_counts(summary)}) verified; "
        f"added {len(summary.added)}, replaced {len(summary.replaced)}, "
        f"unchanged {len(summary.unchanged)}, kept local {len(summary.kept)}"
    )
    if trusted and manifest is not None:
        signers = ", ".join(sorted(set(summary.verified.values()))) or "none"
        console.print(
            f"signatures: {len(summary.verified)} entries signed by trusted keys ({signers}), "
            f"{len(summary.refused)} refused (trusted-keys of {manifest.path})"
        )
    elif manifest is not None:
        console.print(
            f"signatures not checked: the manifest lists no [cache] trusted-keys ({manifest.path}); projects that "
            "list trusted keys will not use what was imported unchecked"
        )
    else:
        console.print(
            "signatures not checked: no manifest here or above (-m MANIFEST checks them against its [cache] "
            "trusted-keys); projects that list trusted keys will not use what was imported unchecked"
        )
    for key in summary.replaced:
        console.print(f"replaced {key} (the bundle's decision was measured on a GPU)")
    for key in summary.kept:
        console.print(f"kept local {key} (differs from the bundle's)")
    return 0
