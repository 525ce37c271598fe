"""Signed bundles: export signs every entry but blobs; import with trusted keys refuses, one warning each, what is
unsigned, signed by another key or altered after signing; old unsigned bundles still import without trusted keys."""

from __future__ import annotations

import base64
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from r1build.cache import Cache, export_bundle, import_bundle, read_bundle
from r1build.cache.verdicts import is_signer_note, signer_key
from r1build.errors import BundleError
from r1build.events import Note
from r1build.trust.signing import KeyPair, TrustedKeys, entry_payload, verify, write_private_key
from tests.cache.bundle_support import contents, filled, rewrite


@pytest.fixture(scope="module")
def team() -> KeyPair:
    return KeyPair.generate()


@pytest.fixture(scope="module")
def stranger() -> KeyPair:
    return KeyPair.generate()


@pytest.fixture
def source(tmp_path: Path) -> Cache:
    return filled(Cache(tmp_path / "source"))


@pytest.fixture
def fresh(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "fresh")


SIGNED = ["decision/" + "d" * 64, "decision/" + "e" * 64, "gate/" + "g" * 64, "json/floors/NVIDIA H200"]


def index_of(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as zf:
        doc: dict[str, Any] = json.loads(zf.read("index.json"))
    return doc


def test_signed_export_layout(source: Cache, team: KeyPair, tmp_path: Path) -> None:
    path = tmp_path / "signed.r1bundle"
    summary = export_bundle(source, path, signing_key=team.private)
    assert summary.signed_by == team.public.key_id
    doc = index_of(path)
    assert doc["version"] == 2
    trusted = TrustedKeys.of([team.public])
    entries, payloads = read_bundle(path)
    for e in entries:
        if e.kind == "blob":
            assert e.signature is None
        else:
            assert verify(entry_payload(e.key, payloads[e.sha256]), e.signature, trusted) == team.public.key_id
    assert sorted(e.key for e in entries if e.signature) == sorted(SIGNED)
    assert index_of(tmp_path / "signed.r1bundle") == doc
    unsigned = export_bundle(source, tmp_path / "plain.r1bundle")
    assert unsigned.signed_by is None and index_of(tmp_path / "plain.r1bundle")["version"] == 1
    assert all("signature" not in e for e in index_of(tmp_path / "plain.r1bundle")["entries"])


def test_signed_bundle_imports_when_trusted(
    source: Cache, fresh: Cache, team: KeyPair, stranger: KeyPair, tmp_path: Path, notes: list[Note]
) -> None:
    path = tmp_path / "signed.r1bundle"
    export_bundle(source, path, signing_key=team.private)
    summary = import_bundle(fresh, path, trusted=TrustedKeys.of([stranger.public, team.public]))
    assert summary.refused == {}
    assert summary.verified == {key: team.public.key_id for key in SIGNED}
    kept = {e.key: fresh.peek(e.key) for e in fresh.entries()}  # the signer notes too
    signer_notes = {k for k in kept if is_signer_note(k)}
    assert {k: v for k, v in kept.items() if k not in signer_notes} == contents(source)
    # each record kept for its signature notes its signer (so removing that key from trusted-keys reaches it)
    records = [k for k in SIGNED if k.startswith(("decision/", "gate/"))]
    assert signer_notes == {signer_key(k) for k in records}
    assert all(fresh.signer_of(k) == team.public.key_id for k in records)
    assert not [n for n in notes if n.level == "warning"]


def test_untrusted_signer_is_refused_one_warning_each(
    source: Cache, fresh: Cache, team: KeyPair, stranger: KeyPair, tmp_path: Path, notes: list[Note]
) -> None:
    path = tmp_path / "stranger.r1bundle"
    export_bundle(source, path, signing_key=stranger.private)
    summary = import_bundle(fresh, path, trusted=TrustedKeys.of([team.public]))
    assert sorted(summary.refused) == sorted(SIGNED)
    assert all(
        f"signed by key {stranger.public.key_id}, which is not a trusted key" in why for why in summary.refused.values()
    )
    warnings = [n.message for n in notes if n.level == "warning"]
    assert len(warnings) == len(SIGNED)
    for key in SIGNED:
        assert sum(key in w and stranger.public.key_id in w for w in warnings) == 1
    assert fresh.decisions() == []
    assert [e.kind for e in fresh.entries()] == ["blob"] * len(fresh.entries())  # content-addressed, harmless


def test_old_unsigned_bundle(source: Cache, fresh: Cache, team: KeyPair, tmp_path: Path, notes: list[Note]) -> None:
    path = tmp_path / "old.r1bundle"
    export_bundle(source, path)
    summary = import_bundle(fresh, path, trusted=TrustedKeys.of([team.public]))
    assert sorted(summary.refused) == sorted(SIGNED)
    assert all(why.startswith("unsigned") for why in summary.refused.values())
    assert len([n for n in notes if n.level == "warning"]) == len(SIGNED)
    assert fresh.decisions() == []
    for trusted in (None, TrustedKeys()):  # no trusted keys configured: imported as before
        again = Cache(tmp_path / f"again{trusted is None}")
        summary = import_bundle(again, path, trusted=trusted)
        assert summary.refused == {} and summary.verified == {}
        assert contents(again) == contents(source)


def _mangle_signature(doc: dict[str, Any], key: str) -> None:
    item = next(e for e in doc["entries"] if e["key"] == key)
    algorithm, kid, data = item["signature"].split(":")
    raw = bytearray(base64.b64decode(data))
    raw[0] ^= 0xFF
    item["signature"] = f"{algorithm}:{kid}:{base64.b64encode(bytes(raw)).decode()}"


def test_tampered_entries_are_refused_the_rest_imported(
    source: Cache, fresh: Cache, team: KeyPair, tmp_path: Path, notes: list[Note]
) -> None:
    """A tamperer who rewrites the zip (index digest recomputed) can change a payload or a signature, not both
    consistently: each such entry is refused, every other signed entry still imports."""
    path = tmp_path / "signed.r1bundle"
    export_bundle(source, path, signing_key=team.private)
    victim, forged = SIGNED[0], SIGNED[1]

    def index(doc: dict[str, Any]) -> None:
        _mangle_signature(doc, victim)
        item = next(e for e in doc["entries"] if e["key"] == "json/floors/NVIDIA H200")
        del item["signature"]

    tampered = rewrite(path, tmp_path / "tampered.r1bundle", index=index)
    summary = import_bundle(fresh, tampered, trusted=TrustedKeys.of([team.public]))
    assert sorted(summary.refused) == sorted([victim, "json/floors/NVIDIA H200"])
    assert "does not match" in summary.refused[victim]
    assert summary.refused["json/floors/NVIDIA H200"].startswith("unsigned")
    assert sorted(summary.verified) == sorted([forged, "gate/" + "g" * 64])
    assert fresh.peek(victim) is None and fresh.peek(forged) == source.peek(forged)
    assert len([n for n in notes if n.level == "warning"]) == 2

    # moving a signed decision's signature onto another decision's key fails too
    def swap(doc: dict[str, Any]) -> None:
        a, b = (next(e for e in doc["entries"] if e["key"] == k) for k in (victim, forged))
        a["signature"], b["signature"] = b["signature"], a["signature"]

    other = Cache(tmp_path / "other")
    summary = import_bundle(
        other, rewrite(path, tmp_path / "swapped.r1bundle", index=swap), trusted=TrustedKeys.of([team.public])
    )
    assert sorted(summary.refused) == sorted([victim, forged])
    assert other.peek(victim) is None and other.peek(forged) is None


def test_signature_fields_are_checked_for_shape(source: Cache, fresh: Cache, team: KeyPair, tmp_path: Path) -> None:
    path = tmp_path / "signed.r1bundle"
    export_bundle(source, path, signing_key=team.private)

    def numeric(doc: dict[str, Any]) -> None:
        doc["entries"][-1]["signature"] = 7

    def on_a_blob(doc: dict[str, Any]) -> None:
        next(e for e in doc["entries"] if e["kind"] == "blob")["signature"] = "ed25519:x:y"

    def in_version_1(doc: dict[str, Any]) -> None:
        doc["version"] = 1

    for mangle, message in (
        (numeric, "signature must be a string"),
        (on_a_blob, "expected exactly the fields"),
        (in_version_1, "expected exactly the fields key, kind, sha256, size"),
    ):
        with pytest.raises(BundleError, match=message):
            import_bundle(fresh, rewrite(path, tmp_path / f"{mangle.__name__}.zip", index=mangle))
        assert fresh.entries() == []


# -- the CLI --------------------------------------------------------------------------------------------------
Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    from r1build.cli.main import main

    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("R1BUILD_SIGNING_KEY", raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def trusting(root_copy: Path, *pairs: KeyPair) -> Path:
    path = root_copy / "kernels.toml"
    lines = ", ".join(f'"{p.public.line}"' for p in pairs)
    path.write_text(path.read_text(encoding="utf-8") + f"\n[cache]\ntrusted-keys = [{lines}]\n", encoding="utf-8")
    return path


def test_cli_export_signed_import_verified(
    source: Cache,
    team: KeyPair,
    stranger: KeyPair,
    root_copy: Path,
    tmp_path: Path,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key_file = tmp_path / "team.pem"
    write_private_key(key_file, team.private)
    source.close()
    bundle = tmp_path / "signed.r1bundle"
    code, out, err = cli(
        "cache", "export", str(bundle), "--cache-dir", str(tmp_path / "source"), "--signing-key", str(key_file)
    )
    assert code == 0, err
    assert f"signed every entry but blobs with key {team.public.key_id}" in out
    manifest = trusting(root_copy, team)
    code, out, err = cli("cache", "import", str(bundle), "--cache-dir", str(tmp_path / "a"), "-m", str(root_copy))
    assert code == 0, err
    assert f"signatures: 4 entries signed by trusted keys ({team.public.key_id}), 0 refused" in out
    assert "warning" not in err

    # the key from the environment; a stranger's signatures refused with a warning each
    monkeypatch.setenv("R1BUILD_SIGNING_KEY", stranger.private.raw_base64())
    code, out, err = cli(
        "cache", "export", str(tmp_path / "stranger.r1bundle"), "--cache-dir", str(tmp_path / "source")
    )
    assert code == 0 and stranger.public.key_id in out
    monkeypatch.delenv("R1BUILD_SIGNING_KEY")
    code, out, err = cli(
        "cache", "import", str(tmp_path / "stranger.r1bundle"), "--cache-dir", str(tmp_path / "b"), "-m", str(manifest)
    )
    assert code == 0
    assert "signatures: 0 entries signed by trusted keys (none), 4 refused" in out
    assert err.count("warning:") == 4 and err.count(stranger.public.key_id) == 4
    with Cache(tmp_path / "b") as b:
        assert b.decisions() == []


def test_cli_unsigned_export_and_unchecked_import(source: Cache, root_copy: Path, tmp_path: Path, cli: Cli) -> None:
    source.close()
    bundle = tmp_path / "plain.r1bundle"
    code, out, _ = cli("cache", "export", str(bundle), "--cache-dir", str(tmp_path / "source"))
    assert code == 0 and "unsigned (no --signing-key or R1BUILD_SIGNING_KEY)" in out
    code, out, _ = cli("cache", "import", str(bundle), "--cache-dir", str(tmp_path / "a"))
    assert code == 0 and "signatures not checked" in out
    code, out, _ = cli("cache", "import", str(bundle), "--cache-dir", str(tmp_path / "b"), "-m", str(root_copy))
    assert code == 0 and "the manifest lists no [cache] trusted-keys" in out
    with Cache(tmp_path / "b") as b:
        assert len(b.decisions()) == 2


def test_cli_bad_signing_keys_and_manifests(
    source: Cache, tmp_path: Path, cli: Cli, root_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source.close()
    bundle = tmp_path / "x.r1bundle"
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    for args, message in (
        ((str(junk),), "not a readable private key"),
        ((str(tmp_path / "absent.pem"),), "no such file"),
    ):
        code, _, err = cli(
            "cache", "export", str(bundle), "--cache-dir", str(tmp_path / "source"), "--signing-key", *args
        )
        assert code == 2 and message in err and "Traceback" not in err
        assert not bundle.exists()
    monkeypatch.setenv("R1BUILD_SIGNING_KEY", "c2VjcmV0")
    code, _, err = cli("cache", "export", str(bundle), "--cache-dir", str(tmp_path / "source"))
    assert code == 2 and "R1BUILD_SIGNING_KEY: an ed25519 private key is 32 bytes" in err
    assert "c2VjcmV0" not in err
    monkeypatch.delenv("R1BUILD_SIGNING_KEY")
    assert cli("cache", "export", str(bundle), "--cache-dir", str(tmp_path / "source"))[0] == 0
    (root_copy / "kernels.toml").write_text(
        (root_copy / "kernels.toml").read_text(encoding="utf-8") + '\n[cache]\ntrusted-keys = ["ed25519:AA=="]\n',
        encoding="utf-8",
    )
    code, _, err = cli("cache", "import", str(bundle), "--cache-dir", str(tmp_path / "c"), "-m", str(root_copy))
    assert code == 2 and "cache.trusted-keys[0]" in err and "kernels.toml:" in err
    assert not (tmp_path / "c").exists() or list((tmp_path / "c").iterdir()) == []


def test_cli_import_without_m_checks_the_nearest_manifest(
    source: Cache,
    stranger: KeyPair,
    team: KeyPair,
    root_copy: Path,
    tmp_path: Path,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``cache import`` run in a project whose manifest lists trusted keys skipped every signature check unless
    ``-m`` was given; it finds the manifest as every other command does (the nearest, from the current folder up)."""
    signed = tmp_path / "stranger.r1bundle"
    export_bundle(source, signed, signing_key=stranger.private)
    plain = tmp_path / "plain.r1bundle"
    export_bundle(source, plain)
    source.close()
    trusting(root_copy, team)
    monkeypatch.chdir(root_copy / "kernels")  # a folder below the manifest's
    for name, bundle in (("s", signed), ("p", plain)):
        code, out, err = cli("cache", "import", str(bundle), "--cache-dir", str(tmp_path / name))
        assert code == 0, err
        assert "signatures: 0 entries signed by trusted keys (none), 4 refused" in out
        assert err.count("warning:") == 4
        with Cache(tmp_path / name) as cache:
            assert cache.decisions() == []
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere"  # no manifest here nor above: nothing to check against
    outside.mkdir()
    monkeypatch.chdir(outside)
    code, out, _ = cli("cache", "import", str(plain), "--cache-dir", str(tmp_path / "o"))
    assert code == 0 and "signatures not checked" in out
    with Cache(tmp_path / "o") as cache:
        assert len(cache.decisions()) == 2
