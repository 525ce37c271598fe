"""Helpers of the bundle tests: filled caches, their contents, bundles rebuilt as a tamperer would."""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r1build.cache import Cache
from r1build.keys import canonical_json, digest_bytes
from r1build.records import CandidateRef, Decision, Origin, Result, Timing

LARGE = 40_000  # stored as a file by diskcache


def make_decision(cache: Cache, key: str, kernel: str, *, measured: bool = True, note: str = "") -> Decision:
    source = cache.put_text(f'// {kernel} {key}\nextern "C" int {kernel}() {{ return 0; }}\n')
    transcript = cache.put_text(f"<think>{kernel} {key}</think>")
    ref = CandidateRef(source, source, Origin("generated", model="r1", round=1, sample=0, transcript=transcript))
    loser_source = cache.put_text(f"// slower {kernel} {key}\n")
    loser = CandidateRef(loser_source, loser_source, Origin("baseline", path=f"kernels/{kernel}.cu"))
    results = [
        Result(
            candidate=source,
            arch="sm_90",
            status="passed",
            stage="evaluate" if measured else "gate",
            timing=Timing(median_us=10.0, spread=0.01, samples=40) if measured else None,
        ),
        Result(candidate=loser_source, arch="sm_90", status="incorrect", detail="max abs error 3.1"),
    ]
    decision = Decision(
        key=key,
        kernel=kernel,
        arch="sm_90",
        winner=ref,
        candidates=[ref, loser],
        results=results,
        transcripts=[],
        measured=measured,
        device="H200" if measured else None,
        toolchain="nvcc 13.0",
        created=f"2026-01-0{1 + len(note)}T00:00:00+00:00",
    )
    cache.put_decision(decision)
    return decision


def contents(cache: Cache) -> dict[str, bytes | None]:
    """What a bundle carries of ``cache``: every entry but this machine's signer notes."""
    from r1build.cache.verdicts import is_signer_note

    return {e.key: cache.peek(e.key) for e in cache.entries() if not is_signer_note(e.key)}


def filled(cache: Cache) -> Cache:
    """``cache`` with two decisions (and their blobs), a large blob, a gate result and a JSON document."""
    make_decision(cache, "d" * 64, "matmul")
    make_decision(cache, "e" * 64, "softmax_rows")
    cache.put_blob(os.urandom(LARGE))
    cache.put_gate("g" * 64, Result(candidate="v" * 64, arch="sm_80", status="compile_error", detail="error: x"))
    cache.put_json("floors", "NVIDIA H200", {"bandwidth_gbs": 4800.0})
    return cache


def rewrite(
    src: Path,
    dst: Path,
    *,
    index: Callable[[dict[str, Any]], None] | None = None,
    members: Callable[[dict[str, bytes]], None] | None = None,
    fix_digest: bool = True,
) -> Path:
    """Rebuild a bundle as a tamperer with zip tools would, optionally recomputing the index digest."""
    with zipfile.ZipFile(src) as zf:
        data = {name: zf.read(name) for name in zf.namelist()}
        comment = zf.comment
    doc = json.loads(data["index.json"])
    if index is not None:
        index(doc)
        data["index.json"] = canonical_json(doc)
    if members is not None:
        members(data)
    if fix_digest:
        comment = b"r1build-bundle index sha256=" + digest_bytes(data["index.json"]).encode()
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.comment = comment
        for name, payload in data.items():
            zf.writestr(name, payload)
    return dst
