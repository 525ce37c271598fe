"""The seam to a remote store: get, head and put of immutable objects by key, and the backend for a URL.

Keys are relative paths (``r1build-v1/blob/<sha256>``); each backend puts them under its own prefix. A backend
raises :class:`RemoteUnavailable` for anything that is not a plain answer (refused connection, timeout, an HTTP
status other than found / not found / stored, missing credentials); :mod:`.layer` turns that into one warning.
Backends do not verify content: the layer does, by digest and signature.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Protocol

__all__ = ["MAX_OBJECT", "RemoteRefused", "RemoteStore", "RemoteUnavailable", "without_credentials"]

MAX_OBJECT = 64 * 1024**2
"""Largest object read from a remote (bytes): a larger answer is garbage, not a cache entry."""


class RemoteUnavailable(Exception):
    """The remote did not answer usably (down, slow, refused, forbidden, mid-upload failure)."""


class RemoteRefused(RemoteUnavailable):
    """The remote answered, and said no to this request (HTTP 401, 403 or 405, S3's AccessDenied): it is up, and
    what was refused may be all it refuses (a team's readers may read, not write)."""


_USERINFO = re.compile(r"(?<=//)[^/\s\"'<>@]*@")


def without_credentials(text: str) -> str:
    """``text`` (a library's error message) with any ``user:password@`` of a URL in it shown as ``***@``: an
    endpoint from the environment (``AWS_ENDPOINT_URL``) may carry one, and botocore quotes it whole."""
    return _USERINFO.sub("***@", text)


class RemoteStore(Protocol):
    """Content-addressed objects on a remote, by key."""

    url: str
    """The store's URL, as configured (no credentials in it)."""

    def get(self, key: str) -> bytes | None:
        """The object's bytes, None when there is none."""

    def head(self, key: str) -> bool:
        """Whether the object exists."""

    def put(self, key: str, data: bytes) -> None:
        """Store the object whole (a failed put leaves no object, or the previous one)."""

    def keys(self, prefix: str) -> Iterator[str] | None:
        """Every key under ``prefix``, or None when the backend cannot list."""

    def close(self) -> None:
        """Close connections (the store may be used again: it reconnects)."""
