"""A resolve on a machine whose GPU judges one arch (sm_90) and not the other (sm_80): each candidate is compiled
once for all its archs (issue 11). The gate-only arch's first candidates (:data:`~r1build.resolve.judges.ALONG`)
go into the GPU arch's nvcc, and its resolution, worked after the GPU job, takes those verdicts from the cache and
compiles more only where none of them passes. nvcc is a stand-in here (what is
counted is which archs each compile was asked for), so these tests take well under a second."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.evaluate.variants import expand_variants
from r1build.gate import nvcc
from r1build.gate.static import StaticGate
from r1build.judge import Job
from r1build.manifest import KernelSpec, Manifest, load_manifest
from r1build.records import GateReport, Result, Status
from r1build.resolve import ResolveOptions, resolve
from r1build.resolve.judges import ALONG, gate_batch
from tests.resolve.resolve_support import install_gpu_double

Compiles = list[tuple[str, tuple[str, ...]]]


FAILS_ON_80: set[str] = set()
"""Digests whose sm_80 compiles the stand-in fails (set by a test; cleared by the fixture)."""


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Compiles:
    """Every compile the gate makes, as (candidate digest, archs); each passes with a made-up report but those
    of :data:`FAILS_ON_80` for sm_80."""
    calls: Compiles = []
    FAILS_ON_80.clear()
    # a batch of a 16-core machine's size (this one may have 2 cores: a batch no larger than ALONG would not tell
    # the first candidates compiled along from the first batch)
    monkeypatch.setattr(nvcc, "COMPILE_SLOTS", 16)

    def compile_one(
        self: StaticGate, manifest: Manifest, spec: KernelSpec, tasks: Sequence[object]
    ) -> list[tuple[Result, bool]]:
        archs = tuple(t.arch for t in tasks)  # type: ignore[attr-defined]
        digest = tasks[0].candidate.digest  # type: ignore[attr-defined]
        calls.append((digest, archs))
        report = GateReport(registers=20)

        def status(arch: str) -> Status:
            return "compile_error" if arch == "sm_80" and digest in FAILS_ON_80 else "passed"

        return [
            (Result(candidate=digest, arch=a, status=status(a), gate=report, toolchain=self.toolchain.ident), True)
            for a in archs
        ]

    monkeypatch.setattr(StaticGate, "_compile_one", compile_one)
    return calls


def _silu_on_both_archs(root_copy: Path) -> Manifest:
    """The root manifest copy narrowed to silu_mul (25 variants), on sm_80 and sm_90."""
    toml = root_copy / "kernels.toml"
    head, _, _ = toml.read_text(encoding="utf-8").partition("# Row softmax")
    toml.write_text(head, encoding="utf-8")
    return load_manifest(toml)


def test_the_gate_compiles_asked_archs_along_and_caches_them(root_copy: Path, compiles: Compiles) -> None:
    manifest = _silu_on_both_archs(root_copy)
    spec = manifest.kernels[0]
    first, second = expand_variants(manifest, spec)[:2]
    with Cache(root_copy / "cache") as cache:
        gate = StaticGate(cache)
        gate.compile_along(spec.name, [first], ["sm_80"])
        on_90 = gate.evaluate(Job(manifest, spec, "sm_90", [first, second]))
        assert [r.arch for r in on_90] == ["sm_90", "sm_90"]
        assert sorted(compiles) == sorted([(first.digest, ("sm_90", "sm_80")), (second.digest, ("sm_90",))])
        on_80 = gate.evaluate(Job(manifest, spec, "sm_80", [first]))
        assert on_80[0].status == "passed" and on_80[0].arch == "sm_80"
        assert len(compiles) == 2 and gate.cache_hits == 1  # from the cache: no nvcc of its own


def test_a_resolve_compiles_each_candidate_once_for_both_archs(
    root_copy: Path, compiles: Compiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_gpu_double(monkeypatch, reject=lambda c: False, time_us=lambda c: 10.0 - len(c.defines))
    manifest = _silu_on_both_archs(root_copy)
    variants = expand_variants(manifest, manifest.kernels[0])
    with Cache(root_copy / "cache") as cache:
        resolution = resolve(manifest, cache, ResolveOptions(generate=False))
    digests = [d for d, _ in compiles]
    assert sorted(digests) == sorted(c.digest for c in variants)  # every variant, each in one nvcc
    along = {c.digest for c in variants[:ALONG]}
    assert all(archs == (("sm_90", "sm_80") if d in along else ("sm_90",)) for d, archs in compiles)
    states = {(r.spec.name, r.arch): (r.state, r.provenance) for r in resolution.entries}
    assert states == {("silu_mul", "sm_80"): ("gated", "baseline"), ("silu_mul", "sm_90"): ("measured", "tuned")}


def test_gpu_verdicts_already_cached_leave_the_gate_only_batch_to_the_gate(
    root_copy: Path, compiles: Compiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the GPU job compiles nothing (its verdicts are cached), the gate-only arch's first candidates are
    gated ahead, not left waiting for a compile that never comes."""
    install_gpu_double(monkeypatch, reject=lambda c: False)
    manifest = _silu_on_both_archs(root_copy)
    variants = expand_variants(manifest, manifest.kernels[0])
    with Cache(root_copy / "cache") as cache:
        StaticGate(cache).evaluate(Job(manifest, manifest.kernels[0], "sm_90", variants))
        compiles.clear()
        resolution = resolve(manifest, cache, ResolveOptions(generate=False))
    assert sorted(compiles) == sorted((c.digest, ("sm_80",)) for c in variants[:ALONG])
    assert {r.arch: r.state for r in resolution.entries} == {"sm_80": "gated", "sm_90": "measured"}


def test_where_no_candidate_compiled_along_passes_the_next_batch_is_gated(
    root_copy: Path, compiles: Compiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first candidates fail on sm_80: the gate-only resolution compiles the next batch (sm_80 alone, after
    the GPU job) and the first of it that passes wins; nothing beyond that batch is compiled for sm_80."""
    install_gpu_double(monkeypatch, reject=lambda c: False, time_us=lambda c: 10.0 - len(c.defines))
    manifest = _silu_on_both_archs(root_copy)
    variants = expand_variants(manifest, manifest.kernels[0])
    assert len(variants) > ALONG + gate_batch()  # a batch after the next is left uncompiled
    FAILS_ON_80.update(c.digest for c in variants[:ALONG])
    with Cache(root_copy / "cache") as cache:
        resolution = resolve(manifest, cache, ResolveOptions(generate=False))
    on_80 = sorted(d for d, archs in compiles if "sm_80" in archs)
    assert on_80 == sorted(c.digest for c in variants[: ALONG + gate_batch()])
    entry = next(r for r in resolution.entries if r.arch == "sm_80")
    assert entry.state == "gated" and entry.candidate.digest == variants[ALONG].digest
