"""Cache bundles: export/import round trips, selection, conflict policy, and tampered bundles refused whole."""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from r1build.cache import Cache, export_bundle, import_bundle, read_bundle, referenced_blobs
from r1build.errors import BundleError
from r1build.judge import CHECKS_VERSION
from r1build.keys import canonical_json, digest_bytes
from r1build.records import Decision, to_json
from tests.cache.bundle_support import LARGE, contents, filled, make_decision, rewrite


@pytest.fixture
def source(tmp_path: Path) -> Cache:
    return filled(Cache(tmp_path / "source"))


@pytest.fixture
def fresh(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "fresh")


@pytest.fixture
def bundle(source: Cache, tmp_path: Path) -> Path:
    path = tmp_path / "all.r1bundle"
    export_bundle(source, path)
    return path


# -- round trips ----------------------------------------------------------------------------------------------
def test_export_import_round_trip(source: Cache, fresh: Cache, bundle: Path) -> None:
    summary = import_bundle(fresh, bundle)
    assert contents(fresh) == contents(source)
    assert None not in contents(fresh).values()
    assert fresh.verify() == []
    assert sorted(summary.added) == sorted(contents(source))
    assert summary.entries == {"blob": 7, "decision": 2, "gate": 1, "json": 1}
    assert fresh.decisions() == source.decisions()
    again = import_bundle(fresh, bundle)  # importing twice changes nothing
    assert again.added == [] and sorted(again.unchanged) == sorted(contents(source))


def test_bundle_layout(bundle: Path, source: Cache) -> None:
    with zipfile.ZipFile(bundle) as zf:
        index = json.loads(zf.read("index.json"))
        assert zf.comment == b"r1build-bundle index sha256=" + digest_bytes(zf.read("index.json")).encode()
        names = set(zf.namelist())
    assert (index["format"], index["version"]) == ("r1build-bundle", 1)
    for item in index["entries"]:
        assert set(item) == {"key", "kind", "sha256", "size"}
        assert f"entries/{item['sha256']}" in names
        assert item["key"].startswith(item["kind"] + "/")
        payload = source.peek(item["key"])
        assert payload is not None and (len(payload), digest_bytes(payload)) == (item["size"], item["sha256"])
    entries, payloads = read_bundle(bundle)
    assert len(entries) == len(index["entries"]) and set(payloads) == {e.sha256 for e in entries}


def test_this_machines_records_never_travel_in_a_bundle(source: Cache, fresh: Cache, tmp_path: Path) -> None:
    # replay records (this machine's paths and printed output, keyed by its environment) and pending cluster
    # outcomes: left out of an export, and skipped when a bundle carries them anyway
    from r1build.cache.bundle import MACHINE_LOCAL
    from r1build.cli.fastpath import NAMESPACE as REPLAY
    from r1build.cluster.session import OUTCOMES_NAMESPACE

    assert set(MACHINE_LOCAL) == {REPLAY, OUTCOMES_NAMESPACE}  # the owners' names, kept in step
    source.put_json(REPLAY, "r" * 64, {"stdout": "/home/someone/project"})
    source.put_json(OUTCOMES_NAMESPACE, "t" * 16, {"status": "passed"})
    local = [f"json/{REPLAY}/{'r' * 64}", f"json/{OUTCOMES_NAMESPACE}/{'t' * 16}"]
    everything = export_bundle(source, tmp_path / "all.r1b")
    chosen = export_bundle(source, tmp_path / "chosen.r1b", keys=[*local, "decision/" + "d" * 64])
    for path in (everything.path, chosen.path):
        entries, _ = read_bundle(Path(path))
        assert entries and not {e.key for e in entries} & set(local)
    payload = source.peek(local[0])
    assert payload is not None

    def carry(doc: dict[str, Any]) -> None:
        doc["entries"].append({"key": local[0], "kind": "json", "sha256": digest_bytes(payload), "size": len(payload)})

    def add(members: dict[str, bytes]) -> None:
        members[f"entries/{digest_bytes(payload)}"] = payload

    crafted = rewrite(Path(everything.path), tmp_path / "crafted.r1b", index=carry, members=add)
    summary = import_bundle(fresh, crafted)
    assert fresh.peek(local[0]) is None and local[0] not in summary.added
    assert "decision/" + "d" * 64 in summary.added


def test_export_selected_decision_brings_its_blobs(source: Cache, fresh: Cache, tmp_path: Path) -> None:
    decision = source.get_decision("d" * 64)
    assert decision is not None
    summary = export_bundle(source, tmp_path / "one.zip", [f"decision/{decision.key}"])
    blobs = referenced_blobs(decision)
    assert len(blobs) == 3  # winner source, loser source, transcript
    assert summary.entries == {"blob": 3, "decision": 1, "gate": 0, "json": 0}
    import_bundle(fresh, tmp_path / "one.zip")
    assert sorted(contents(fresh)) == sorted([f"decision/{decision.key}"] + [f"blob/{b}" for b in blobs])
    assert fresh.get_decision(decision.key) == decision


def test_export_leaves_out_what_is_missing_or_corrupt(source: Cache, tmp_path: Path) -> None:
    decision = source.get_decision("d" * 64)
    assert decision is not None and decision.winner is not None
    source.delete(f"blob/{decision.winner.source}")
    summary = export_bundle(source, tmp_path / "one.zip", [f"decision/{decision.key}", "decision/" + "f" * 64])
    assert summary.missing == sorted([f"blob/{decision.winner.source}", "decision/" + "f" * 64])
    assert summary.entries["blob"] == 2 and summary.entries["decision"] == 1


# -- conflict policy ------------------------------------------------------------------------------------------
def test_measured_decision_replaces_unmeasured_but_not_the_reverse(tmp_path: Path) -> None:
    gpu, ci = Cache(tmp_path / "gpu"), Cache(tmp_path / "ci")
    measured = make_decision(gpu, "k" * 64, "matmul", measured=True)
    unmeasured = make_decision(ci, "k" * 64, "matmul", measured=False, note="ci")
    export_bundle(gpu, tmp_path / "gpu.zip")
    export_bundle(ci, tmp_path / "ci.zip")

    summary = import_bundle(ci, tmp_path / "gpu.zip")
    assert summary.replaced == ["decision/" + "k" * 64]
    assert ci.get_decision("k" * 64) == measured

    summary = import_bundle(gpu, tmp_path / "ci.zip")
    assert summary.kept == ["decision/" + "k" * 64] and summary.replaced == []
    assert gpu.get_decision("k" * 64) == measured
    assert unmeasured != measured


def test_a_decision_judged_by_newer_gpu_checks_replaces_an_older_one(tmp_path: Path) -> None:
    old, new = Cache(tmp_path / "old"), Cache(tmp_path / "new")
    stale = make_decision(old, "k" * 64, "matmul")
    assert stale.checks is None  # recorded before versions were kept: counts as version 0
    fresh = dataclasses.replace(make_decision(new, "k" * 64, "matmul", note="again"), checks=CHECKS_VERSION)
    new.put_decision(fresh)
    export_bundle(new, tmp_path / "new.zip")
    export_bundle(old, tmp_path / "old.zip")
    assert import_bundle(old, tmp_path / "new.zip").replaced == ["decision/" + "k" * 64]
    assert old.get_decision("k" * 64) == fresh
    assert import_bundle(new, tmp_path / "old.zip").kept == ["decision/" + "k" * 64]


@pytest.mark.parametrize("claim", ["checks from a future r1build", "validated with no time", "winner not its source"])
def test_a_bundle_decision_that_cannot_be_weighed_never_replaces_a_good_one(tmp_path: Path, claim: str) -> None:
    """The upgrade rule (a GPU decision, newer checks) is the bundle's own claim: one this r1build cannot weigh
    or that contradicts itself would cost the good local decision and bring nothing usable."""
    mine, theirs = Cache(tmp_path / "mine"), Cache(tmp_path / "theirs")
    good = make_decision(mine, "k" * 64, "matmul", measured=False)  # gate only: any sound GPU decision upgrades it
    claimed = make_decision(theirs, "k" * 64, "matmul", note="theirs")
    winner = claimed.winner
    assert winner is not None and claimed.results[0].timing is not None
    if claim == "checks from a future r1build":
        claimed = dataclasses.replace(claimed, checks=CHECKS_VERSION + 1)
    elif claim == "validated with no time":
        claimed = dataclasses.replace(
            claimed, results=[dataclasses.replace(claimed.results[0], timing=None), *claimed.results[1:]]
        )
    else:
        claimed = dataclasses.replace(claimed, winner=dataclasses.replace(winner, source="f" * 64))
    theirs.put_decision(claimed)
    export_bundle(theirs, tmp_path / "theirs.zip")
    summary = import_bundle(mine, tmp_path / "theirs.zip")
    assert summary.kept == ["decision/" + "k" * 64] and summary.replaced == []
    assert mine.get_decision("k" * 64) == good
    sound = dataclasses.replace(make_decision(theirs, "k" * 64, "matmul", note="sound"), checks=CHECKS_VERSION)
    theirs.put_decision(sound)
    export_bundle(theirs, tmp_path / "sound.zip")
    assert import_bundle(mine, tmp_path / "sound.zip").replaced == ["decision/" + "k" * 64]  # the control


def test_differing_measured_decision_keeps_local(tmp_path: Path) -> None:
    a, b = Cache(tmp_path / "a"), Cache(tmp_path / "b")
    mine = make_decision(a, "k" * 64, "matmul")
    make_decision(b, "k" * 64, "matmul", note="other run")
    export_bundle(b, tmp_path / "b.zip")
    summary = import_bundle(a, tmp_path / "b.zip")
    assert summary.kept == ["decision/" + "k" * 64]
    assert a.get_decision("k" * 64) == mine


def test_import_replaces_a_corrupt_local_blob(source: Cache, fresh: Cache, bundle: Path) -> None:
    data = os.urandom(LARGE)
    digest = fresh.put_blob(data)
    export_bundle(fresh, bundle.with_name("fresh.zip"))
    value_file = next(fresh.directory.rglob("*.val"))
    raw = bytearray(value_file.read_bytes())
    raw[-10] ^= 1
    value_file.write_bytes(bytes(raw))
    assert fresh.verify() == [f"blob/{digest}"]
    summary = import_bundle(fresh, bundle.with_name("fresh.zip"))
    assert summary.added == [f"blob/{digest}"]
    assert fresh.get_blob(digest) == data and fresh.verify() == []


# -- tampered bundles -----------------------------------------------------------------------------------------
def entry(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(e for e in doc["entries"] if e["kind"] == kind)


def refused(fresh: Cache, path: Path, match: str) -> None:
    with pytest.raises(BundleError, match=match) as info:
        import_bundle(fresh, path)
    assert (
        "nothing was imported" in str(info.value)
        or "not a readable bundle" in str(info.value)
        or "no such bundle" in str(info.value)
    )
    assert info.value.exit_code == 2
    assert fresh.entries() == []


def test_flipped_byte_in_an_entry_is_refused(fresh: Cache, bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as zf:
        doc = json.loads(zf.read("index.json"))
        target = entry(doc, "json")  # sorted last: every entry before it is valid
        info = zf.getinfo(f"entries/{target['sha256']}")
    raw = bytearray(bundle.read_bytes())
    with bundle.open("rb") as fh:  # data starts after the local header (30 bytes + name + extra)
        fh.seek(info.header_offset + 26)
        name_len, extra_len = int.from_bytes(fh.read(2), "little"), int.from_bytes(fh.read(2), "little")
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + info.compress_size // 2] ^= 0x01
    bundle.write_bytes(bytes(raw))
    refused(fresh, bundle, r"entry json/floors/NVIDIA H200 .* is damaged")


def test_altered_payload_with_valid_zip_is_refused(fresh: Cache, bundle: Path) -> None:
    def flip(data: dict[str, bytes]) -> None:
        doc = json.loads(data["index.json"])
        name = "entries/" + entry(doc, "decision")["sha256"]
        data[name] = data[name].replace(b"matmul", b"matmux")

    refused(
        fresh,
        rewrite(bundle, bundle.with_name("t.zip"), members=flip),
        r"entry decision/d{64}: payload does not match its sha256",
    )


def test_altered_index_is_refused(fresh: Cache, bundle: Path) -> None:
    def drop_first(doc: dict[str, Any]) -> None:
        doc["entries"][0]["size"] += 1

    refused(fresh, rewrite(bundle, bundle.with_name("a.zip"), index=drop_first, fix_digest=False), "index was altered")
    refused(
        fresh, rewrite(bundle, bundle.with_name("b.zip"), index=drop_first), r"payload is \d+ bytes, the index says \d+"
    )

    def retarget(data: dict[str, bytes]) -> None:  # point a decision at the gate result's payload
        doc = json.loads(data["index.json"])
        decision, gate = entry(doc, "decision"), entry(doc, "gate")
        del data["entries/" + decision["sha256"]]
        decision["sha256"], decision["size"] = gate["sha256"], gate["size"]
        data["index.json"] = canonical_json(doc)

    refused(
        fresh, rewrite(bundle, bundle.with_name("c.zip"), members=retarget), r"entry decision/d{64}: does not parse"
    )

    def wrong_blob_key(doc: dict[str, Any]) -> None:
        entry(doc, "blob")["key"] = "blob/" + "0" * 64

    refused(fresh, rewrite(bundle, bundle.with_name("d.zip"), index=wrong_blob_key), "is not its content's digest")


def test_decision_filed_under_another_key_is_refused(fresh: Cache, bundle: Path) -> None:
    def refile(doc: dict[str, Any]) -> None:
        entry(doc, "decision")["key"] = "decision/" + "a" * 64

    refused(fresh, rewrite(bundle, bundle.with_name("t.zip"), index=refile), "holds the decision for key d{64}")


def test_truncated_bundle_is_refused(fresh: Cache, bundle: Path) -> None:
    data = bundle.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 30):
        bundle.write_bytes(data[:cut])
        refused(fresh, bundle, "not a readable bundle|damaged|digest")


def test_unknown_entries_are_refused(fresh: Cache, bundle: Path) -> None:
    extra = b"an unexpected passenger"

    def add_member(data: dict[str, bytes]) -> None:
        data["entries/" + digest_bytes(extra)] = extra

    refused(fresh, rewrite(bundle, bundle.with_name("a.zip"), members=add_member), "is not listed in the index")

    def add_kind(doc: dict[str, Any]) -> None:
        doc["entries"].append({"key": "plugin/x", "kind": "plugin", "sha256": digest_bytes(extra), "size": len(extra)})

    refused(
        fresh, rewrite(bundle, bundle.with_name("b.zip"), index=add_kind, members=add_member), "unknown kind 'plugin'"
    )

    def add_listed_without_payload(doc: dict[str, Any]) -> None:
        doc["entries"].append(
            {"key": "blob/" + digest_bytes(extra), "kind": "blob", "sha256": digest_bytes(extra), "size": len(extra)}
        )

    refused(
        fresh,
        rewrite(bundle, bundle.with_name("c.zip"), index=add_listed_without_payload),
        "payload entries/[0-9a-f]+ is missing",
    )

    def add_field(doc: dict[str, Any]) -> None:
        doc["entries"][0]["mode"] = "0755"

    refused(fresh, rewrite(bundle, bundle.with_name("d.zip"), index=add_field), "expected exactly the fields")

    def duplicate(doc: dict[str, Any]) -> None:
        doc["entries"].append(dict(doc["entries"][0]))

    refused(fresh, rewrite(bundle, bundle.with_name("e.zip"), index=duplicate), "listed twice")


def test_malformed_bundles_are_refused(fresh: Cache, bundle: Path, tmp_path: Path) -> None:
    (tmp_path / "text.zip").write_text("just text")
    refused(fresh, tmp_path / "text.zip", "not a readable bundle")
    refused(fresh, tmp_path / "absent.zip", "no such bundle")

    def future(doc: dict[str, Any]) -> None:
        doc["version"] = 3

    refused(fresh, rewrite(bundle, tmp_path / "v3.zip", index=future), "bundle version 3 is not supported")

    with zipfile.ZipFile(bundle) as zf:
        data = {name: zf.read(name) for name in zf.namelist() if name != "index.json"}
    with zipfile.ZipFile(tmp_path / "noindex.zip", "w") as zf:
        for name, payload in data.items():
            zf.writestr(name, payload)
    refused(fresh, tmp_path / "noindex.zip", "no index.json")

    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as zf:
        zf.writestr("index.json", b"[1, 2")
    refused(fresh, plain, "zip comment carries no index digest")


def test_an_index_nested_too_deeply_is_refused(fresh: Cache, bundle: Path, tmp_path: Path) -> None:
    """An index.json of 100,000 nested arrays (its digest in the comment matching) ended `cache import` with a
    RecursionError traceback."""

    def deep(data: dict[str, bytes]) -> None:
        data["index.json"] = b"[" * 100_000 + b"]" * 100_000

    refused(fresh, rewrite(bundle, tmp_path / "deep.zip", members=deep), "JSON nested too deeply")


def test_tampered_bundle_leaves_existing_cache_untouched(source: Cache, bundle: Path) -> None:
    before = contents(source)
    extra_decision = Decision(key="z" * 64, kernel="transpose", arch="sm_90", winner=None, created="2026")

    def add(data: dict[str, bytes]) -> None:
        payload = to_json(extra_decision)
        doc = json.loads(data["index.json"])
        doc["entries"].append(
            {
                "key": "decision/" + "z" * 64,
                "kind": "decision",
                "sha256": digest_bytes(payload),
                "size": len(payload) + 1,
            }
        )
        data["index.json"] = canonical_json(doc)
        data["entries/" + digest_bytes(payload)] = payload

    path = bundle.with_name("t.zip")
    rewrite(bundle, path, members=add)
    with pytest.raises(BundleError):
        import_bundle(source, path)
    assert contents(source) == before


def _bomb(path: Path, size: int) -> str:
    """A valid bundle of one blob of ``size`` zero bytes: a few KiB on disk that inflate to ``size``."""
    data = bytes(size)
    digest = digest_bytes(data)
    doc = {
        "format": "r1build-bundle",
        "version": 1,
        "entries": [{"key": f"blob/{digest}", "kind": "blob", "sha256": digest, "size": size}],
    }
    index = canonical_json(doc)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.comment = b"r1build-bundle index sha256=" + digest_bytes(index).encode()
        zf.writestr("index.json", index)
        zf.writestr(f"entries/{digest}", data)
    return digest


def test_a_payload_over_the_entry_bound_is_refused_before_it_is_inflated(
    fresh: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decompression bomb (a small file declaring a huge payload) is refused from the sizes it declares: a
    2 MB bundle of 1 GiB blobs took 4 GiB of memory and filled the cache before this bound."""
    from r1build.cache import bundle as bundle_module

    monkeypatch.setattr(bundle_module, "MAX_ENTRY_BYTES", 1024**2)
    path = tmp_path / "bomb.zip"
    _bomb(path, 1024**2 + 1)
    assert path.stat().st_size < 10_000
    read: list[str] = []
    chunks = bundle_module._Opened.chunks

    def counting(self: Any, entry: Any) -> Iterator[bytes]:
        read.append(entry.key)
        return chunks(self, entry)

    monkeypatch.setattr(bundle_module._Opened, "chunks", counting)
    refused(fresh, path, r"its payload of 1048577 bytes is over the 1048576 bytes an entry may hold")
    assert read == []  # no payload inflated
    _bomb(path, 1024**2)  # at the bound: imported
    assert import_bundle(fresh, path).added


def test_payloads_over_the_cache_size_limit_are_refused(source: Cache, fresh: Cache, bundle: Path) -> None:
    """Importing more than the cache may hold would evict what it holds: refused whole, nothing lost."""
    fresh.set_size_limit(LARGE)  # the bundle's large blob alone is LARGE bytes, with the rest over the limit
    refused(fresh, bundle, rf"its payloads take \d+ bytes, more than the cache's size limit of {LARGE} bytes")


def test_export_replaces_only_a_bundle_or_an_empty_file(source: Cache, bundle: Path, tmp_path: Path) -> None:
    """``cache export kernels.toml`` replaced the manifest with the bundle."""
    manifest = tmp_path / "kernels.toml"
    manifest.write_text('archs = ["sm_90"]\n', encoding="utf-8")
    with pytest.raises(BundleError, match=r"kernels\.toml exists and is not an r1build bundle") as info:
        export_bundle(source, manifest)
    assert info.value.exit_code == 2
    assert manifest.read_text(encoding="utf-8") == 'archs = ["sm_90"]\n'
    other_zip = tmp_path / "other.zip"
    with zipfile.ZipFile(other_zip, "w") as zf:
        zf.writestr("a.txt", "mine")
    with pytest.raises(BundleError, match=r"other\.zip exists and is not an r1build bundle"):
        export_bundle(source, other_zip)
    empty = tmp_path / "empty.r1b"  # as mktemp makes it
    empty.touch()
    for path in (empty, bundle):  # an empty file, or a bundle exported again
        assert export_bundle(source, path).total == len(contents(source))
        assert read_bundle(path)


# -- the CLI --------------------------------------------------------------------------------------------------
def test_cli_export_import(
    source: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from r1build.cli import main as cli_main

    monkeypatch.setenv("COLUMNS", "250")
    src, dst = str(source.directory), str(tmp_path / "dst")
    source.close()

    assert cli_main.main(["cache", "export", str(tmp_path / "mm.zip"), "--kernel", "matmul", "--cache-dir", src]) == 0
    assert "wrote 4 entries (3 blobs, 1 decision" in capsys.readouterr().out
    assert cli_main.main(["cache", "export", str(tmp_path / "x.zip"), "--kernel", "nope", "--cache-dir", src]) == 2
    assert "no cached decisions for nope (cached kernels: matmul, softmax_rows)" in capsys.readouterr().err

    assert cli_main.main(["cache", "import", str(tmp_path / "mm.zip"), "--cache-dir", dst]) == 0
    assert "added 4" in capsys.readouterr().out
    with Cache(dst) as cache:
        assert [d.kernel for d in cache.decisions()] == ["matmul"] and cache.verify() == []

    data = (tmp_path / "mm.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(data[: len(data) // 2])
    assert cli_main.main(["cache", "import", str(tmp_path / "cut.zip"), "--cache-dir", str(tmp_path / "d2")]) == 2
    assert "not a readable bundle" in capsys.readouterr().err
    with Cache(tmp_path / "d2") as cache:
        assert cache.entries() == []
