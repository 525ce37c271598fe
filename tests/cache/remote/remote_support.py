"""Helpers of the remote-cache tests: projects that trust the team's key, and machine A's measured cache."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Literal

import pytest

from r1build.cache import Cache
from r1build.cache.remote import RemoteLayer, open_store
from r1build.cli.main import main
from r1build.judge import CHECKS_VERSION
from r1build.keys import decision_key
from r1build.lock import read_lock
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin, Result
from r1build.trust.signing import KeyPair, trusted_keys
from tests.gate_seed import seed_gate_verdicts
from tests.support.decisions import measured_decision, measured_result, plant_measured

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "tests" / "packages" / "tiny"

__all__ = [
    "ROOT",
    "TINY",
    "measured_root",
    "measured_tiny",
    "plant_decision",
    "push",
    "root_project",
    "tiny_project",
    "trust",
    "trust_nothing",
]


def s3_endpoint_at(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """boto3 pointed at a server on 127.0.0.1:``port`` (test credentials, a region), as an S3-compatible store."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }.items():
        monkeypatch.setenv(name, value)


def trust(project: Path, *public_keys: str, url: str | None = None, timeout_s: float | None = None) -> None:
    """Add a ``[cache]`` table to the project's kernels.toml."""
    lines = ["", "[cache]", f"trusted-keys = [{', '.join(repr(k) for k in public_keys)}]"]
    if url is not None:
        lines.append(f'url = "{url}"')
    if timeout_s is not None:
        lines.append(f"timeout-s = {timeout_s}")
    toml = project / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8") + "\n".join(lines).replace("'", '"') + "\n", encoding="utf-8")


def trust_nothing(project: Path) -> None:
    """Empty the project's ``[cache] trusted-keys`` (the table :func:`trust` added, the last in the file)."""
    toml = project / "kernels.toml"
    text = toml.read_text(encoding="utf-8")
    toml.write_text(text[: text.index("trusted-keys")] + "trusted-keys = []\n", encoding="utf-8")


def tiny_project(dest: Path, *public_keys: str, url: str | None = None, timeout_s: float | None = None) -> Path:
    """A copy of tests/packages/tiny trusting ``public_keys``."""
    shutil.copytree(TINY, dest, ignore=shutil.ignore_patterns(".r1build", "__pycache__", "build"))
    trust(dest, *public_keys, url=url, timeout_s=timeout_s)
    return dest


def plant_decision(
    project: Path,
    cache_dir: Path,
    winner: Candidate,
    result: Result,
    *,
    measured: bool = False,
    device: str | None = None,
    checks: int | None = None,
) -> str:
    """Store in ``cache_dir`` a decision for tiny's scale on sm_90 whose one candidate and winner is ``winner``
    (its source stored too), judged by ``result``. Returns the decision key."""
    m = load_manifest(project / "kernels.toml")
    key = decision_key(m, m.kernel("scale"), "sm_90")
    decision = measured_decision(winner, key=key, kernel="scale", device=device, checks=checks, result=result)
    with Cache(cache_dir) as cache:
        cache.put_text(winner.source)
        cache.put_decision(dataclasses.replace(decision, measured=measured))
    return key


def _measure_and_lock_tiny(project: Path, cache_dir: Path, time_us: float = 3.5) -> str:
    scale = Candidate((project / "scale.cu").read_text(encoding="utf-8"), Origin("baseline", "scale.cu"))
    result = measured_result(scale.digest, time_us)
    key = plant_decision(project, cache_dir, scale, result, measured=True, device="NVIDIA H200", checks=CHECKS_VERSION)
    assert main(["lock", "-m", str(project), "--offline", "--no-gpu", "--cache-dir", str(cache_dir)]) == 0
    entry = read_lock(project / "kernels.lock").entry("scale", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and entry.time_us == time_us and entry.key == key
    return key


def measured_tiny(project: Path, cache_dir: Path, time_us: float = 3.5) -> str:
    """Machine A: the decision a GPU run records for tiny's scale on sm_90 (baseline measured), then
    ``r1build lock`` (which gates it and caches the gate result). Returns the decision key. The empty cache is
    first seeded with the baseline's gate verdict, compiled once per process (tests/gate_seed.py)."""
    seed_gate_verdicts(cache_dir, project, _measure_and_lock_tiny)
    return _measure_and_lock_tiny(project, cache_dir, time_us)


def root_project(dest: Path, *public_keys: str) -> Path:
    """A copy of the root manifest, its kernels and its committed lock, trusting ``public_keys``."""
    dest.mkdir(parents=True)
    shutil.copy(ROOT / "kernels.toml", dest / "kernels.toml")
    shutil.copy(ROOT / "kernels.lock", dest / "kernels.lock")
    shutil.copytree(ROOT / "kernels", dest / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
    trust(dest, *public_keys)
    return dest


def measured_root(project: Path, cache_dir: Path) -> list[str]:
    """Machine A for the root manifest: the decisions the H200 recorded for the lock's validated entries (winner,
    time and GPU as the committed lock has them), then a locked resolve that gates every winner. Returns the keys
    of the decisions. The empty cache is first seeded with the winners' gate verdicts, compiled once per process
    (tests/gate_seed.py)."""

    def resolve_copy(copy: Path, scratch_cache: Path) -> None:  # the seed's copy leaves the lock out: it is ours
        shutil.copy(project / "kernels.lock", copy / "kernels.lock")
        _measure_and_resolve_root(copy, scratch_cache)

    seed_gate_verdicts(cache_dir, project, resolve_copy)
    return _measure_and_resolve_root(project, cache_dir)


def _measure_and_resolve_root(project: Path, cache_dir: Path) -> list[str]:
    m = load_manifest(project / "kernels.toml")
    lock = read_lock(project / "kernels.lock")
    assert lock is not None
    keys = []
    with Cache(cache_dir) as cache:
        for entry in lock.kernel:
            if entry.validation != "validated":
                continue
            spec = m.kernel(entry.name)
            assert entry.origin is not None and entry.time_us is not None
            kind: Literal["baseline", "file"] = "baseline" if entry.origin == spec.baseline else "file"
            candidate = Candidate(
                (project / entry.origin).read_text(encoding="utf-8"), Origin(kind, entry.origin), dict(entry.defines)
            )
            assert candidate.digest == entry.winner, entry
            plant_measured(
                cache,
                candidate,
                key=entry.key,
                kernel=entry.name,
                time_us=entry.time_us,
                arch=entry.arch,
                device=entry.gpu,
                checks=entry.checks,
            )
            keys.append(entry.key)
    assert keys
    assert (
        main(["resolve", "--locked", "--no-gpu", "--offline", "-m", str(project), "--cache-dir", str(cache_dir)]) == 0
    )
    return keys


def push(project: Path, cache_dir: Path, url: str, key: KeyPair) -> tuple[int, int]:
    """Machine A publishes its cache to ``url``, signed with ``key`` (as ``r1build cache push`` does):
    (published, already there)."""
    layer = RemoteLayer(
        open_store(url, timeout=10, header=None),
        trusted=trusted_keys(load_manifest(project / "kernels.toml")),
        signing_key=key.private,
    )
    try:
        with Cache(cache_dir) as cache:
            return layer.push(cache)
    finally:
        layer.close()
