"""An ``http(s)://host/prefix`` remote: GET, HEAD and PUT of each object at ``prefix/<key>``.

Works with nginx's WebDAV module (``dav_methods PUT; create_full_put_path on;``: nginx writes a PUT body to a
temporary file and renames it into place, so a reader never sees half an object) and with bazel-remote-style
servers. The standard library's :mod:`http.client`, one keep-alive connection per thread; the header from
``R1BUILD_REMOTE_TOKEN`` / ``R1BUILD_REMOTE_HEADER`` goes with every request.
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from .store import MAX_OBJECT, RemoteRefused, RemoteUnavailable

if TYPE_CHECKING:
    import http.client
    import socket

__all__ = ["MIN_RATE", "REFUSALS", "HttpStore"]

_STORED = frozenset({200, 201, 204})
MIN_RATE = 256 * 1024
"""Bytes a second a remote must at least move: a request may take ``timeout`` plus its bytes at this rate, so a
server that answers a byte now and then (each within ``timeout``) is a timeout, not a hung build."""
_CHUNK = 64 * 1024
REFUSALS = frozenset({401, 403, 405})
"""HTTP statuses that refuse a request for who asks or what it is (credentials, a method the location does not
allow): the server is up and would say the same again. Others (408, 413, 429, 5xx) are a remote unavailable."""


def _resolve(host: str, port: int, timeout: float) -> list[tuple[Any, Any, int, str, Any]]:
    """``socket.getaddrinfo`` of ``host`` for a TCP connection, answered within ``timeout`` seconds (else an
    OSError; the lookup is left to end on its own, in a daemon thread)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    import socket  # at the first request, with http.client (see _client)

    def lookup() -> None:
        try:
            box["found"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=lookup, name="r1build-resolve", daemon=True).start()
    if not done.wait(timeout):
        raise OSError(f"resolving {host}: no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["found"]  # type: ignore[no-any-return]


def _client() -> Any:
    """:mod:`http.client`, imported at the first request: with ``ssl`` and the e-mail parser beneath it ~10 ms, which
    a run that the lock and the local cache settle never sends (first runs of ``resolve --locked`` measured 84 ms
    with a remote configured against 68 ms without, before this)."""
    import http.client

    return http.client


class HttpStore:
    """A remote cache over plain HTTP(S)."""

    def __init__(self, url: str, *, timeout: float, header: tuple[str, str] | None) -> None:
        parts = urllib.parse.urlsplit(url)
        self.url = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._headers = {"User-Agent": "r1build"}
        if header is not None:
            self._headers[header[0]] = header[1]
        self._local = threading.local()
        self._opened: list[http.client.HTTPConnection] = []
        self._guard = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            client = _client()
            cls = client.HTTPSConnection if self._https else client.HTTPConnection
            conn = cast("http.client.HTTPConnection", cls(self._host, self._port, timeout=self._timeout))
            # the host name resolved within the timeout too: the socket's timeout does not bound the resolver,
            # whose retries over unreachable name servers take 10-30 s, nor does the watchdog (no socket yet)
            conn._create_connection = self._open  # type: ignore[attr-defined]
            self._local.conn = conn
            with self._guard:
                self._opened.append(conn)
        return conn

    def _open(
        self, address: tuple[str, int], timeout: float | None = None, source: tuple[str, int] | None = None
    ) -> socket.socket:
        """A connected socket to ``address``, its name resolved within the timeout (an OSError past it)."""
        import socket

        host, port = address
        found = _resolve(host, port, self._timeout)
        error: OSError | None = None
        for family, kind, proto, _, where in found:
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(timeout)
                if source is not None:
                    sock.bind(source)
                sock.connect(where)
                return sock
            except OSError as exc:
                sock.close()
                error = exc
        raise error or OSError(f"{host}: no address to connect to")

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _request(self, method: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
        path = urllib.parse.quote(f"{self._prefix}/{key}")
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = "application/octet-stream"
        for attempt in range(2):
            reused = getattr(self._local, "conn", None) is not None
            conn = self._connection()
            # sending and the answer's head: within timeout plus the body's bytes at MIN_RATE, whatever the
            # server trickles (the socket's timeout bounds each wait, not their sum)
            limit = self._timeout + len(body or b"") / MIN_RATE
            overdue = threading.Event()
            watchdog = threading.Timer(limit, self._abort, (conn, overdue))
            watchdog.daemon = True
            watchdog.start()
            try:
                try:
                    conn.request(method, path, body=body, headers=headers)
                    response = conn.getresponse()
                finally:
                    watchdog.cancel()
                if overdue.is_set():  # the watchdog cut a head that trickled in: what was read is not an answer
                    self._drop()
                    raise RemoteUnavailable(f"{method} {path}: no answer within {limit:.3g} s")
                length = response.getheader("Content-Length")
                if method == "GET" and length is not None and length.isdigit() and int(length) > MAX_OBJECT:
                    self._drop()
                    raise RemoteUnavailable(f"{method} {path}: an object of {length} bytes, over the limit")
                data = self._body(response, MAX_OBJECT + 1 if method == "GET" else _CHUNK, f"{method} {path}")
                if len(data) > MAX_OBJECT:
                    self._drop()
                    raise RemoteUnavailable(f"{method} {path}: an answer over {MAX_OBJECT} bytes")
                if method == "GET" and length is not None and length.isdigit() and len(data) < int(length):
                    self._drop()  # the connection closed mid-body: a torn transfer, not a corrupt object
                    raise RemoteUnavailable(
                        f"{method} {path}: the answer was cut short ({len(data)} of {length} bytes)"
                    )
                if response.will_close:
                    self._drop()
                return response.status, data
            except (_client().RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self._drop()
                if overdue.is_set():
                    raise RemoteUnavailable(f"{method} {path}: no answer within {limit:.3g} s") from None
                if attempt == 0 and reused:
                    continue  # the server closed an idle keep-alive connection: once more on a new one
                raise RemoteUnavailable(f"{method} {path}: {exc or type(exc).__name__}") from None
            except TimeoutError:
                self._drop()
                raise RemoteUnavailable(f"{method} {path}: no answer within {self._timeout:g} s") from None
            except (OSError, _client().HTTPException) as exc:
                self._drop()
                if overdue.is_set():
                    raise RemoteUnavailable(f"{method} {path}: no answer within {limit:.3g} s") from None
                raise RemoteUnavailable(f"{method} {path}: {exc or type(exc).__name__}") from None
        raise AssertionError("unreachable")

    @staticmethod
    def _abort(conn: http.client.HTTPConnection, overdue: threading.Event) -> None:
        """The watchdog: a request past its time has its socket shut, which ends the wait in its thread."""
        import socket

        overdue.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _body(self, response: http.client.HTTPResponse, most: int, what: str) -> bytes:
        """Up to ``most`` bytes of the answer's body, read as it arrives: it must come within the timeout plus
        its bytes at :data:`MIN_RATE`, else :class:`RemoteUnavailable`. The rest of a longer body is not read."""
        start = time.monotonic()
        parts: list[bytes] = []
        got = 0
        while got < most:
            if time.monotonic() - start > self._timeout + got / MIN_RATE:
                self._drop()
                raise RemoteUnavailable(
                    f"{what}: the answer came slower than {MIN_RATE // 1024} KiB/s "
                    f"({got} bytes in {time.monotonic() - start:.1f} s)"
                )
            part = response.read1(min(_CHUNK, most - got))
            if not part:
                response.read()  # the end (or a HEAD): read() lets http.client finish the response
                break
            parts.append(part)
            got += len(part)
        if got >= most and not response.isclosed():
            self._drop()  # an answer longer than wanted: the connection cannot be reused
        return b"".join(parts)

    def _fail(self, method: str, key: str, status: int) -> RemoteUnavailable:
        reason = _client().responses.get(status, "")
        said = f"{method} {self._prefix}/{key}: HTTP {status} {reason}".rstrip()
        return RemoteRefused(said) if status in REFUSALS else RemoteUnavailable(said)

    def get(self, key: str) -> bytes | None:
        status, data = self._request("GET", key)
        if status == 404:
            return None
        if status != 200:
            raise self._fail("GET", key, status)
        return data

    def head(self, key: str) -> bool:
        status, _ = self._request("HEAD", key)
        if status == 404:
            return False
        if status != 200:
            raise self._fail("HEAD", key, status)
        return True

    def put(self, key: str, data: bytes) -> None:
        status, _ = self._request("PUT", key, data)
        if status not in _STORED:
            raise self._fail("PUT", key, status)

    def keys(self, prefix: str) -> Iterator[str] | None:
        return None  # plain HTTP has no listing (WebDAV's PROPFIND is not everywhere)

    def close(self) -> None:
        """Close every connection (a thread that uses its own again reconnects)."""
        with self._guard:
            opened = list(self._opened)
        for conn in opened:
            conn.close()
