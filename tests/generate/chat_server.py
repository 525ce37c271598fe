"""A real chat-completions server on 127.0.0.1 for tests and benchmarks, scripted per test.

It speaks enough HTTP/1.1 (keep-alive, chunked transfer) and enough of the OpenAI chat-completions protocol
(plain JSON and server-sent events with keep-alive comments, ``reasoning_content`` / ``reasoning`` deltas,
usage, in streams only when ``stream_options.include_usage`` asks for it) for the official ``openai`` client
to talk to it, and it misbehaves on request: HTTP errors with ``retry-after`` (seconds or an HTTP date), bodies
that are not JSON, streams that end early or drop the connection, hang-ups without a response, stalls, echoes of
the API key it was sent.
Answers can be large and can honour ``max_tokens`` the way a real server does (cut off with
``finish_reason: length``).

A script is a list of replies served in order (the last one repeats) or a function of the request. Every
request is recorded (headers and JSON body) and the most requests in flight at once is tracked.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import gzip
import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from typing import Any

__all__ = [
    "Answer",
    "ChatServer",
    "Events",
    "Fault",
    "Hangup",
    "Raw",
    "Reply",
    "Request",
    "Stall",
    "chunk",
    "vadd_answer",
]


@dataclass(frozen=True)
class Request:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    received: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages", []))

    @property
    def prompt(self) -> str:
        """The last user message."""
        users = [m for m in self.messages if m.get("role") == "user"]
        return str(users[-1]["content"]) if users else ""


@dataclass(frozen=True)
class Answer:
    """A well-formed completion, sent plain or streamed as the request asks."""

    content: str
    reasoning: str = ""
    reasoning_field: str = "reasoning_content"
    finish_reason: str = "stop"
    prompt_tokens: int = 100
    completion_tokens: int | None = None
    """Reported completion tokens; words of reasoning plus content when absent."""
    delay: float = 0.0
    """Seconds before the response headers."""
    chunk_delay: float = 0.0
    """Seconds between streamed chunks."""
    keepalives: int = 1
    """SSE comment lines sent before the first chunk of a stream."""
    chunk_chars: int = 400
    """Characters per streamed delta."""
    cut_after: int | None = None
    """Streams: end cleanly after this many chunks, without a finish reason, usage or [DONE]."""
    drop_after: int | None = None
    """Streams: drop the connection (no chunked terminator) after this many chunks."""
    stall_after: int | None = None
    """Streams: send nothing more after this many chunks (until the server stops)."""
    usage: bool = True
    """Whether usage is reported."""
    ignore_stream: bool = False
    """Answer with plain JSON even when a stream was asked for (servers that cannot stream)."""
    honour_max_tokens: bool = False
    """Cut the answer at the request's ``max_tokens`` like a real server: the text in proportion, the reported
    tokens at the limit, ``finish_reason: length``."""
    echo_key: bool = False
    """Append the API key the request was sent with to the content and the reasoning."""
    reasoning_s: float = 0.0
    """Streams: seconds the reasoning takes, spread over its deltas (R1 thinks for minutes before the code)."""
    content_s: float = 0.0
    """Streams: seconds the content takes, spread over its deltas."""

    def tokens(self) -> int:
        if self.completion_tokens is not None:
            return self.completion_tokens
        return len(self.reasoning.split()) + len(self.content.split())

    def for_request(self, request: Request) -> Answer:
        """This answer as sent to ``request`` (cut at its ``max_tokens``, the key echoed)."""
        reply = self
        if self.echo_key:
            key = _bearer(request)
            reply = replace(
                reply,
                content=f"{reply.content}\nYou sent the key {key}.",
                reasoning=f"{reply.reasoning} The key is {key}." if reply.reasoning else "",
            )
        limit = (request.body or {}).get("max_tokens")
        tokens = reply.tokens()
        if self.honour_max_tokens and isinstance(limit, int) and tokens > limit:
            keep = limit / tokens
            reply = replace(
                reply,
                reasoning=reply.reasoning[: int(len(reply.reasoning) * keep)],
                content=reply.content[: int(len(reply.content) * keep)],
                completion_tokens=limit,
                finish_reason="length",
            )
        return reply


def _bearer(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    return auth.removeprefix("Bearer ").strip()


@dataclass(frozen=True)
class Fault:
    """An HTTP error status with a JSON error body."""

    status: int
    message: str = "scripted fault"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    retry_after_date_s: float | None = None
    """Send ``retry-after`` as an HTTP date this many seconds from when the response is sent."""
    echo_key: bool = False
    """Append the API key the request was sent with to the error message."""


@dataclass(frozen=True)
class Raw:
    """A raw body with a status and content type (e.g. a body that is not JSON)."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    gzip: bool = False
    """Send the body gzip-compressed, with ``content-encoding: gzip``."""


@dataclass(frozen=True)
class Events:
    """A stream scripted event by event: each item is an event's data (a dict is sent as ``data: JSON``, bytes as
    they are: malformed JSON, comments, named events), then ``data: [DONE]`` unless ``done`` is False, then the
    chunked terminator, unless ``drop`` (the connection is cut instead) or ``stall`` (nothing more is sent until
    the server stops)."""

    events: Sequence[dict[str, Any] | bytes]
    done: bool = True
    drop: bool = False
    stall: bool = False
    status: int = 200
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)
    chunk_delay: float = 0.0
    """Seconds before each event."""


def chunk(
    content: str | None = None,
    *,
    reasoning: str | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    index: int = 0,
    model: str = "deepseek-reasoner",
    choices: bool = True,
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` event for :class:`Events` (``choices=False``: an empty choices list, as the
    usage chunk has)."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    event: dict[str, Any] = {
        "id": "chatcmpl-events",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}] if choices else [],
    }
    if usage is not None:
        event["usage"] = usage
    return event


@dataclass(frozen=True)
class Stall:
    """Accept the request and never answer (until the server stops)."""

    after_headers: bool = False
    """Send the response headers (and a keep-alive) first, then stall."""


@dataclass(frozen=True)
class Hangup:
    """Read the request and close the connection without a response (a server that crashed, a proxy that gave
    up)."""


Reply = Answer | Events | Fault | Hangup | Raw | Stall
Script = Sequence[Reply] | Callable[[Request], Reply]


async def _ended(tasks: set[asyncio.Task[Any]]) -> None:
    """Wait for ``tasks`` to end, whatever they end with."""
    await asyncio.gather(*tasks, return_exceptions=True)


class _Connection(asyncio.StreamReaderProtocol):
    """``asyncio.start_server``'s protocol, keeping its transport in ``open`` from ``connection_made`` to
    ``connection_lost``: the server closes every connection still open when it stops, a handler that never ran
    (cancelled before its first step) or one whose close waits on a client that stopped reading included."""

    def __init__(self, handler: Callable[..., Any], open_: set[asyncio.BaseTransport], limit: int) -> None:
        loop = asyncio.get_running_loop()
        super().__init__(asyncio.StreamReader(limit=limit, loop=loop), handler, loop=loop)
        self._open = open_
        self._own: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._own = transport
        self._open.add(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._own is not None:
            self._open.discard(self._own)
        super().connection_lost(exc)


class ChatServer:
    """The server; use as a context manager. ``url`` is the base URL (``.../v1``)."""

    def __init__(self, script: Script, *, model: str = "deepseek-reasoner") -> None:
        self.script = script
        self.model = model
        self.requests: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.finished: list[tuple[float, Request]] = []
        """When each complete stream was finished (``time.monotonic``, the clock of the test's process), with its
        request."""
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chat-server", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._open: set[asyncio.BaseTransport] = set()
        """The accepted connections not yet closed (their transports)."""
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------------------------
    def __enter__(self) -> ChatServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._loop.is_running():
            # as asyncio.run ends: every task left is cancelled and run to its end; then every connection still
            # open is closed (a handler cancelled before its first step never closes its own) and its close
            # callbacks run before the loop closes (a transport dropped with the loop is left to the garbage
            # collector: an unclosed-transport warning in whichever test runs then)
            left = asyncio.all_tasks(self._loop)
            for task in left:
                task.cancel()
            self._loop.run_until_complete(_ended(left))
            self._loop.run_until_complete(self._close_connections())
        self._loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _start(self) -> None:
        self._stop = asyncio.Event()
        # asyncio.start_server, with a protocol that keeps each connection's transport in self._open
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(self._serve, self._open, 2**16), "127.0.0.1", 0, backlog=512
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        assert self._server is not None and self._stop is not None
        self._stop.set()
        # stop accepting first, and close the server only once the connections already accepted have their
        # transports: a connection is accepted in one turn of the loop and its transport made in a later one, which
        # asserts that the server is not closed (Server._attach; python/cpython#109564). Closed in between (a probe
        # that connects and leaves at once, then the server stopped: test_doctor), the accepted socket was left in
        # a half-made transport that nothing closes (the AssertionError is only logged in debug mode) and the
        # garbage collector warned of it (unclosed transport and socket) in whichever test ran then
        loop = asyncio.get_running_loop()
        for sock in self._server.sockets:
            loop.remove_reader(sock.fileno())
        # a few turns of the loop: each connection accepted gets its transport, then its handler
        for _ in range(3):
            await asyncio.sleep(0.01)
        self._server.close()
        # end every handler, which closes its connection gracefully (its response so far flushed)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await self._close_connections()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _close_connections(self) -> None:
        """Close every connection still open (a handler that never ran, a close waiting to flush to a client that
        stopped reading) and wait until each transport has closed its socket."""
        for transport in list(self._open):
            if isinstance(transport, asyncio.Transport):
                transport.abort()  # at once: close() waits for the write buffer to drain
            else:
                transport.close()
        for _ in range(100):
            if not self._open:
                return
            await asyncio.sleep(0.01)

    # -- scripting ---------------------------------------------------------------------------------------
    def _reply_for(self, request: Request) -> Reply:
        if callable(self.script):
            return self.script(request)
        index = next(self._counter)
        items = list(self.script)
        return items[min(index, len(items) - 1)]

    def chat_requests(self) -> list[Request]:
        """Requests to ``/chat/completions``."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    # -- HTTP --------------------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                with self._lock:
                    self.requests.append(request)
                    self.in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    keep = await self._respond(request, reader, writer)
                finally:
                    with self._lock:
                        self.in_flight -= 1
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # shutdown: end quietly (asyncio would log a cancelled handler)
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()
            # the transport closes on a later turn of the loop: wait for it, or a server stopped right after leaves
            # its socket to the garbage collector (an unclosed-transport warning in whichever test runs then)
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(writer.wait_closed(), 2)

    async def _read_request(self, reader: asyncio.StreamReader) -> Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0"))
        raw = await reader.readexactly(length) if length else b""
        body = json.loads(raw) if raw else None
        return Request(method, path, headers, body, time.monotonic())

    async def _hold(self, reader: asyncio.StreamReader) -> None:
        """Send nothing more until the server stops or the client hangs up (a request it gave up on is no longer
        in flight)."""
        assert self._stop is not None
        stop = asyncio.ensure_future(self._stop.wait())
        gone = asyncio.ensure_future(reader.read())  # the client sends nothing more: this is its hang-up
        try:
            await asyncio.wait({stop, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            gone.cancel()

    @staticmethod
    async def _send_head(writer: asyncio.StreamWriter, status: int, headers: dict[str, str]) -> None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Status"
        head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1"))
        await writer.drain()

    async def _send_body(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        content_type: str,
        body: bytes,
        extra: dict[str, str] | None = None,
    ) -> None:
        headers = {"content-type": content_type, "content-length": str(len(body)), **(extra or {})}
        await self._send_head(writer, status, headers)
        writer.write(body)
        await writer.drain()

    async def _respond(self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if request.path.endswith("/stats"):
            with self._lock:
                chats = len(self.chat_requests())
                stats = {"requests": chats, "max_in_flight": self.max_in_flight}
                if request.method == "DELETE":
                    self.requests.clear()
                    self.max_in_flight = 0
            await self._send_body(writer, 200, "application/json", json.dumps(stats).encode())
            return True
        if not request.path.endswith("/chat/completions"):
            await self._send_body(writer, 404, "application/json", b'{"error":{"message":"not found"}}')
            return True
        reply = self._reply_for(request)
        assert self._stop is not None
        if isinstance(reply, Hangup):
            writer.transport.abort()
            return False
        if isinstance(reply, Stall):
            if reply.after_headers:
                await self._send_head(
                    writer, 200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"}
                )
                await self._chunk(writer, b": keep-alive\n\n")
            await self._hold(reader)
            return False
        if isinstance(reply, Fault):
            await asyncio.sleep(reply.delay)
            message = f"{reply.message} (key {_bearer(request)})" if reply.echo_key else reply.message
            body = json.dumps({"error": {"message": message, "type": "scripted", "code": reply.status}})
            headers = dict(reply.headers)
            if reply.retry_after_date_s is not None:
                headers["retry-after"] = email.utils.formatdate(time.time() + reply.retry_after_date_s, usegmt=True)
            await self._send_body(writer, reply.status, "application/json", body.encode(), headers)
            return True
        if isinstance(reply, Raw):
            await asyncio.sleep(reply.delay)
            raw, extra = reply.body, dict(reply.headers)
            if reply.gzip:
                raw = gzip.compress(raw)
                extra["content-encoding"] = "gzip"
            await self._send_body(writer, reply.status, reply.content_type, raw, extra)
            return True
        if isinstance(reply, Events):
            return await self._events(reply, reader, writer)
        await asyncio.sleep(reply.delay)
        reply = reply.for_request(request)
        if (request.body or {}).get("stream") and not reply.ignore_stream:
            return await self._stream(request, reply, reader, writer)
        said: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning:
            said[reply.reasoning_field] = reply.reasoning
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": said, "finish_reason": reply.finish_reason}],
        }
        if reply.usage:
            payload["usage"] = self._usage(reply)
        await self._send_body(writer, 200, "application/json", json.dumps(payload).encode())
        return True

    @staticmethod
    def _usage(reply: Answer) -> dict[str, Any]:
        tokens = reply.tokens()
        return {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": tokens,
            "total_tokens": reply.prompt_tokens + tokens,
            "completion_tokens_details": {"reasoning_tokens": len(reply.reasoning.split())},
        }

    @staticmethod
    async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()

    async def _events(self, reply: Events, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        headers = {"content-type": reply.content_type, "transfer-encoding": "chunked", **reply.headers}
        await self._send_head(writer, reply.status, headers)
        items = list(reply.events) + ([b"data: [DONE]\n\n"] if reply.done else [])
        for item in items:
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            data = item if isinstance(item, bytes) else b"data: " + json.dumps(item).encode() + b"\n\n"
            await self._chunk(writer, data)
        if reply.drop:
            writer.transport.abort()
            return False
        if reply.stall:
            await self._hold(reader)
            return False
        await self._chunk(writer, b"")
        return True

    async def _stream(
        self, request: Request, reply: Answer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        await self._send_head(
            writer,
            200,
            {"content-type": "text/event-stream", "cache-control": "no-cache", "transfer-encoding": "chunked"},
        )
        for _ in range(reply.keepalives):
            await self._chunk(writer, b": keep-alive\n\n")
        ident = f"chatcmpl-{len(self.requests)}"
        base = {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()), "model": self.model}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        step = max(1, reply.chunk_chars)
        deltas += [
            {reply.reasoning_field: reply.reasoning[i : i + step], "content": None}
            for i in range(0, len(reply.reasoning), step)
        ]
        thinking = len(deltas) - 1
        deltas += [{"content": reply.content[i : i + step]} for i in range(0, len(reply.content), step)]
        pauses = [0.0] + [reply.reasoning_s / max(1, thinking)] * thinking
        pauses += [reply.content_s / max(1, len(deltas) - 1 - thinking)] * (len(deltas) - 1 - thinking)
        events = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}]})
        options = (request.body or {}).get("stream_options") or {}
        if reply.usage and options.get("include_usage"):
            events.append({**base, "choices": [], "usage": self._usage(reply)})
        for n, event in enumerate(events):
            if reply.cut_after is not None and n >= reply.cut_after:
                await self._chunk(writer, b"")
                return True
            if reply.drop_after is not None and n >= reply.drop_after:
                writer.transport.abort()
                return False
            if reply.stall_after is not None and n >= reply.stall_after:
                await self._hold(reader)
                return False
            pause = reply.chunk_delay + (pauses[n] if n < len(pauses) else 0.0)
            if pause:
                await asyncio.sleep(pause)
            await self._chunk(writer, b"data: " + json.dumps(event).encode() + b"\n\n")
            if n % 8 == 7:
                await self._chunk(writer, b": keep-alive\n\n")
        await self._chunk(writer, b"data: [DONE]\n\n")
        await self._chunk(writer, b"")
        self.finished.append((time.monotonic(), request))
        return True


def vadd_answer(n: int) -> str:
    """A valid answer for the ``vadd`` kernel of the benchmarks, distinct for each ``n``."""
    source = (
        "#include <cuda_runtime.h>\n#include <cstdint>\n"
        "namespace { __global__ void k(const float* a, const float* b, float* o, int64_t n) {\n"
        "  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
        f"  if (i < n) o[i] = a[i] + b[i] + {n}; }} }}\n"
        'extern "C" cudaError_t vadd(const float* a, const float* b, float* out, int64_t n, cudaStream_t s) {\n'
        "  k<<<(n + 255) / 256, 256, 0, s>>>(a, b, out, n); return cudaGetLastError(); }\n"
    )
    return f"Here it is.\n\n```cuda\n{source}```\n"


def _serve_forever(argv: Sequence[str] | None = None) -> None:
    """Serve distinct valid ``vadd`` answers until stdin closes; prints the base URL first (for benchmarks,
    which run the server in a process of its own). ``GET /stats`` reports requests and the most in flight,
    ``DELETE /stats`` resets them."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=_serve_forever.__doc__)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args(argv)
    counter = itertools.count()
    lock = threading.Lock()

    def script(request: Request) -> Reply:
        with lock:
            n = next(counter)
        return Answer(vadd_answer(n), reasoning="short reasoning", delay=args.delay, completion_tokens=200)

    with ChatServer(script) as server:
        sys.stdout.write(server.url + "\n")
        sys.stdout.flush()
        sys.stdin.read()


if __name__ == "__main__":
    _serve_forever()
