"""A remote that refuses writes and serves reads (a team's readers hold read-only credentials): a refused write
turns publishing off with one warning, and reading goes on; ``cache push`` says the write was refused (exit 1).
nginx with a location that denies every method but GET (and HEAD), and an S3 endpoint answering AccessDenied."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cache.remote import RemoteLayer, open_store
from r1build.cache.remote.store import RemoteRefused, RemoteUnavailable
from r1build.cli.main import main
from r1build.events import Event, Note, sink
from r1build.records import to_json
from r1build.trust.signing import KeyPair, TrustedKeys
from tests.cache.remote.remote_servers import FaultServer, Nginx
from tests.cache.remote.remote_support import measured_tiny, push, s3_endpoint_at, tiny_project

pytestmark = pytest.mark.slow  # nvcc and a server


def _read_only_copy(nginx: Nginx, team_key: KeyPair, tmp_path: Path) -> tuple[Path, str, str]:
    """tiny measured on machine A and published to a writable prefix, whose objects are then served under
    ``/readonly/`` (PUT denied): (project, the decision's key, the read-only URL)."""
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    key = measured_tiny(project, tmp_path / "a")
    prefix = f"ro-{tmp_path.name}"
    assert push(project, tmp_path / "a", f"{nginx.url}/{prefix}", team_key) == (2, 0)
    shutil.copytree(nginx.root / prefix, nginx.root / "readonly" / prefix)
    return project, key, f"{nginx.url}/readonly/{prefix}"


def test_a_refused_write_turns_publishing_off_and_reading_goes_on(
    nginx: Nginx, team_key: KeyPair, tmp_path: Path
) -> None:
    _, key, url = _read_only_copy(nginx, team_key, tmp_path)
    layer = RemoteLayer(
        open_store(url, timeout=10, header=None),
        trusted=TrustedKeys.of([team_key.public]),
        signing_key=team_key.private,
    )
    notes: list[Event] = []
    with Cache(tmp_path / "a") as cache, sink(notes.append):
        decision = cache.get_decision(key)
        assert decision is not None
        other = f"{7:064x}"
        payload = to_json(replace(decision, key=other))
        cache.put_raw(f"decision/{other}", payload)
        layer.stored(cache, "decision", other, payload)  # refused: publishing is off, no exception
        layer.stored(cache, "decision", other, payload)  # not tried again, not said again
        assert layer.unwritable is not None and "HTTP 403" in layer.unwritable
        assert layer.down is None
        assert layer.record("decision", key) is not None  # reading goes on
        assert layer.record("decision", other) is None  # nothing was written
        layer.close()
    warnings = [n.message for n in notes if isinstance(n, Note) and n.level == "warning"]
    assert len(warnings) == 1 and "refused a write" in warnings[0] and "reading from it goes on" in warnings[0]


def test_cache_push_to_a_remote_that_refuses_writes_is_exit_1(
    nginx: Nginx, team_key: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    measured_tiny(project, tmp_path / "a")
    monkeypatch.setenv("R1BUILD_SIGNING_KEY", team_key.private.raw_base64())
    url = f"{nginx.url}/readonly/push-{tmp_path.name}"
    code = main(["cache", "push", "-m", str(project), "--cache-dir", str(tmp_path / "a"), "--remote-cache", url])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 1 and "refused a write" in text and "HTTP 403" in text and "Traceback" not in text, text


_S3_DENIED = (
    b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n"
)
_DENIED_BODY = b"<?xml version='1.0'?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
_NOT_FOUND_BODY = b"<?xml version='1.0'?><Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>"


def _s3(first: bytes) -> bytes:
    """An S3 endpoint whose credentials may read (nothing is there) and may not write."""
    if first.startswith(b"PUT "):
        return _S3_DENIED.replace(b"{n}", str(len(_DENIED_BODY)).encode()) + _DENIED_BODY
    head = b"HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\nConnection: close\r\n"
    body = b"" if first.startswith(b"HEAD ") else _NOT_FOUND_BODY
    return head + f"Content-Length: {len(_NOT_FOUND_BODY)}\r\n\r\n".encode() + body


def test_s3_access_denied_on_a_write_is_a_refusal_and_a_server_error_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    with FaultServer(_s3) as server:
        s3_endpoint_at(monkeypatch, server.port)
        store = open_store("s3://team-cache/team", timeout=5, header=None)
        assert store.get("r1build-v1/blob/" + "0" * 64) is None
        with pytest.raises(RemoteRefused, match="AccessDenied"):
            store.put("r1build-v1/blob/" + "0" * 64, b"x")
        store.close()

    def broken(first: bytes) -> bytes:
        return b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

    with FaultServer(broken) as server:
        s3_endpoint_at(monkeypatch, server.port)
        store = open_store("s3://team-cache/team", timeout=5, header=None)
        with pytest.raises(RemoteUnavailable) as caught:
            store.put("r1build-v1/blob/" + "0" * 64, b"x")
        assert not isinstance(caught.value, RemoteRefused)
        store.close()


@pytest.mark.parametrize(("status", "refused"), [(401, True), (403, True), (405, True), (413, False), (429, False)])
def test_which_http_answers_to_a_put_are_refusals(status: int, refused: bool) -> None:
    """Credentials or a method the location does not allow are a refusal (the server would say the same again);
    a body too large or too many requests are not about who asks: the remote is unavailable, as before."""

    def answer(first: bytes) -> bytes:
        return f"HTTP/1.1 {status} Whatever\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()

    with FaultServer(answer) as server:
        store = open_store(f"http://127.0.0.1:{server.port}/team", timeout=5, header=None)
        with pytest.raises(RemoteUnavailable, match=f"HTTP {status}") as caught:
            store.put("r1build-v1/blob/" + "0" * 64, b"x")
        assert isinstance(caught.value, RemoteRefused) is refused
        store.close()
