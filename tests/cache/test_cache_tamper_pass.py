"""Tampered bundles and remotes, end to end through the command line: what they bring is refused with a clear
message, the local cache stays intact (``cache verify``), and ``resolve`` never uses it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from r1build.cache import Cache
from r1build.judge import CHECKS_VERSION
from r1build.keys import digest_bytes
from r1build.records import Candidate, Decision, Origin, to_json
from r1build.trust.signing import KeyPair, entry_payload, sign, write_private_key
from tests.cache.conftest import Cli
from tests.cache.remote.remote_servers import FaultServer
from tests.cache.remote.remote_support import plant_decision, tiny_project
from tests.support.decisions import measured_result


def _tiny(tmp_path: Path, team: KeyPair, *, timed: bool = True) -> tuple[Path, Path, str]:
    """tiny trusting ``team``, and a cache holding a GPU decision for its scale (with no time: one that
    contradicts itself, as no r1build records). Returns (project, cache, decision key)."""
    project = tiny_project(tmp_path / "tiny", team.public.line)
    scale = Candidate((project / "scale.cu").read_text(encoding="utf-8"), Origin("baseline", "scale.cu"))
    result = measured_result(scale.digest, 3.5)
    if not timed:
        result = dataclasses.replace(result, timing=None)
    cache = tmp_path / "a"
    key = plant_decision(project, cache, scale, result, measured=True, device="NVIDIA H200", checks=CHECKS_VERSION)
    return project, cache, key


def test_a_signed_bundle_decision_that_contradicts_itself_is_refused_not_added(tmp_path: Path, run_cli: Cli) -> None:
    """The remote treats such a decision as corrupt; a bundle brought it into a cache where `cache verify` then
    failed (exit 1) on it, though no build could use it."""
    team = KeyPair.generate()
    write_private_key(tmp_path / "team.pem", team.private)
    project, source, key = _tiny(tmp_path, team, timed=False)
    bundle = tmp_path / "b.r1bundle"
    code, out = run_cli(
        "cache", "export", str(bundle), "--cache-dir", str(source), "--signing-key", str(tmp_path / "team.pem")
    )
    assert code == 0, out
    target = tmp_path / "b"
    code, out = run_cli("cache", "import", str(bundle), "--cache-dir", str(target), "-m", str(project))
    assert code == 0 and "Traceback" not in out, out
    assert f"refused decision/{key}" in out and "no time measured" in out, out
    with Cache(target) as cache:
        assert cache.peek(f"decision/{key}") is None
    code, out = run_cli("cache", "verify", "--cache-dir", str(target))
    assert code == 0 and "all intact" in out, out


def test_a_remote_answer_cut_short_is_an_unavailable_remote_not_a_corrupt_object(tmp_path: Path, run_cli: Cli) -> None:
    """A 200 whose body ends before its Content-Length (the connection closed mid-transfer) is a torn transfer:
    the remote is off for the run, no object is reported corrupt, nothing is stored."""
    team = KeyPair.generate()
    project, source, key = _tiny(tmp_path, team)
    with Cache(source) as cache:
        decision = cache.get_decision(key, remote=False)
    assert isinstance(decision, Decision)
    payload = to_json(decision)
    record = b"\n".join(
        [
            digest_bytes(payload).encode(),
            sign(entry_payload(f"decision/{key}", payload), team.private).encode(),
            payload,
        ]
    )
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(record)
    target = tmp_path / "b"
    with FaultServer(lambda request: head + record[: len(record) // 2]) as server:
        code, out = run_cli(
            "resolve",
            "--no-gpu",
            "--offline",
            "-m",
            str(project),
            "--cache-dir",
            str(target),
            "--remote-cache",
            f"http://127.0.0.1:{server.port}/team",
        )
    assert code == 0 and "Traceback" not in out, out
    assert "is unavailable" in out and "cut short" in out and "is corrupt" not in out, out
    with Cache(target) as cache:
        assert cache.peek(f"decision/{key}") is None
    code, out = run_cli("cache", "verify", "--cache-dir", str(target))
    assert code == 0, out


def test_an_unchecked_import_is_not_used_where_the_manifest_lists_trusted_keys(tmp_path: Path) -> None:
    """A bundle imported where no manifest lists trusted keys is taken unchecked; its records are marked so, and a
    project that lists trusted keys does not use them (it would a record made on this machine), while one that
    lists none does."""
    from r1build.cache import Cache
    from r1build.cache.bundle import export_bundle, import_bundle
    from r1build.cache.verdicts import UNCHECKED_IMPORT
    from r1build.trust.signing import KeyPair
    from r1build.trust.trusted import TrustedKeys
    from tests.cache.bundle_support import filled

    with Cache(tmp_path / "source") as source:
        filled(source)
        decisions = [d.key for d in source.decisions()]
        export_bundle(source, tmp_path / "plain.r1bundle")
    with Cache(tmp_path / "here") as here:
        import_bundle(here, tmp_path / "plain.r1bundle")  # no trusted keys anywhere: unchecked
        assert all(here.signer_of(f"decision/{k}") == UNCHECKED_IMPORT for k in decisions)
        here.trusted = TrustedKeys()  # a project that lists none: used as before
        assert all(here.get_decision(k, remote=False) is not None for k in decisions)
        here.trusted = TrustedKeys.of([KeyPair.generate().public])  # a project that lists one: not used
        assert all(here.get_decision(k, remote=False) is None for k in decisions)
