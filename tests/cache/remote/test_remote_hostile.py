"""A hostile remote cache: a server that answers with objects crafted to hurt the reader, not just garbage.

Fast: a thread-served socket on 127.0.0.1 (no nvcc, no resolve), the remote layer read directly.
"""

from __future__ import annotations

import gc
import re
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


def _listing(keys: list[str], token: str | None) -> bytes:
    """A ListObjectsV2 page holding ``keys`` (each as an object), saying more follow after ``token`` when given."""
    items = "".join(f"<Contents><Key>{k}</Key><Size>1</Size></Contents>" if k else "<Contents/>" for k in keys)
    more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>" if token else ""
    return _answer(
        b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        + (more or "<IsTruncated>false</IsTruncated>").encode()
        + items.encode()
        + b"</ListBucketResult>"
    )


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\nConnection: close\r\n\r\nxyz", "not S3's (ValueError"),
        (
            b"HTTP/1.1 200 OK\r\nLast-Modified: yesterday\r\nContent-Length: 3\r\nConnection: close\r\n\r\nxyz",
            "not S3's (ValueError",
        ),
    ],
    ids=["content-length-not-a-number", "date-not-a-date"],
)
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_an_s3_answer_botocore_cannot_read_is_unavailable_not_a_crash(
    reply: bytes, said: str, team_key: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore parses an answer's headers by the service's model and trusts them: a ``Content-Length: abc`` raised
    ValueError out of `cache verify --remote` (and of any build whose request was not the run's first), a traceback.
    It is an answer that is not S3's: the remote is unavailable, one warning."""
    pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    with FaultServer(lambda request: reply) as server:
        s3_endpoint_at(monkeypatch, server.port)
        store = open_store("s3://team-cache/team", timeout=5, header=None)
        with pytest.raises(RemoteUnavailable, match=re.escape(said)):
            store.get(blob_key("a" * 64))
        with pytest.raises(RemoteUnavailable, match=re.escape(said)):
            store.head(blob_key("a" * 64))
        layer = RemoteLayer(store, trusted=TrustedKeys.of([team_key.public]))
        try:  # the run's first request, then one that is not: each a miss, the remote off once
            assert layer.blob("a" * 64) is None and layer.blob("b" * 64) is None
            assert layer.down is not None and said in layer.down
        finally:
            layer.close()
    gc.collect()  # botocore leaves the connection of an answer it could not parse to the collector: collected here


def test_an_s3_listing_that_never_ends_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint whose every listing page says more follow, under a new continuation token each time: `cache
    verify --remote` read it for ever. A listing is read for so many pages at most, then the remote is
    unavailable; one that ends within them is read whole."""
    pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    from r1build.cache.remote import s3

    monkeypatch.setattr(s3, "_MAX_PAGES", 5)
    pages = iter(range(10**6))
    with FaultServer(lambda request: _listing(["team/r1build-v1/blob/x"], f"t{next(pages)}")) as server:
        s3_endpoint_at(monkeypatch, server.port)
        store = open_store("s3://team-cache/team", timeout=5, header=None)
        t0 = time.monotonic()
        with pytest.raises(RemoteUnavailable, match="goes on past 5 pages"):
            list(store.keys("r1build-v1/") or ())
        store.close()
        assert time.monotonic() - t0 < 3 and len(server.requests) == 6
    left = iter([1, 2, 3, 0])

    def ending(request: bytes) -> bytes:
        n = next(left)
        return _listing([f"team/r1build-v1/blob/{n}"], f"t{n}" if n else None)

    with FaultServer(ending) as server:
        s3_endpoint_at(monkeypatch, server.port)
        store = open_store("s3://team-cache/team", timeout=5, header=None)
        names = list(store.keys("r1build-v1/") or ())
        store.close()
    assert names == [f"r1build-v1/blob/{n}" for n in (1, 2, 3, 0)]


def test_an_s3_listing_entry_without_a_key_is_no_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing page whose object names no key raised KeyError out of `cache verify --remote` (where the listing is
    not the run's first request). It is a listing that is not S3's: the remote is unavailable."""
    pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    with FaultServer(lambda request: _listing(["team/r1build-v1/blob/x", ""], None)) as server:
        s3_endpoint_at(monkeypatch, server.port)
        store = open_store("s3://team-cache/team", timeout=5, header=None)
        with pytest.raises(RemoteUnavailable, match="an object without a key"):
            list(store.keys("r1build-v1/") or ())
        store.close()


def test_an_s3_listing_that_trickles_costs_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing page sent a byte at a time, each within botocore's read timeout: the listing took as long as the
    server liked (seconds a byte), not the remote's timeout. Each page must come within the timeout (plus its bytes
    at the least rate)."""
    pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    from r1build.cache.remote import s3

    monkeypatch.setattr(s3, "_PAGE_BYTES", 0)
    page = _listing(["team/r1build-v1/blob/x"], None)
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for byte in page:
                if stop.wait(0.05):
                    return
                conn.sendall(bytes([byte]))

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        s3_endpoint_at(monkeypatch, listener.getsockname()[1])
        store = open_store("s3://team-cache/team", timeout=0.5, header=None)
        t0 = time.monotonic()
        with pytest.raises(RemoteUnavailable, match=r"no answer within 0\.5 s"):
            list(store.keys("r1build-v1/") or ())
        assert time.monotonic() - t0 < 1.5
        store.close()
    finally:
        stop.set()
        thread.join()
        listener.close()
