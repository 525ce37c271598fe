"""Generation commands: ``generate`` (R1 + the static gate, no GPU needed) and ``replay`` (from transcripts); the
work is :mod:`r1build.resolve.kernel_search`'s, this module parses and renders."""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..convert import asdict, did_you_mean
from ..errors import R1BuildError, UsageError
from ..events import sink
from ..manifest import KernelSpec, Manifest
from ..records import Candidate, Result
from ..resolve.kernel_search import generate_kernel, replay_kernel, require_endpoint
from ..toolchain.extras import GENERATE
from .common import add_cache_arg, add_manifest_arg, load_from_args, open_cache, parse_archs
from .render import Console

if TYPE_CHECKING:
    from ..generate import SearchOutcome
    from ..generate.controller import SampleLoss

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``generate`` and ``replay``."""
    p = sub.add_parser(
        "generate",
        help="generate candidates for one kernel with R1 and judge them with the static gate (no GPU needed)",
    )
    p.add_argument("kernel", metavar="KERNEL", help="kernel name from the manifest")
    p.add_argument("--arch", action="append", metavar="ARCH", help="only these archs (repeat or comma-separate)")
    add_manifest_arg(p)
    add_cache_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "replay", help="re-extract a kernel's candidates from stored transcripts and judge them again (no network)"
    )
    p.add_argument("kernel", metavar="KERNEL", help="kernel name from the manifest")
    p.add_argument("--arch", action="append", metavar="ARCH", help="only these archs (repeat or comma-separate)")
    p.add_argument(
        "--transcript",
        action="append",
        metavar="DIGEST",
        help="replay these transcript blobs instead of the stored decision's (repeatable)",
    )
    p.add_argument("--no-gpu", action="store_true", help="judge with the static gate even where a GPU is present")
    add_manifest_arg(p)
    add_cache_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_replay)


def _kernel(manifest: Manifest, name: str) -> KernelSpec:
    try:
        return manifest.kernel(name)
    except KeyError:
        names = [s.name for s in manifest.kernels]
        raise UsageError(
            f"no kernel {name!r} in {manifest.path}{did_you_mean(name, names)} (kernels: {', '.join(names)})"
        ) from None


def _archs(manifest: Manifest, spec: KernelSpec, args: argparse.Namespace) -> list[str]:
    """``--arch`` (each one the kernel targets: a search for another would be paid for and never used), else every
    arch of the kernel."""
    targeted = manifest.archs_of(spec)
    asked = parse_archs(args.arch) or targeted
    untargeted = [a for a in asked if a not in targeted]
    if untargeted:
        raise UsageError(
            f"--arch {', '.join(untargeted)}: {spec.name} does not target it (its archs: {', '.join(targeted)}); "
            "add it to the manifest's archs first"
        )
    return asked


def _origin(c: Candidate) -> str:
    o = c.origin
    text = f"r{o.round}s{o.sample}" if o.kind == "generated" else f"{o.kind} {Path(o.path or '').name}".rstrip()
    if c.defines:
        text += " " + ",".join(f"{k}={v}" for k, v in c.defines.items())
    return text


def _first_line(text: str, limit: int = 70) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() and not ln.startswith("command:")]
    line = (errors or lines or [""])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _table(console: Console, arch: str, candidates: Sequence[Candidate], results: Sequence[Result], title: str) -> None:
    timed = any(r.timing is not None for r in results)
    columns = ["candidate", "origin", "status", *(["time us", "floor"] if timed else []), "regs", "detail"]
    rows = []
    for c, r in zip(candidates, results, strict=True):
        times: list[object] = []
        if timed:
            t = r.timing
            share = f"{t.share_of_floor:.0%}" if t is not None and t.share_of_floor is not None else ""
            times = [f"{t.median_us:.2f}" if t is not None else "", share]
        regs = r.gate.registers if r.gate is not None else ""
        rows.append([c.digest[:10], _origin(c), r.status, *times, regs, _first_line(r.detail)])
    console.table(columns, rows, title=f"{title} {arch}")


def _rows(candidates: Sequence[Candidate], results: Sequence[Result]) -> list[dict[str, Any]]:
    """The candidates and their results, as ``--json`` reports them."""
    return [
        {
            "candidate": c.digest,
            "origin": _origin(c),
            "provenance": c.provenance(),
            "status": r.status,
            "stage": r.stage,
            "time_us": r.timing.median_us if r.timing is not None else None,
            "share_of_floor": r.timing.share_of_floor if r.timing is not None else None,
            "registers": r.gate.registers if r.gate is not None else None,
            "detail": _first_line(r.detail, 300),
        }
        for c, r in zip(candidates, results, strict=True)
    ]


def cmd_generate(args: argparse.Namespace, console: Console) -> int:
    GENERATE.require()
    from ..toolchain.archs import require_supported_archs
    from ..toolchain.nvcc import toolchain

    manifest = load_from_args(args)
    spec = _kernel(manifest, args.kernel)
    archs = _archs(manifest, spec, args)
    require_supported_archs(manifest, toolchain(), archs)
    require_endpoint(manifest)
    failed: list[str] = []
    report: list[dict[str, Any]] = []
    error: str | None = None
    try:
        with sink(console.event), open_cache(args) as cache:
            for arch, outcome in generate_kernel(manifest, spec, archs, cache):
                generated = outcome.generated()
                passed = sum(1 for _, r in generated if r.ok)
                if not passed:
                    failed.append(f"{arch} ({_why_none_passed(outcome)})")
                if args.json:
                    report.append(_json_row(spec.name, arch, outcome, len(generated), passed))
                else:
                    _print_outcome(console, spec.name, arch, outcome, len(generated), passed)
    except R1BuildError as exc:  # the archs already searched still reach a script reading --json
        error = str(exc)
        raise
    finally:
        if args.json:
            doc: dict[str, Any] = {"kernel": spec.name, "archs": report}
            console.json(json.dumps(doc if error is None else {**doc, "error": error}, indent=2))
    if failed:
        console.error(f"no generated candidate of {spec.name} passed the gate on {'; '.join(failed)}")
        return 1
    return 0


def _json_row(name: str, arch: str, outcome: SearchOutcome, generated: int, passed: int) -> dict[str, Any]:
    """One arch's search as ``generate --json`` reports it."""
    return {
        "kernel": name,
        "arch": arch,
        "generated": generated,
        "passed": passed,
        "rounds": outcome.rounds,
        "usage": asdict(outcome.usage),
        "stop_reason": outcome.stop_reason,
        "cause": outcome.cause,
        "candidates": _rows(outcome.candidates, outcome.results),
    }


def _print_outcome(console: Console, name: str, arch: str, outcome: SearchOutcome, generated: int, passed: int) -> None:
    """One arch's search as ``generate`` prints it: the candidates' table and a line of what it cost."""
    u = outcome.usage
    _table(console, arch, outcome.candidates, outcome.results, f"generate {name}")
    faults = ", ".join(f"{k} {v}" for k, v in sorted(u.failures.items())) or "none"
    approx = "~" if u.estimated else ""
    console.print(
        f"{name} {arch}: {generated} generated ({passed} passed the gate, {u.duplicates} "
        f"duplicates) in {outcome.rounds} round(s); {u.samples} samples, {u.requests} requests "
        f"({u.retries} retries); {approx}{u.prompt_tokens} prompt + {approx}{u.completion_tokens} completion "
        f"tokens, ${u.cost_usd:.4f}; faults: {faults}; stopped ({outcome.stop_reason}): {outcome.cause}"
    )


def _why_none_passed(outcome: SearchOutcome) -> str:
    """What became of the answers of a search in which no generated candidate passed, and why it stopped."""
    u = outcome.usage
    statuses = Counter(r.status.replace("_", " ") for _, r in outcome.generated())
    lost: dict[SampleLoss, str] = {
        "no_code": "without code",
        "truncated": "cut off at max-tokens",
        "interrupted": "ended early by the server",
        "content_filter": "filtered",
    }
    parts = [f"{n} {status}" for status, n in statuses.most_common()]
    parts += [f"{u.failures[k]} {what}" for k, what in lost.items() if u.failures.get(k)]
    answers = f"{u.answers} answer(s) of {u.samples} sample(s)" + (f": {', '.join(parts)}" if parts else "")
    return f"{answers}; stopped: {outcome.cause}"


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    GENERATE.require()  # re-extracting answers runs the generate stage's code, which loads the openai client
    for digest in args.transcript or ():
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise UsageError(
                f"--transcript {digest!r} is not a transcript's digest (its sha256: 64 lowercase hex digits)"
            )
    manifest = load_from_args(args)
    spec = _kernel(manifest, args.kernel)
    archs = _archs(manifest, spec, args)
    status = 0
    report: list[dict[str, Any]] = []
    with sink(console.event), open_cache(args) as cache:
        for done in replay_kernel(
            manifest, spec, archs, cache, transcripts=args.transcript or (), use_gpu=not args.no_gpu
        ):
            arch, outcome, winner, verdict = done.arch, done.outcome, done.winner, done.verdict
            generated = outcome.generated()
            stored = done.stored.winner.digest if done.stored is not None and done.stored.winner else None
            if verdict == "differs":
                status = 1
            if args.json:
                report.append(
                    {
                        "kernel": spec.name,
                        "arch": arch,
                        "transcripts": done.transcripts,
                        "generated": len(generated),
                        "passed": sum(1 for _, r in generated if r.ok),
                        "winner": winner.digest if winner else None,
                        "stored_winner": stored,
                        "stored_winner_verdict": verdict,
                        "candidates": _rows(outcome.candidates, outcome.results),
                    }
                )
                continue
            _table(console, arch, outcome.candidates, outcome.results, f"replay {spec.name}")
            console.print(
                f"{spec.name} {arch}: {len(done.transcripts)} transcript(s), {len(generated)} generated "
                f"candidate(s), {sum(1 for _, r in generated if r.ok)} passed; winner: "
                f"{winner.digest[:12] + ' (' + _origin(winner) + ')' if winner else 'none'}"
            )
            if stored is None:
                continue
            if verdict == "confirmed":
                console.print(f"{spec.name} {arch}: the stored decision's winner is confirmed")
            elif verdict == "passes the gate":
                console.warning(
                    f"{spec.name} {arch}: the stored winner {stored[:12]} passes the "
                    f"static gate; only a GPU of {arch} can confirm it was the right choice"
                )
            else:
                console.error(f"{spec.name} {arch}: the stored decision chose {stored[:12]}, the replay does not")
    if args.json:
        console.json(json.dumps({"kernel": spec.name, "archs": report}, indent=2))
    return status
