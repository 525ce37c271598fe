"""Blobs and small documents in the cache: bytes keyed by their own sha256 (candidate sources, transcripts), text
as UTF-8 blobs, and small JSON documents by namespace and key (per-device measurements such as bandwidth floors).
A blob this cache misses is asked of the remote layer (verified by digest there) and kept here."""

from __future__ import annotations

from typing import Any

from ..events import Note, emit
from ..keys import canonical_json, digest_bytes
from .codec import pack
from .storage import Storage

__all__ = ["Blobs"]


class Blobs(Storage):
    """Blobs, text and JSON documents of one cache."""

    def put_blob(self, data: bytes) -> str:
        """Store bytes (replacing a corrupt copy); returns their sha256, the blob's key."""
        digest = digest_bytes(data)
        key = f"blob/{digest}"
        if self._stored(key) != pack(digest, data):
            self._put(key, data, digest)
        return digest

    def get_blob(self, digest: str) -> bytes | None:
        """The bytes whose sha256 is ``digest``, verified; None when absent or corrupt."""
        value = self._read(f"blob/{digest}")
        if not isinstance(value, bytes) and self.remote is not None:
            self.fell_through.add(f"blob/{digest}")
            value = self.remote.blob(digest)
            if value is not None:
                self.put_blob(value)
        return value if isinstance(value, bytes) else None

    def has_blob(self, digest: str) -> bool:
        """Whether a blob is stored (not verified; cheap)."""
        return bool(self._query("SELECT 1 FROM Cache WHERE key = ? AND raw = 1", (f"blob/{digest}",)))

    def put_text(self, text: str) -> str:
        """Store text as a UTF-8 blob."""
        return self.put_blob(text.encode())

    def get_text(self, digest: str) -> str | None:
        """A text blob (None when absent, corrupt or not UTF-8)."""
        data = self.get_blob(digest)
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError:
            emit(Note("warning", f"cache blob {digest} is not UTF-8 text"))
            return None

    def put_json(self, namespace: str, key: str, obj: Any) -> None:
        """Store a small JSON document."""
        self._put(f"json/{namespace}/{key}", canonical_json(obj))

    def get_json(self, namespace: str, key: str) -> Any | None:
        """A small JSON document, or None."""
        return self._read(f"json/{namespace}/{key}")
