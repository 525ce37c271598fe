"""The shared remote cache against real servers on 127.0.0.1: nginx's WebDAV module and moto's S3 server.

Two machines are two cache directories: machine A has measured decisions (as a GPU run records them) and
publishes them, signed; machine B starts empty and resolves from the remote with no GPU and no API key.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cache.remote import RemoteLayer, blob_key, layer, open_store, record_key
from r1build.cache.remote.layer import signed_message
from r1build.cache.verdicts import UNREADABLE_SIGNER, is_signer_note, noted_record, signer_key
from r1build.cli.main import main
from r1build.events import Note, sink
from r1build.judge import CHECKS_VERSION
from r1build.keys import digest_bytes
from r1build.lock import read_lock
from r1build.manifest import load_manifest
from r1build.records import Candidate, Decision, Origin, Result, from_json, to_json
from r1build.trust.signing import KeyPair, TrustedKeys, sign
from tests.cache.remote.remote_servers import TOKEN, FaultServer, Moto, Nginx, Remote, nginx_binary
from tests.cache.remote.remote_support import (
    measured_root,
    measured_tiny,
    plant_decision,
    push,
    root_project,
    s3_endpoint_at,
    tiny_project,
    trust_nothing,
)
from tests.support.decisions import measured_result

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

LOCKED = ("resolve", "--locked", "--no-gpu")


@pytest.fixture(autouse=True)
def _patient_first_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every lookup waits for the run's first remote answer (bounded by the store's timeout). A locked resolve asks
    for the decisions it can do without, and those wait for that answer only :data:`FIRST_ANSWER_S` (0.5 s) after
    it began: the S3 server and its client's first connection took longer on the CI machine under the whole suite
    (three test processes on two cores), and a run then went on without the remote, as it should, failing the
    count these tests check. The grace itself is checked by tests/cache/remote/test_remote_warm.py (a remote that
    never answers holds up no local work)."""
    monkeypatch.setattr(layer, "FIRST_ANSWER_S", PATIENT_S)


PATIENT_S = 60.0
"""The first answer's grace in these tests (:func:`_patient_first_answer`)."""
GRACE_S = layer.FIRST_ANSWER_S
"""The product's grace: a run against a remote that is down, slow or trickling (:func:`_one_warning_and_locked`)
must not wait for it longer than that before its local work."""


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _remote_warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning:") and "remote cache" in line]


@pytest.fixture
def seeded(
    remote: Remote,
    team_key: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[Path, str]:
    """tiny, locked on machine A and published to ``remote``: (project, the decision's key)."""
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    key = measured_tiny(project, tmp_path / "a")
    # the decision and the gate result, after the blob they name
    assert push(project, tmp_path / "a", remote.url, team_key) == (2, 0)
    return project, key


def test_two_machines_share_decisions_and_gate_results(
    remote: Remote,
    seeded: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project, key = seeded
    monkeypatch.setenv("R1BUILD_REMOTE_CACHE", remote.url)
    b = tmp_path / "b"
    code, out = _cli(capsys, *LOCKED, "-m", str(project), "--cache-dir", str(b))
    assert code == 0, out
    assert "1 decisions fetched, 1 gate results fetched" in out, out
    assert not _remote_warnings(out)
    with Cache(b) as cache:
        decision = cache.get_decision(key)
        kinds = {e.kind for e in cache.entries()}
    assert decision is not None and decision.device == "NVIDIA H200" and kinds >= {"decision", "gate"}
    code, out = _cli(capsys, "check", "--locked", "-m", str(project), "--cache-dir", str(tmp_path / "c"))
    assert code == 0, out
    code, out = _cli(capsys, "cache", "verify", "--remote", "-m", str(project))
    assert code == 0 and "digests and signatures intact" in out, out


def test_verifying_a_remote_that_holds_nothing_says_so(
    remote: Remote, team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A remote nothing was pushed to said "0 objects verified ...: digests and signatures intact", which reads as
    a pass of what a push should have published."""
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    measured_tiny(project, tmp_path / "a")
    code, out = _cli(capsys, "cache", "verify", "--remote", "-m", str(project), "--remote-cache", remote.url)
    assert code == 0, out
    assert f"nothing verified on {remote.url}: it holds no object" in out and "intact" not in out, out


def _fetched_on_b(capsys: pytest.CaptureFixture[str], project: Path, remote: Remote, tmp_path: Path) -> Path:
    """Machine B's cache (``tmp_path / "b"``) after a locked resolve of ``project`` fetched its decision from the
    remote."""
    b = tmp_path / "b"
    code, out = _cli(capsys, *LOCKED, "-m", str(project), "--cache-dir", str(b), "--remote-cache", remote.url)
    assert code == 0 and "1 decisions fetched" in out, out
    return b


def test_a_key_removed_from_trusted_keys_revokes_what_was_fetched_for_it(
    remote: Remote,
    seeded: tuple[Path, str],
    team_key: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project, key = seeded
    b = _fetched_on_b(capsys, project, remote, tmp_path)
    with Cache(b) as cache:  # kept on machine B for the team's signature, which it notes
        assert cache.signer_of(f"decision/{key}") == team_key.public.key_id
        gates = [e.key for e in cache.entries() if e.kind == "gate"]
        assert gates and all(cache.signer_of(g) == team_key.public.key_id for g in gates)
    # the team's key leaked: the project trusts a new one instead; machine B no longer uses what the old vouched for
    new_key = KeyPair.generate()
    toml = project / "kernels.toml"
    toml.write_text(toml.read_text().replace(team_key.public.line, new_key.public.line))
    _, out = _cli(capsys, "status", "-m", str(project), "--cache-dir", str(b), "--json")
    revoked = [line for line in out.splitlines() if "no longer holds" in line]
    assert len(revoked) == 1 and key[:16] in revoked[0] and team_key.public.key_id in revoked[0], out
    assert '"state": "cached"' not in out, out
    with Cache(b) as cache:
        cache.trusted = TrustedKeys.of([new_key.public])
        assert cache.get_decision(key) is None  # as a project command reads it
        cache.trusted = None
        assert cache.get_decision(key) is not None  # still there: trusting the old key again brings it back
    # a decision made on this machine under the same key has no signer: trusted whatever the keys
    with Cache(b) as cache:
        decision = cache.get_decision(key)
        assert decision is not None
        cache.put_decision(decision)
        assert cache.signer_of(f"decision/{key}") is None
        cache.trusted = TrustedKeys.of([new_key.public])
        assert cache.get_decision(key) is not None


def test_a_damaged_signer_note_never_makes_a_fetched_record_look_made_here(
    remote: Remote, seeded: tuple[Path, str], team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    project, key = seeded
    b = _fetched_on_b(capsys, project, remote, tmp_path)
    note = signer_key(f"decision/{key}")
    with sqlite3.connect(b / "cache.db") as db:  # the note's bytes no longer match their digest line
        (value,) = db.execute("SELECT value FROM Cache WHERE key = ?", (note,)).fetchone()
        damaged = bytes(value).replace(b"key_id", b"key_iX")
        assert db.execute("UPDATE Cache SET value = ? WHERE key = ?", (damaged, note)).rowcount == 1
    with Cache(b) as cache:
        assert cache.signer_of(f"decision/{key}") == UNREADABLE_SIGNER
        cache.trusted = TrustedKeys.of([team_key.public])  # even the key that signed it: the note says nothing
        assert cache.get_decision(key) is None
        # repair deletes the bad note and the record it was about, together
        bad = cache.audit(repair=True)
        assert [b.key for b in bad] == [note]
        assert cache.peek(f"decision/{key}") is None and cache.peek(note) is None


def test_gc_evicts_a_fetched_record_and_its_signer_note_together(
    remote: Remote, seeded: tuple[Path, str], team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    project, key = seeded
    b = _fetched_on_b(capsys, project, remote, tmp_path)
    note = signer_key(f"decision/{key}")
    with Cache(b) as cache:
        big = f"blob/{cache.put_blob(os.urandom(1 << 20))}"  # a file of its own: evicting it frees its size
    with sqlite3.connect(b / "cache.db") as db:  # the least recently used: the note, then the big blob
        assert db.execute("UPDATE Cache SET access_time = 0 WHERE key = ?", (note,)).rowcount == 1
        assert db.execute("UPDATE Cache SET access_time = 1 WHERE key = ?", (big,)).rowcount == 1
    with Cache(b) as cache:
        before = {e.key for e in cache.entries()}
        report = cache.gc(size_limit=cache.volume() - 1)  # down to the limit once the big blob is gone
        left = {e.key for e in cache.entries()}
    # evicting the note evicts its record with it: never a fetched record left looking like one made here, nor a
    # note without its record
    gone = before - left
    assert gone == {note, f"decision/{key}", big} and report.evicted == 3
    assert all(noted_record(k) in left for k in left if is_signer_note(k))
    assert all(signer_key(k) in left for k in left if k.startswith(("decision/", "gate/")) and signer_key(k) in before)


@pytest.fixture(scope="module")
def root_machine_a(tmp_path_factory: pytest.TempPathFactory, team_key: KeyPair) -> tuple[Path, Path, list[str]]:
    """The root manifest on machine A: its measured decisions and every winner's gate result, cached."""
    base = tmp_path_factory.mktemp("root_a")
    project = root_project(base / "root", team_key.public.line)
    return project, base / "cache", measured_root(project, base / "cache")


def test_a_fresh_cache_resolves_the_root_manifests_decisions_from_the_remote(
    remote: Remote,
    root_machine_a: tuple[Path, Path, list[str]],
    team_key: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project, a, keys = root_machine_a
    push(project, a, remote.url, team_key)
    b = tmp_path / "b"
    code, out = _cli(capsys, *LOCKED, "-m", str(project), "--cache-dir", str(b), "--remote-cache", remote.url, "--json")
    assert code == 0, out
    assert f"{len(keys)} decisions fetched" in out and not _remote_warnings(out), out
    with Cache(b) as cache:
        assert all(cache.peek(f"decision/{k}") is not None for k in keys)
    code, out = _cli(
        capsys,
        "check",
        "--locked",
        "-m",
        str(project),
        "--cache-dir",
        str(tmp_path / "c"),
        "--remote-cache",
        remote.url,
    )
    assert code == 0, out


def test_read_only_by_default_and_writing_needs_the_key(
    remote: Remote,
    team_key: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    key = measured_tiny(project, tmp_path / "a")
    monkeypatch.setenv("R1BUILD_SIGNING_KEY", team_key.private.raw_base64())
    # a key in the environment is not permission: without --remote-write nothing is published
    code, out = _cli(
        capsys,
        "lock",
        "-m",
        str(project),
        "--offline",
        "--no-gpu",
        "--cache-dir",
        str(tmp_path / "a"),
        "--remote-cache",
        remote.url,
    )
    assert code == 0, out
    store = open_store(remote.url, timeout=5, header=None)
    assert store.get(record_key("decision", key)) is None
    monkeypatch.delenv("R1BUILD_SIGNING_KEY")
    code, out = _cli(
        capsys,
        "resolve",
        "--refresh",
        "--offline",
        "--no-gpu",
        "-m",
        str(project),
        "--cache-dir",
        str(tmp_path / "a"),
        "--remote-cache",
        remote.url,
        "--remote-write",
    )
    assert code == 2 and "needs the team's signing key" in out and "Traceback" not in out, out
    monkeypatch.setenv("R1BUILD_REMOTE_WRITE", "1")
    code, out = _cli(
        capsys, "cache", "push", "-m", str(project), "--cache-dir", str(tmp_path / "a"), "--remote-cache", remote.url
    )
    assert code == 2 and "needs the team's signing key" in out, out
    assert store.get(record_key("decision", key)) is None
    store.close()


def test_a_run_that_may_write_publishes_what_it_stores(
    remote: Remote,
    team_key: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    monkeypatch.setenv("R1BUILD_SIGNING_KEY", team_key.private.raw_base64())
    monkeypatch.setenv("R1BUILD_REMOTE_WRITE", "1")
    code, out = _cli(
        capsys,
        "lock",
        "-m",
        str(project),
        "--offline",
        "--no-gpu",
        "--cache-dir",
        str(tmp_path / "a"),
        "--remote-cache",
        remote.url,
    )
    assert code == 0 and "1 records published" in out, out  # the baseline's gate result (no GPU: no decision)
    monkeypatch.delenv("R1BUILD_REMOTE_WRITE")
    monkeypatch.delenv("R1BUILD_SIGNING_KEY")
    code, out = _cli(
        capsys, *LOCKED, "-m", str(project), "--cache-dir", str(tmp_path / "b"), "--remote-cache", remote.url
    )
    assert code == 0 and "1 gate results fetched" in out, out


def _tamper(remote, key: str, change) -> None:  # type: ignore[no-untyped-def]
    store = open_store(remote.url, timeout=5, header=None)
    raw = store.get(key)
    assert raw is not None
    if remote.backend == "http":  # as a user with write access to the server's disk would
        remote.path_of(key).write_bytes(change(raw))
    else:
        store.put(key, change(raw))
    store.close()


def test_a_tampered_object_is_detected_reported_and_never_used(
    remote: Remote,
    seeded: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project, key = seeded
    lock_before = (project / "kernels.lock").read_bytes()
    store = open_store(remote.url, timeout=5, header=None)
    raw = store.get(record_key("decision", key))
    store.close()
    assert raw is not None
    decision = from_json(Decision, raw.split(b"\n", 2)[2])
    assert decision.winner is not None
    # the source blob: one byte changed; the decision: its time improved, digest line recomputed, signature kept
    _tamper(remote, blob_key(decision.winner.source), lambda raw: raw.replace(b"2.0f", b"3.0f"))
    timing = decision.results[0].timing
    assert timing is not None
    forged = replace(decision, results=[replace(decision.results[0], timing=replace(timing, median_us=0.1))])
    _tamper(
        remote,
        record_key("decision", key),
        lambda raw: digest_bytes(to_json(forged)).encode() + b"\n" + raw.split(b"\n", 2)[1] + b"\n" + to_json(forged),
    )
    b = tmp_path / "b"
    code, out = _cli(capsys, *LOCKED, "-m", str(project), "--cache-dir", str(b), "--remote-cache", remote.url)
    assert code == 0, out
    # one line; the locked source is the manifest's own file, so the remote's (tampered) blob is not asked for:
    # verify --remote below finds it
    (refused,) = _remote_warnings(out)
    assert "decision" in refused and "is refused" in refused and "does not match" in refused, out
    with Cache(b) as cache:
        assert cache.peek(f"decision/{key}") is None
        fetched_blob = cache.get_blob(decision.winner.source)
    assert fetched_blob is None or digest_bytes(fetched_blob) == decision.winner.source
    # the winner came from the manifest's own file, verified by digest; nothing local changed
    assert (project / "kernels.lock").read_bytes() == lock_before
    code, out = _cli(capsys, "cache", "verify", "--remote", "-m", str(project), "--remote-cache", remote.url)
    assert code == 1, out
    assert "its bytes do not match its digest" in out and "refused" in out


def test_unsigned_and_untrusted_decisions_are_refused_and_the_build_goes_on(
    remote: Remote,
    team_key: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stranger = KeyPair.generate()
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    key = measured_tiny(project, tmp_path / "a")
    push(project, tmp_path / "a", remote.url, stranger)  # signed, by a key nobody trusts
    b = tmp_path / "b"
    code, out = _cli(capsys, *LOCKED, "-m", str(project), "--cache-dir", str(b), "--remote-cache", remote.url)
    assert code == 0, out
    warnings = _remote_warnings(out)
    assert len(warnings) == 2, out  # the decision and the gate result, one line each
    assert all("is refused" in w and f"signed by key {stranger.private.key_id}" in w for w in warnings), out
    with Cache(b) as cache:
        assert cache.peek(f"decision/{key}") is None
    # unsigned: the signature line empty
    _tamper(remote, record_key("decision", key), lambda raw: raw.split(b"\n", 1)[0] + b"\n\n" + raw.split(b"\n", 2)[2])
    code, out = _cli(
        capsys, *LOCKED, "-m", str(project), "--cache-dir", str(tmp_path / "c"), "--remote-cache", remote.url
    )
    assert code == 0, out
    assert any("unsigned" in w for w in _remote_warnings(out)), out


def test_a_project_that_trusts_no_key_uses_nothing_from_a_remote(
    remote: Remote, seeded: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project, key = seeded
    trust_nothing(project)
    code, out = _cli(
        capsys, *LOCKED, "-m", str(project), "--cache-dir", str(tmp_path / "b"), "--remote-cache", remote.url
    )
    assert code == 0, out
    (warning,) = _remote_warnings(out)  # one line, not one per record
    assert "trusted-keys is empty" in warning, out
    with Cache(tmp_path / "b") as cache:
        assert cache.peek(f"decision/{key}") is None


def _layer(url: str, key: KeyPair) -> RemoteLayer:
    return RemoteLayer(
        open_store(url, timeout=10, header=None), trusted=TrustedKeys.of([key.public]), signing_key=key.private
    )


def test_eight_concurrent_writers_of_the_same_and_different_entries(
    remote: Remote, seeded: tuple[Path, str], team_key: KeyPair, tmp_path: Path
) -> None:
    _, key = seeded
    with Cache(tmp_path / "a") as cache:
        decision = cache.get_decision(key)
        assert decision is not None
        payload = to_json(decision)
        others = {f"{i:064x}": to_json(replace(decision, key=f"{i:064x}")) for i in range(8)}
        for k, p in others.items():
            cache.put_raw(f"decision/{k}", p)
        errors: list[BaseException] = []
        start = threading.Barrier(16)

        def write(k: str, p: bytes) -> None:
            layer = _layer(remote.url, team_key)
            try:
                start.wait()
                for _ in range(3):
                    assert layer.publish(cache, "decision", k, p)
                assert layer.down is None, layer.down
            except BaseException as exc:  # collected for the main thread
                errors.append(exc)
            finally:
                layer.close()

        threads = [threading.Thread(target=write, args=(key, payload)) for _ in range(8)]
        threads += [threading.Thread(target=write, args=item) for item in others.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors, errors
    reader = _layer(remote.url, team_key)
    signer = team_key.public.key_id  # each record comes with the id of the trusted key that signed it
    assert reader.record("decision", key) == (payload, signer)
    assert all(reader.record("decision", k) == (p, signer) for k, p in others.items())
    checked, problems = reader.audit([key, *others])
    reader.close()
    assert not problems and checked >= 10


def _one_warning_and_locked(
    capsys: pytest.CaptureFixture[str], project: Path, cache_dir: Path, url: str, *, within: float
) -> str:
    layer.FIRST_ANSWER_S = GRACE_S  # this run's time is the point: the product's grace (the fixture restores its own)
    try:
        t0 = time.monotonic()
        code, out = _cli(capsys, *LOCKED, "-m", str(project), "--cache-dir", str(cache_dir), "--remote-cache", url)
        elapsed = time.monotonic() - t0
    finally:
        layer.FIRST_ANSWER_S = PATIENT_S
    assert code == 0, out
    assert len(_remote_warnings(out)) == 1, out
    assert elapsed < within, f"{elapsed:.1f} s"
    return _remote_warnings(out)[0]


def test_a_remote_down_at_start_costs_one_warning(
    team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    measured_tiny(project, tmp_path / "a")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once this closes
    warning = _one_warning_and_locked(capsys, project, tmp_path / "b", f"http://127.0.0.1:{port}/team", within=30)
    assert "is unavailable" in warning and "going on without it" in warning
    trust_nothing(project)  # a project that trusts no key: still one line (the remote is not even asked)
    warning = _one_warning_and_locked(capsys, project, tmp_path / "c", f"http://127.0.0.1:{port}/team", within=30)
    assert "trusted-keys is empty" in warning


def test_a_slow_remote_costs_one_timeout(
    team_key: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line, timeout_s=0.5)
    measured_tiny(project, tmp_path / "a")
    with socket.socket() as server:  # accepts connections, never answers
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        port = server.getsockname()[1]
        warning = _one_warning_and_locked(capsys, project, tmp_path / "b", f"http://127.0.0.1:{port}/team", within=30)
    assert "no answer within 0.5 s" in warning


class _Trickler:
    """A server on 127.0.0.1 that answers every request a byte at a time, each well within the client's
    timeout: the head (``where="head"``: a long header line) or the body (``"body"``), 2000 bytes over about
    20 s in all. A context manager; its threads end when it closes."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve)]

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            worker = threading.Thread(target=self._answer, args=(conn,))
            self._threads.append(worker)
            worker.start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                head = b"HTTP/1.1 200 OK\r\n"
                if self.where == "head":
                    conn.sendall(head + b"X-Pad: ")
                else:
                    conn.sendall(head + b"Content-Length: 2000\r\n\r\n")
                for _ in range(2000):
                    if self._stop.wait(0.01):
                        return
                    conn.sendall(b"a")
                if self.where == "head":
                    conn.sendall(b"\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                return

    def __enter__(self) -> _Trickler:
        self._threads[0].start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join()
        self._sock.close()


@pytest.mark.parametrize("backend", ["http", "s3"])
@pytest.mark.parametrize("where", ["head", "body"])
def test_a_remote_that_trickles_its_answer_costs_one_timeout(
    team_key: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
    backend: str,
) -> None:
    """Each byte comes within the timeout, so the socket's timeout alone never fires: the request as a whole
    must (before, a 2000-byte answer took 20 s, and a longer one held the build for as long as the server
    liked). For s3 the trickler is the S3 endpoint boto3 is pointed at."""
    if backend == "s3":
        pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    project = tiny_project(tmp_path / "tiny", team_key.public.line, timeout_s=0.5)
    measured_tiny(project, tmp_path / "a")
    with _Trickler(where) as server:
        url = f"http://127.0.0.1:{server.port}/team"
        if backend == "s3":
            s3_endpoint_at(monkeypatch, server.port)
            url = "s3://team-cache/team"
        warning = _one_warning_and_locked(capsys, project, tmp_path / "b", url, within=8)
    assert "is unavailable" in warning and ("no answer within" in warning or "came slower than" in warning)


def test_a_forbidden_remote_and_the_token(
    nginx: Nginx, team_key: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    measured_tiny(project, tmp_path / "a")
    warning = _one_warning_and_locked(capsys, project, tmp_path / "b", f"{nginx.url}/forbidden", within=30)
    assert "HTTP 403" in warning
    url = f"{nginx.url}/auth/team"
    monkeypatch.setenv("R1BUILD_REMOTE_TOKEN", "wrong")
    monkeypatch.setenv("R1BUILD_SIGNING_KEY", team_key.private.raw_base64())
    code, out = _cli(
        capsys, "cache", "push", "-m", str(project), "--cache-dir", str(tmp_path / "a"), "--remote-cache", url
    )
    assert code == 1 and "HTTP 403" in out and "Traceback" not in out, out
    monkeypatch.setenv("R1BUILD_REMOTE_TOKEN", TOKEN)
    code, out = _cli(
        capsys, "cache", "push", "-m", str(project), "--cache-dir", str(tmp_path / "a"), "--remote-cache", url
    )
    assert code == 0 and "published 2 records" in out, out
    assert TOKEN not in out


def _partial_put(port: int, path: str, total: int, sent: int) -> socket.socket:
    """A PUT that announces ``total`` bytes and sends ``sent`` of them (the connection stays open)."""
    conn = socket.create_connection(("127.0.0.1", port))
    head = (
        f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {total}\r\n"
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    conn.sendall(head.encode() + b"x" * sent)
    return conn


def test_a_server_killed_mid_upload_exposes_no_object_and_loses_nothing(
    team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if nginx_binary() is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light; .ci/run does)")
    server = Nginx(tmp_path / "nginx").start()
    try:
        project = tiny_project(tmp_path / "tiny", team_key.public.line)
        key = measured_tiny(project, tmp_path / "a")
        url = f"{server.url}/team"
        victim = record_key("decision", key)
        conn = _partial_put(server.port, f"/team/{victim}", 4 << 20, 1 << 20)
        time.sleep(0.3)
        server.kill()
        conn.close()
        assert not (server.root / "team" / victim).exists()  # nginx keeps a body in its temporary folder
        # the remote is down now: a machine whose cache misses goes on from the lock and the manifest's sources
        warning = _one_warning_and_locked(capsys, project, tmp_path / "b", url, within=30)
        assert "is unavailable" in warning
        with Cache(tmp_path / "a") as cache:
            assert cache.get_decision(key) is not None and not cache.audit()
        server.start()  # back: the torn upload left nothing behind, the remote is just empty
        store = open_store(url, timeout=5, header=None)
        assert store.get(victim) is None
        store.close()
    finally:
        server.stop()


def test_an_s3_upload_cut_mid_body_exposes_no_object(moto: Moto, tmp_path: Path) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=moto.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    whole = _partial_put(moto.port, "/team-cache/cut/whole", 4096, 4096)  # the control: the same PUT, complete
    assert whole.recv(4096).startswith(b"HTTP/1.1 200")
    whole.close()
    conn = _partial_put(moto.port, "/team-cache/cut/torn", 1 << 20, 1 << 18)
    time.sleep(0.2)
    conn.close()  # the writer dies mid-body
    time.sleep(0.2)
    listed = [o["Key"] for o in client.list_objects_v2(Bucket="team-cache", Prefix="cut/").get("Contents", [])]
    assert listed == ["cut/whole"]
    client.close()


def test_a_remote_that_answers_garbage_is_a_miss(
    team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    measured_tiny(project, tmp_path / "a")
    body = b"\x00garbage\xff" * 100
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    with FaultServer(lambda request: reply) as server:
        code, out = _cli(
            capsys,
            *LOCKED,
            "-m",
            str(project),
            "--cache-dir",
            str(tmp_path / "b"),
            "--remote-cache",
            f"http://127.0.0.1:{server.port}/team",
        )
    assert code == 0, out
    assert _remote_warnings(out) and all("is corrupt" in w for w in _remote_warnings(out)), out


def test_notes_go_to_the_sink_not_stdout(remote: Remote, seeded: tuple[Path, str], tmp_path: Path) -> None:
    project, key = seeded
    seen: list[Note] = []
    from r1build.cache.remote import attach_remote

    with (
        sink(lambda e: seen.append(e) if isinstance(e, Note) else None),
        attach_remote(Cache(tmp_path / "b"), load_manifest(project / "kernels.toml"), url=remote.url) as cache,
    ):
        assert cache.get_decision(key) is not None
        assert cache.get_decision(key) is not None  # the second read is local
    assert [n.message for n in seen] == [f"remote cache {remote.url}: 1 decisions fetched"]


def test_a_server_dying_during_a_blob_upload_never_gets_the_decision(
    team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The publisher's side of a crash: the connection drops in the middle of a blob's body; the decision that
    names the blob is never sent, the run goes on with one warning, and the local cache keeps everything."""
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    key = measured_tiny(project, tmp_path / "a")

    def answer(request: bytes) -> bytes | None:
        if request.startswith(b"HEAD"):
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        return None  # a PUT: its first bytes arrive, then the server is gone (the connection drops unanswered)

    with FaultServer(answer) as server, Cache(tmp_path / "a") as cache:
        layer = _layer(f"http://127.0.0.1:{server.port}/team", team_key)
        notes: list[Note] = []
        with sink(lambda e: notes.append(e) if isinstance(e, Note) else None):
            decision = cache.get_decision(key)
            assert decision is not None
            layer.stored(cache, "decision", key, to_json(decision))
            layer.close()
        assert cache.get_decision(key) is not None and not cache.audit()
    seen = server.requests
    puts = [s for s in seen if s.startswith("PUT")]
    assert puts and all("/blob/" in p for p in puts), seen  # the decision's PUT never happened
    assert layer.down is not None
    assert [n.level for n in notes] == ["warning"] and "is unavailable" in notes[0].message, notes


def test_a_measuring_run_that_may_write_publishes_its_decision_after_its_blobs(
    remote: Remote,
    team_key: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.resolve.resolve_support import install_gpu_double

    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    install_gpu_double(monkeypatch, reject=lambda c: False, time_us=lambda c: 2.5)
    monkeypatch.setenv("R1BUILD_SIGNING_KEY", team_key.private.raw_base64())
    code, out = _cli(
        capsys,
        "resolve",
        "--offline",
        "-m",
        str(project),
        "--cache-dir",
        str(tmp_path / "a"),
        "--remote-cache",
        remote.url,
        "--remote-write",
    )
    assert code == 0 and "records published" in out and "blobs uploaded" in out, out
    monkeypatch.undo()  # machine B: no GPU (the double is gone), no key, no endpoint
    for var in ("R1BUILD_SIGNING_KEY", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_BASE_URL", "NVIDIA_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("R1BUILD_REMOTE_CACHE", remote.url)
    for name, value in remote.moto.env().items() if remote.moto else ():
        monkeypatch.setenv(name, value)
    code, out = _cli(capsys, *LOCKED, "-m", str(project), "--cache-dir", str(tmp_path / "b"), "--json")
    assert code == 0 and "1 decisions fetched" in out and not _remote_warnings(out), out
    reader = _layer(remote.url, team_key)
    checked, problems = reader.audit([e.key for e in read_lock(project / "kernels.lock").kernel])  # type: ignore[union-attr]
    reader.close()
    assert checked >= 2 and not problems


def test_a_trusted_signature_on_a_decision_that_contradicts_the_manifest_is_not_enough(
    remote: Remote, team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The team's key signed (a compromised machine, a bug) a decision whose winner claims to be the baseline
    but is other code, judged by the gate alone: its signature verifies, and it is still refused, so machine B
    gates the real baseline and writes a lock that every later command accepts."""
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    base = Candidate((project / "scale.cu").read_text(encoding="utf-8"), Origin("baseline", "scale.cu"))
    other = Candidate(base.source.replace("2.0f", "3.0f"), Origin("baseline", "scale.cu"))
    assert other.digest != base.digest
    key = plant_decision(project, tmp_path / "a", other, Result(candidate=other.digest, arch="sm_90", status="passed"))
    assert push(project, tmp_path / "a", remote.url, team_key) == (1, 0)
    b = ("--cache-dir", str(tmp_path / "b"), "--remote-cache", remote.url)
    code, out = _cli(capsys, "resolve", "--no-gpu", "--offline", "-m", str(project), *b)
    assert code == 0, out
    assert "1 decisions fetched" in out, out  # the signature verified
    (refused,) = [line for line in out.splitlines() if "is refused" in line]
    assert key[:16] in refused and "is not the digest of scale.cu" in refused, out
    entry = read_lock(project / "kernels.lock").entry("scale", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and entry.winner == base.digest
    code, out = _cli(capsys, *LOCKED, "--offline", "-m", str(project), *b)
    assert code == 0, out


def test_an_s3_endpoint_that_is_down_never_shows_its_password_and_verify_says_exit_1(
    team_key: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """botocore quotes the endpoint URL whole in its errors, so a user:password in AWS_ENDPOINT_URL reached the
    warning; and `cache verify --remote` raised a traceback when the listing failed (it fails as it is read)."""
    pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    measured_tiny(project, tmp_path / "a")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once this closes
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://bob:s3cretpw@127.0.0.1:{port}",
    }.items():
        monkeypatch.setenv(name, value)
    warning = _one_warning_and_locked(capsys, project, tmp_path / "b", "s3://team-cache/team", within=30)
    assert "is unavailable" in warning and "s3cretpw" not in warning and "***@" in warning, warning
    code, out = _cli(capsys, "cache", "verify", "--remote", "-m", str(project), "--remote-cache", "s3://team-cache/t")
    assert code == 1 and "is unavailable" in out and "Traceback" not in out and "s3cretpw" not in out, out


def test_a_signed_decision_that_contradicts_itself_is_corrupt_and_never_stored(
    remote: Remote, team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Signed by the team's key, but its winner counts as validated on a GPU with no time measured: r1build
    never records that, so it is a corrupt object (one warning), not kept in the local cache, and verify names
    it."""
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    other = Candidate(
        (project / "scale.cu").read_text(encoding="utf-8").replace("2.0f", "3.0f"),
        Origin("generated", model="m", round=0, sample=0),
    )
    passed = Result(candidate=other.digest, arch="sm_90", status="passed", stage="evaluate")
    key = plant_decision(project, tmp_path / "a", other, passed, measured=True, device="H200")
    layer = _layer(remote.url, team_key)
    seen: list[Note] = []
    with sink(lambda e: seen.append(e) if isinstance(e, Note) else None), Cache(tmp_path / "a") as cache:
        assert layer.push(cache) == (0, 0)  # `cache push` does not sign it
        layer.close()
    assert any("not publishing decision" in n.message and "no time measured" in n.message for n in seen), seen
    with Cache(tmp_path / "a") as cache:  # someone else's r1build did (or the team's key was used by hand)
        forged = RemoteLayer(open_store(remote.url, timeout=10, header=None), trusted=TrustedKeys.of([team_key.public]))
        payload = cache.peek(f"decision/{key}")
        assert payload is not None
        signature = sign(signed_message("decision", key, payload), team_key.private)
        body = f"{digest_bytes(payload)}\n{signature}\n".encode() + payload
        forged.store.put(record_key("decision", key), body)
        forged.close()
    b = ("--cache-dir", str(tmp_path / "b"), "--remote-cache", remote.url)
    code, out = _cli(capsys, "resolve", "--no-gpu", "--offline", "-m", str(project), *b)
    assert code == 0, out
    (corrupt,) = _remote_warnings(out)  # once, though the run looks the key up three times
    assert "is corrupt" in corrupt and "validated on a GPU, but no time measured" in corrupt, out
    with Cache(tmp_path / "b") as cache:
        assert cache.peek(f"decision/{key}") is None
    entry = read_lock(project / "kernels.lock").entry("scale", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and (entry.provenance, entry.validation) == ("baseline", "unvalidated")
    code, out = _cli(capsys, "cache", "verify", "--remote", "-m", str(project), "--remote-cache", remote.url)
    assert code == 1 and "no time measured" in out, out


def test_a_lock_alone_cannot_bring_code_from_the_remote(
    nginx: Nginx, team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock (from a pull request, say) names a generated winner by digest; whoever may write to the remote puts
    bytes under that digest. The source comes from the remote only when a trusted decision of the key records
    that winner as validated: else the locked build fails naming it, as for any missing source."""
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    generated = Candidate(
        (project / "scale.cu").read_text(encoding="utf-8").replace("2.0f", "2.0f * 1.0f"),
        Origin("generated", model="m", round=0, sample=0),
    )
    timed = measured_result(generated.digest, 1.0)
    plant_decision(
        project, tmp_path / "a", generated, timed, measured=True, device="NVIDIA H200", checks=CHECKS_VERSION
    )
    assert main(["lock", "-m", str(project), "--offline", "--no-gpu", "--cache-dir", str(tmp_path / "a")]) == 0
    entry = read_lock(project / "kernels.lock").entry("scale", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and entry.provenance == "generated" and entry.winner == generated.digest
    capsys.readouterr()

    bare = f"{nginx.url}/blob-only"  # the bytes under the digest, and no decision
    store = open_store(bare, timeout=5, header=None)
    store.put(blob_key(generated.source_digest), generated.source.encode())
    store.close()
    code, out = _cli(
        capsys, *LOCKED, "--offline", "-m", str(project), "--cache-dir", str(tmp_path / "b"), "--remote-cache", bare
    )
    assert code != 0 and "a lock alone cannot bring code from a remote" in out, out
    with Cache(tmp_path / "b") as cache:
        assert cache.peek(f"blob/{generated.source_digest}") is None

    signed = f"{nginx.url}/signed"  # the team's signed decision names it: the remote's bytes are used
    assert push(project, tmp_path / "a", signed, team_key)[0] >= 1
    code, out = _cli(
        capsys, *LOCKED, "--offline", "-m", str(project), "--cache-dir", str(tmp_path / "c"), "--remote-cache", signed
    )
    assert code == 0, out
    # and the bytes under the signed decision's digest are still checked: altered, they are a corrupt blob
    blob_file = nginx.root / "signed" / blob_key(generated.source_digest)
    blob_file.write_bytes(blob_file.read_bytes().replace(b"1.0f", b"9.0f"))
    code, out = _cli(
        capsys, *LOCKED, "--offline", "-m", str(project), "--cache-dir", str(tmp_path / "d"), "--remote-cache", signed
    )
    assert code != 0 and any("is corrupt (its bytes do not match its digest)" in w for w in _remote_warnings(out)), out
