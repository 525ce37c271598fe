"""Project commands: ``check``, ``status``, ``resolve``, ``lock``, ``vendor``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ..convert import asdict, replace
from ..errors import UsageError
from ..events import sink
from ..lock import check_lock, load_lock, lock_path, vendor_winners
from ..manifest import Manifest
from ..resolve import Resolution, ResolveOptions, emit_resolution, resolve
from ..resolve.model import kib
from ..settings import env_settings, lock_mode
from .common import (
    add_cache_arg,
    add_cluster_args,
    add_locked_arg,
    add_manifest_arg,
    cluster_of,
    given_path,
    load_from_args,
    open_cache,
    parse_archs,
    require_current_lock,
)
from .render import Console, counted, render_unresolved

if TYPE_CHECKING:
    from ..report.overview import StatusRow

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add the project commands."""
    _register_check(sub)
    _register_status(sub)
    for name, helptext in (
        ("resolve", "resolve every kernel × arch to a winner and update the lock"),
        ("lock", "write kernels.lock for the current manifest"),
    ):
        _register_resolving(sub, name, helptext)
    _register_vendor(sub)


def _register_check(sub: Any) -> None:
    p = sub.add_parser("check", help="validate the manifest (and with --locked, everything a locked build relies on)")
    add_manifest_arg(p)
    add_cache_arg(p, remote=True)
    p.add_argument(
        "--locked",
        action="store_true",
        help="also verify the lock as a locked build does: current, every field, every winner's source "
        "found and matching its digest, no winner the cache records as rejected, and the static gate "
        "(also R1BUILD_LOCKED=1)",
    )
    p.add_argument(
        "--frozen",
        action="store_true",
        help="verify the lock's entries as a frozen build uses them, as they are, without requiring the lock "
        "to be current (also R1BUILD_FROZEN=1)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_check)


def _register_status(sub: Any) -> None:
    p = sub.add_parser("status", help="kernel × arch → state, provenance, time, digest")
    add_manifest_arg(p)
    add_cache_arg(p, remote=True)
    add_locked_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)


def _register_resolving(sub: Any, name: str, helptext: str) -> None:
    """``resolve`` or ``lock``: the same options, but ``resolve``'s ``--frozen``, ``--out`` and ``--force`` and
    ``lock``'s ``--check``."""
    p = sub.add_parser(name, help=helptext)
    add_manifest_arg(p)
    add_cache_arg(p, remote=True)
    p.add_argument(
        "--offline",
        dest="generate",
        action="store_const",
        const=False,
        help="never call an LLM (also R1BUILD_OFFLINE=1)",
    )
    p.add_argument(
        "--locked", action="store_true", help="fail unless the lock is present and current (also R1BUILD_LOCKED=1)"
    )
    if name == "resolve":
        p.add_argument(
            "--frozen",
            action="store_true",
            help="use the lock as it is, stale entries included (each still verified); write nothing to it "
            "(also R1BUILD_FROZEN=1)",
        )
    p.add_argument("--refresh", action="store_true", help="ignore cached decisions and judge again")
    p.add_argument("--arch", action="append", metavar="ARCH", help="only these archs (repeat or comma-separate)")
    p.add_argument("--kernel", action="append", metavar="NAME", help="only these kernels")
    p.add_argument("--no-gpu", dest="evaluate", action="store_const", const=False, help="do not measure on local GPUs")
    add_cluster_args(p, "measure on the GPU workers and compile on the compile slots")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    if name == "resolve":
        p.add_argument("--out", type=given_path, metavar="DIR", help="also write the generated .cu, header and CMake")
        p.add_argument("--force", action="store_true", help="replace files in --out DIR that r1build did not generate")
    else:
        p.add_argument("--check", action="store_true", help="exit 1 if the lock is not current; write nothing")
    p.set_defaults(func=cmd_resolve if name == "resolve" else cmd_lock)


def _register_vendor(sub: Any) -> None:
    p = sub.add_parser("vendor", help="write the locked winners' sources into the repository")
    add_manifest_arg(p)
    add_cache_arg(p, remote=True)
    p.add_argument(
        "--frozen",
        action="store_true",
        help="vendor what the lock names as it is, even where it is stale (also R1BUILD_FROZEN=1)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_vendor)


def _check_locked(
    args: argparse.Namespace, console: Console, manifest: Manifest, doc: dict[str, Any], *, frozen: bool
) -> int:
    """``check --locked`` (``--frozen``): exactly what ``resolve --locked`` (``--frozen``) and a locked (frozen)
    build do, short of writing the generated files."""
    name = lock_path(manifest).name
    with sink(console.event), open_cache(args, manifest=manifest) as cache:
        resolution = resolve(
            manifest,
            cache,
            ResolveOptions(locked=not frozen, frozen=frozen, generate=False, evaluate=False, write_lock=False),
        )
    where = sorted({r.state for r in resolution.entries})
    if args.json:
        lock_doc: dict[str, Any] = {
            "current": None if frozen else True,
            "verified": True,
            "frozen": frozen,
            "stale": [],
        }
        console.json(json.dumps({**doc, "lock": lock_doc}, indent=2))
    elif frozen:
        console.print(
            f"{name}: used as it is (--frozen: not required to be current); its "
            f"{counted(len(resolution.entries), 'winner')} verified (sources: {', '.join(where)})"
        )
    else:
        console.print(
            f"{name}: current and verified ({counted(len(resolution.entries), 'winner')}; sources: {', '.join(where)})"
        )
    return 0


def cmd_check(args: argparse.Namespace, console: Console) -> int:
    from ..toolchain.extras import CHECK

    CHECK.require()  # the references are numpy code, run here on the CPU
    from ..evaluate.correctness.references import check_references, library_problems, torch_problems

    manifest = load_from_args(args)
    locked, frozen = _lock_mode(args)  # contradictory flags are said before any reference runs
    with sink(console.event):
        calls = check_references(manifest)
        torch_problems(manifest)
        on_cupy = library_problems(manifest)
        _check_archs(manifest)
    archs = sorted({a for s in manifest.kernels for a in manifest.archs_of(s)})
    names = [s.name for s in manifest.kernels]
    doc: dict[str, Any] = {
        "manifest": str(manifest.path),
        "kernels": names,
        "archs": archs,
        "reference_calls": calls,
        "references_not_for_cupy": on_cupy,
    }
    if not args.json:
        console.print(
            f"{manifest.path}: ok, {counted(len(names), 'kernel')} ({', '.join(names)}) for {', '.join(archs)}; "
            "every "
            f"reference checked on the CPU at every test shape ({calls} calls)"
        )
    if locked or frozen:
        return _check_locked(args, console, manifest, doc, frozen=frozen)
    name = lock_path(manifest).name
    staleness = check_lock(manifest, load_lock(manifest))
    if args.json:
        stale = [{"kernel": k, "arch": a, "reason": why} for k, a, why in staleness.problems]
        lock_doc = {"current": not staleness, "verified": False, "frozen": False, "stale": stale}
        console.json(json.dumps({**doc, "lock": lock_doc}, indent=2))
    elif staleness:
        console.warning(f"{name} is not current:\n{staleness.render()}")
    else:
        console.print(f"{name}: current")
    return 0


def _check_archs(manifest: Manifest) -> None:
    """Every target arch is one the nvcc in use compiles for (as resolve and builds require), where an nvcc is
    found; without one, a note that they were not checked. An R1BUILD_NVCC / CUDACXX naming no nvcc is an error."""
    from ..errors import NvccSettingError, ToolchainError
    from ..events import Note, emit
    from ..toolchain.archs import require_supported_archs
    from ..toolchain.nvcc import toolchain

    try:
        tc = toolchain()
    except NvccSettingError:
        raise
    except ToolchainError as exc:
        emit(Note("info", f"archs not checked against nvcc ({exc})"))
        return
    require_supported_archs(manifest, tc)


def _status_rows(manifest: Manifest, args: argparse.Namespace) -> list[StatusRow]:
    from ..report.overview import project_records  # here: the report's modules stay out of the other commands

    with open_cache(args, manifest=manifest) as cache:
        return [r.status for r in project_records(manifest, cache)]


def _fmt_time(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t / 1000:.3f} ms" if t >= 1000 else f"{t:.1f} µs"


def _fmt_ratio(x: float | None, percent: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 100:.0f}%" if percent else f"{x:.2f}x"


def cmd_status(args: argparse.Namespace, console: Console) -> int:
    manifest = load_from_args(args, check_references=False)
    require_current_lock(args, manifest)
    with sink(console.event):
        rows = _status_rows(manifest, args)
    if args.json:
        console.json(json.dumps({"manifest": str(manifest.path), "kernels": [r.as_json() for r in rows]}, indent=2))
        return 0
    console.table(
        [
            "kernel",
            "arch",
            "state",
            "provenance",
            "validation",
            "time",
            "vs library",
            "floor",
            "gpu",
            "winner",
            "source",
            "note",
        ],
        [
            [
                r.kernel,
                r.arch,
                r.state,
                r.provenance or "-",
                r.validation or "-",
                _fmt_time(r.facts.time_us),
                _fmt_ratio(r.facts.speedup_vs_library),
                _fmt_ratio(r.facts.share_of_floor, percent=True),
                r.facts.gpu or "-",
                r.winner or "-",
                r.source or "-",
                r.note,
            ]
            for r in rows
        ],
        title=f"r1build status: {manifest.path}",
    )
    sizes: dict[str, int] = {}
    for r in rows:
        if r.device_bytes is not None:
            sizes[r.arch] = sizes.get(r.arch, 0) + r.device_bytes
    _render_sizes(console, sizes)
    return 0


def _render_sizes(console: Console, sizes: dict[str, int]) -> None:
    """The line of the device code each arch adds (:meth:`~r1build.resolve.Resolution.device_bytes`; for
    ``status``, of the winners whose cached verdict says it)."""
    if sizes:
        shares = ", ".join(f"{arch} {kib(n)}" for arch, n in sizes.items())
        console.print(f"device code per arch: {shares} ({kib(sum(sizes.values()))} in all)")


def _render_resolution(
    resolution: Resolution, console: Console, as_json: bool, extra: dict[str, Any] | None = None
) -> None:
    """The resolution's table (or, with ``as_json``, one JSON document holding ``extra`` too) on stdout."""
    rows: list[dict[str, Any]] = [
        {
            "kernel": r.spec.name,
            "arch": r.arch,
            "state": r.state,
            "provenance": r.provenance,
            "validation": r.validation,
            "time_us": r.facts.time_us,
            "speedup_vs_library": r.facts.speedup_vs_library,
            "share_of_floor": r.facts.share_of_floor,
            "library_note": r.facts.library_note,
            "gpu": r.facts.gpu,
            "winner": r.candidate.digest[:12],
            "registers": r.gate.gate.registers if r.gate and r.gate.gate else None,
            "device_bytes": r.gate.gate.device_bytes if r.gate and r.gate.gate else None,
        }
        for r in resolution.entries
    ]
    sizes = resolution.device_bytes()
    if as_json:
        console.json(
            json.dumps(
                {
                    "kernels": rows,
                    "device_bytes": sizes,
                    "unresolved": [asdict(u) for u in resolution.unresolved],
                    "lock_changed": resolution.lock_changed,
                    **(extra or {}),
                },
                indent=2,
            )
        )
        return
    if rows:
        console.table(
            ["kernel", "arch", "state", "provenance", "validation", "time", "vs library", "gpu", "winner", "regs"],
            [
                [
                    x["kernel"],
                    x["arch"],
                    x["state"],
                    x["provenance"],
                    x["validation"],
                    _fmt_time(x["time_us"]),
                    _fmt_ratio(x["speedup_vs_library"]),
                    x["gpu"] or "-",
                    x["winner"],
                    x["registers"],
                ]
                for x in rows
            ],
        )
    _render_sizes(console, sizes)
    render_unresolved(console, resolution.unresolved)
    if resolution.lock_changed:
        console.print(f"updated {lock_path(resolution.manifest)}")


def _lock_mode(args: argparse.Namespace) -> tuple[bool, bool]:
    """``(locked, frozen)`` from the flags, else ``R1BUILD_LOCKED`` / ``R1BUILD_FROZEN``
    (:func:`r1build.settings.lock_mode`)."""
    return lock_mode(getattr(args, "locked", False) or None, getattr(args, "frozen", False) or None, env_settings())


def _options(args: argparse.Namespace, manifest: Manifest, write_lock: bool) -> ResolveOptions:
    locked, frozen = _lock_mode(args)
    return ResolveOptions(
        archs=parse_archs(args.arch),
        kernels=args.kernel,
        generate=args.generate,
        locked=locked,
        frozen=frozen,
        refresh=args.refresh,
        evaluate=args.evaluate,
        write_lock=write_lock,
        cluster=cluster_of(args, manifest),
    )


def cmd_resolve(args: argparse.Namespace, console: Console) -> int:
    if args.out is not None:  # refused before the resolve, not after it
        nearest = next((p for p in (args.out, *args.out.parents) if p.exists()), None)
        if nearest == args.out and not nearest.is_dir():
            raise UsageError(f"--out {args.out} is not a folder; name the folder to write the generated files into")
        if nearest is not None and not nearest.is_dir():
            raise UsageError(f"--out {args.out} cannot be created: {nearest} is a file, not a folder")
    manifest = load_from_args(args, check_references=False)
    with sink(console.event), open_cache(args, manifest=manifest) as cache:
        resolution = resolve(manifest, cache, _options(args, manifest, write_lock=True))
        generated = None
        if args.out and not resolution.unresolved:
            generated = emit_resolution(resolution, args.out, replace_foreign=args.force)
            if not args.json:  # --json: named in the document, so stdout stays one JSON document
                console.print(f"generated {generated}")
        elif args.out:
            console.warning(
                f"nothing written to {args.out}: {len(resolution.unresolved)} kernel x arch without a winner (below)"
            )
    extra = {"generated": str(generated) if generated else None} if args.out else {}
    _render_resolution(resolution, console, args.json, extra)
    return 1 if resolution.unresolved else 0


def cmd_lock(args: argparse.Namespace, console: Console) -> int:
    manifest = load_from_args(args, check_references=False)
    if args.check:
        if args.refresh:
            raise UsageError("--check writes nothing and --refresh judges again: choose one")
        _options(args, manifest, write_lock=False)  # --arch spellings, --cluster: refused as they are elsewhere
        unknown = sorted(set(args.kernel or []) - {s.name for s in manifest.kernels})
        if unknown:
            raise UsageError(
                f"unknown kernel(s): {', '.join(unknown)} (declared: {', '.join(s.name for s in manifest.kernels)})"
            )
        staleness = check_lock(manifest, load_lock(manifest))
        if args.json:
            stale = [{"kernel": k, "arch": a, "reason": why} for k, a, why in staleness.problems]
            console.json(json.dumps({"lock": str(lock_path(manifest)), "current": not staleness, "stale": stale}))
        elif staleness:
            console.error(f"{lock_path(manifest)} is not current:\n{staleness.render()}")
        else:
            console.print(f"{lock_path(manifest)}: current")
        return 1 if staleness else 0
    options = replace(_options(args, manifest, write_lock=True), recover_lock=True)
    if options.frozen:  # lock takes no --frozen: the variable said it
        raise UsageError(
            "R1BUILD_FROZEN is set: frozen runs never write the lock, and `r1build lock` writes it; unset the "
            "variable, or use `r1build lock --check`"
        )
    with sink(console.event), open_cache(args, manifest=manifest) as cache:
        resolution = resolve(manifest, cache, options)
    _render_resolution(resolution, console, args.json)
    if not resolution.lock_changed and not resolution.unresolved and not args.json:  # JSON: "lock_changed"
        console.print(f"{lock_path(manifest)}: already current")
    return 1 if resolution.unresolved else 0


def cmd_vendor(args: argparse.Namespace, console: Console) -> int:
    manifest = load_from_args(args, check_references=False)
    _, frozen = _lock_mode(args)
    with sink(console.event), open_cache(args, manifest=manifest) as cache:
        resolution = resolve(
            manifest,
            cache,
            ResolveOptions(locked=not frozen, frozen=frozen, generate=False, evaluate=False, write_lock=False),
        )
    resolution.require_complete()
    vendor_dir = manifest.root / manifest.settings.vendor_dir
    done = vendor_winners(
        manifest.root, vendor_dir, sorted({(r.spec.name, r.candidate.source) for r in resolution.entries})
    )
    if args.json:
        console.json(
            json.dumps(
                {
                    "vendor_dir": str(vendor_dir),
                    "vendored": [str(p) for p in done.kept],
                    "removed": [str(p) for p in done.removed],
                },
                indent=2,
            )
        )
        return 0
    for path in done.kept:
        console.print(f"vendored {path.relative_to(manifest.root)}")
    for path in done.removed:
        console.print(f"removed  {path.relative_to(manifest.root)}")
    return 0
