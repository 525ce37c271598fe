"""A hostile remote cache: a server that answers with objects crafted to hurt the reader, not just garbage.

Fast: a thread-served socket on 127.0.0.1 (no nvcc, no resolve), the remote layer read directly.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cache.remote import RemoteLayer, RemoteUnavailable, blob_key, open_store, record_key
from r1build.cache.storage import Storage
from r1build.keys import digest_bytes
from r1build.records import Result, to_json
from r1build.trust.signing import KeyPair, TrustedKeys
from tests.cache.remote.remote_servers import FaultServer
from tests.cache.remote.remote_support import s3_endpoint_at

DEEP = b"[" * 100_000 + b"]" * 100_000
"""JSON nested far deeper than the parser recurses: ``json.loads`` raises RecursionError, not ValueError."""


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body


def test_a_record_nested_too_deeply_is_corrupt_not_a_crash(team_key: KeyPair, tmp_path: Path) -> None:
    """Whoever can write to the remote (no key needed: the payload is parsed before its signature is checked)
    served a record of deeply nested JSON under its right digest: the RecursionError ended every build that
    asked for it, with a traceback, and `cache verify --remote` too. It is a corrupt object, a miss."""
    record = digest_bytes(DEEP).encode() + b"\nunsigned\n" + DEEP
    key = "a" * 64
    with FaultServer(lambda request: _answer(record)) as server:
        url = f"http://127.0.0.1:{server.port}/team"
        layer = RemoteLayer(open_store(url, timeout=5, header=None), trusted=TrustedKeys.of([team_key.public]))
        try:
            assert layer.record("decision", key) is None
            assert layer.record("gate", key) is None
            assert layer.counts["corrupt"] == 2 and layer.down is None
            _, problems = layer.audit([key])
            assert [p.key for p in problems][:1] == [record_key("decision", key)]
            assert "nested too deeply" in problems[0].reason
        finally:
            layer.close()
    with Cache(tmp_path / "c") as cache:  # a planted cache folder: the same bytes stored locally are corrupt too
        cache._put(f"decision/{key}", DEEP)
        cache._put("json/notes/x", DEEP)
        assert cache.get_decision(key) is None and cache.get_json("notes", "x") is None
        assert {bad.key for bad in cache.audit()} == {f"decision/{key}", "json/notes/x"}


@pytest.mark.parametrize("status", ["302 Found", "307 Temporary Redirect"])
def test_an_s3_endpoint_that_redirects_is_unavailable_not_a_crash(
    status: str, team_key: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An s3:// remote whose endpoint answers with a redirect naming no region (a login page, a proxy): botocore
    asks the bucket's region with a HeadBucket, redirected too, and so on until RecursionError, which ended the
    build with a traceback. It is an unavailable remote: one warning, then the run goes on without it."""
    pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    reply = f"HTTP/1.1 {status}\r\nLocation: http://elsewhere.invalid/x\r\nContent-Length: 0\r\n"
    with FaultServer(lambda request: reply.encode() + b"Connection: close\r\n\r\n") as server:
        s3_endpoint_at(monkeypatch, server.port)
        store = open_store("s3://team-cache/team", timeout=5, header=None)
        with pytest.raises(RemoteUnavailable, match="redirects that never end"):
            list(store.keys("r1build-v1/") or ())
        layer = RemoteLayer(store, trusted=TrustedKeys.of([team_key.public]))
        try:
            assert layer.blob("a" * 64) is None and layer.record("decision", "a" * 64) is None
            assert layer.down is not None and "redirects that never end" in layer.down
        finally:
            layer.close()
    assert any(blob_key("a" * 64) in line for line in server.requests)  # asked once, then the remote was off


class _Layer:
    """A remote layer that has one verified gate result, signed by ``signer``."""

    def __init__(self, payload: bytes, signer: str) -> None:
        self.payload, self.signer = payload, signer

    def blob(self, digest: str) -> bytes | None:
        return None

    def record(self, kind: str, key: str, *, wait: bool = True) -> tuple[bytes, str] | None:
        return (self.payload, self.signer) if kind == "gate" else None

    def stored(self, cache: object, kind: str, key: str, payload: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_run_stopped_while_keeping_a_fetched_record_never_leaves_it_unsigned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetched record was stored, then its signer noted: a run stopped in between (Ctrl-C, killed) left the
    record with no note, that is made here, trusted even after its key left trusted-keys. The note comes first."""
    payload = to_json(Result(candidate="c" * 64, arch="sm_90", status="passed"))
    key = "g" * 64
    with Cache(tmp_path / "c") as cache:
        cache.remote = _Layer(payload, "0123456789abcdef")
        real = Storage._put
        writes: list[str] = []

        def put(self: Storage, full: str, data: bytes, digest: str | None = None) -> None:
            writes.append(full)
            if len(writes) == 2:
                raise KeyboardInterrupt  # stopped between the two writes
            real(self, full, data, digest)

        monkeypatch.setattr(Storage, "_put", put)
        with pytest.raises(KeyboardInterrupt):
            cache.get_gate(key)
        monkeypatch.setattr(Storage, "_put", real)
        cache.remote = None
        cache.trusted = TrustedKeys.of([])
        assert cache.get_gate(key) is None  # not there, or there and refused for its signer: never "made here"
        assert cache.signer_of(f"gate/{key}") is not None or cache.peek(f"gate/{key}") is None


def test_a_host_name_whose_lookup_hangs_costs_the_timeout_not_the_resolver_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name server that does not answer (a machine without network, a broken resolver): the lookup of the
    remote's host name is bounded by the remote's timeout like the rest of a request, not by the resolver's own
    retries (tens of seconds, before any socket the watchdog could shut exists). A name that resolves connects
    as before."""
    real = socket.getaddrinfo
    release = threading.Event()

    def lookup(host: str, *args: object, **kwargs: object) -> object:
        if host == "cache.hangs.test":
            release.wait(30)  # the resolver's retries over name servers that never answer
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    store = open_store("http://cache.hangs.test:8080/team", timeout=0.5, header=None)
    t0 = time.monotonic()
    # the lookup's own bound or the request's watchdog, whichever says it first: both are the timeout
    with pytest.raises(RemoteUnavailable, match=r"no answer within 0\.5 s"):
        store.get("r1build-v1/blob/" + "0" * 64)
    assert time.monotonic() - t0 < 3
    release.set()
    store.close()
    with FaultServer(lambda first: _answer(b"x")) as server:
        store = open_store(f"http://localhost:{server.port}/team", timeout=5, header=None)
        assert store.get("r1build-v1/blob/" + "0" * 64) == b"x"  # through the bounded lookup
        store.close()
