"""The wire format between the evaluator and its GPU workers: one message is a JSON header plus raw buffers.

Frame: ``MAGIC`` (4 bytes), header length (u32), buffer count (u32), the UTF-8 JSON header, then per buffer its
length (u64) and bytes. Pipes carry it both ways; this module uses only the standard library so the worker (and
tests) can speak it without anything else. Reads honour a deadline so a silent peer is detected.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CAPTURE_ERRORS", "MAGIC", "PeerClosed", "PeerTimeout", "ProtocolError", "read_message", "write_message"]

MAGIC = b"R1EV"
CAPTURE_ERRORS = frozenset(range(900, 911))
"""cudaErrorStreamCapture* and friends: the codes a call returns when it breaks the capture of its stream (both
sides read return codes against it)."""
_HEAD = struct.Struct("<4sII")
_LEN = struct.Struct("<Q")
_CHUNK = 1 << 20
MAX_HEADER = 64 << 20
MAX_BUFFERS = 4096


class ProtocolError(Exception):
    """The peer sent something that is not a frame."""


class PeerClosed(Exception):
    """The peer closed its end (it exited or crashed)."""


class PeerTimeout(Exception):
    """The peer sent nothing before the deadline."""


def write_message(fd: int, header: Mapping[str, Any], buffers: Sequence[bytes | bytearray | memoryview] = ()) -> None:
    """Send one frame. Raises :class:`PeerClosed` when the reader has gone."""
    body = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    parts: list[bytes | bytearray | memoryview] = [_HEAD.pack(MAGIC, len(body), len(buffers)), body]
    for buf in buffers:
        parts.append(_LEN.pack(memoryview(buf).nbytes))
        parts.append(buf)
    try:
        for part in parts:
            view = memoryview(part).cast("B")
            while view:
                written = os.write(fd, view[:_CHUNK])
                view = view[written:]
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise PeerClosed(str(exc)) from None


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    out = bytearray()
    while len(out) < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerTimeout(f"no data within the deadline ({len(out)} of {n} bytes read)")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise PeerTimeout(f"no data within the deadline ({len(out)} of {n} bytes read)")
        chunk = os.read(fd, min(n - len(out), _CHUNK))
        if not chunk:
            raise PeerClosed("end of stream")
        out += chunk
    return bytes(out)


def read_message(fd: int, timeout_s: float | None = None) -> tuple[dict[str, Any], list[bytes]]:
    """Receive one frame: (header, buffers). :class:`PeerTimeout` when nothing arrives within ``timeout_s``
    of the call (a frame that has started is read with the same deadline)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    magic, hlen, count = _HEAD.unpack(_read_exact(fd, _HEAD.size, deadline))
    if magic != MAGIC:
        raise ProtocolError(f"bad frame magic {magic!r}")
    if hlen > MAX_HEADER or count > MAX_BUFFERS:
        raise ProtocolError(f"frame too large (header {hlen} bytes, {count} buffers)")
    try:
        header = json.loads(_read_exact(fd, hlen, deadline))
    except ValueError as exc:
        raise ProtocolError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    buffers = []
    for _ in range(count):
        (size,) = _LEN.unpack(_read_exact(fd, _LEN.size, deadline))
        buffers.append(_read_exact(fd, size, deadline))
    return header, buffers
