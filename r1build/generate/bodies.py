"""How much of a chat server's response this process takes in.

The official client reads a plain (not streamed) answer's body whole before it parses it, and an event of a stream
line by line until the event's blank line; a server that sends without end, or a small gzip body that inflates to
gigabytes, filled this process's memory until the request's deadline. So every response's body is read through
:func:`bound_body` (a response hook of the HTTP client that the official client uses, whatever transport or proxy
carries the request): at most :data:`BODY_BYTES` once decoded, gzip and deflate inflated here within that bound; and
:class:`EventBound` holds one event of a stream to :data:`EVENT_BYTES` (the answer as a whole is held to
``responses.ANSWER_CHARS`` characters). Past either, :class:`BodyTooLarge`, which the client turns into a bad
response.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["ACCEPT_ENCODING", "BODY_BYTES", "EVENT_BYTES", "BodyTooLarge", "EventBound", "bound_body"]

BODY_BYTES = 256 << 20
"""The most bytes a response's body may have once decoded: a plain answer of ``responses.ANSWER_CHARS`` characters,
each at most 6 bytes in JSON (``\\uXXXX``), fits, with room for the rest of the completion; so does the stream of
an answer within any ``max_tokens`` (a delta's event is a few hundred bytes)."""
EVENT_BYTES = 64 << 20
"""The most bytes one event of a stream may have before its blank line (an event carries one delta: bytes to
kilobytes)."""
ACCEPT_ENCODING = "gzip, deflate"
"""The content encodings asked for: those this module inflates within its bound (the HTTP client would ask for
brotli and zstd too where their libraries are installed, and inflate them without one)."""


class BodyTooLarge(Exception):
    """A response brought more than this module takes in, or in an encoding it cannot bound."""


async def bound_body(response: Any) -> None:
    """The HTTP client's response hook: the body is read through a stream that inflates it itself within
    :data:`BODY_BYTES` (the header that would have the client inflate it again is taken off). A declared length
    over the bound, or an encoding other than gzip and deflate, fails at once."""
    declared = str(response.headers.get("content-length") or "").strip()
    if declared.isdigit() and int(declared) > BODY_BYTES:
        raise BodyTooLarge(f"the response's body declares {declared} bytes, over the {BODY_BYTES} bytes taken in")
    encoding = str(response.headers.get("content-encoding") or "identity").strip().lower()
    if encoding not in ("identity", "gzip", "deflate"):
        raise BodyTooLarge(f"the response's body is encoded as {encoding!r}, which was not asked for")
    if encoding != "identity":
        del response.headers["content-encoding"]
    response.stream = _bounded_stream(response, encoding)


def _bounded_stream(response: Any, encoding: str) -> Any:
    """``response``'s stream as one of its HTTP library's async byte streams (the library checks the type: httpx,
    or the successor the official client uses)."""
    library = sys.modules[type(response).__module__.split(".", 1)[0]]
    base: type = library.AsyncByteStream
    inner = response.stream

    class Bounded(base):  # type: ignore[misc]
        async def __aiter__(self) -> AsyncIterator[bytes]:
            inflate = _inflater(encoding)
            seen = 0

            def counted(data: bytes) -> bytes:
                nonlocal seen
                seen += len(data)
                if seen > BODY_BYTES:
                    raise BodyTooLarge(f"the response's body passed {BODY_BYTES} bytes")
                return data

            async for chunk in inner:
                yield counted(chunk if inflate is None else _inflated(inflate, chunk, BODY_BYTES - seen))
            if inflate is not None:
                yield counted(inflate.flush())

        async def aclose(self) -> None:
            await inner.aclose()

    return Bounded()


def _inflater(encoding: str) -> Any:
    """A decompressor for ``encoding`` (None for identity); deflate as zlib's format, as HTTP names it."""
    if encoding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    return None


def _inflated(inflate: Any, chunk: bytes, room: int) -> bytes:
    """``chunk`` inflated, at most one byte past ``room`` (so that passing it shows, without inflating the rest)."""
    try:
        return bytes(inflate.decompress(chunk, max(room, 0) + 1))
    except zlib.error as exc:
        raise BodyTooLarge(f"the response's compressed body does not inflate: {exc}") from None


class EventBound:
    """Counts a stream's bytes since its last blank line (the end of an event: ``\\n\\n``, ``\\r\\n\\r\\n`` or
    ``\\r\\r``): :class:`BodyTooLarge` past :data:`EVENT_BYTES`."""

    _ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")

    def __init__(self) -> None:
        self._since = 0
        self._tail = b""

    def add(self, data: bytes) -> None:
        window = self._tail + data
        end = max((window.rfind(sep) + len(sep) for sep in self._ENDS if sep in window), default=-1)
        self._since = len(window) - end if end >= 0 else self._since + len(data)
        self._tail = window[-3:]
        if self._since > EVENT_BYTES:
            raise BodyTooLarge(f"one event of the stream passed {EVENT_BYTES} bytes without its blank line")
