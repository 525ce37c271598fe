"""The content-addressed cache on diskcache: :class:`Cache`, and :func:`open_usable`, how builds open it.

:class:`Cache` is the sum of its parts: the entry codec (:mod:`.codec`), opening (:mod:`.opening`), verified
storage (:mod:`.storage`), blobs and documents (:mod:`.blobs`), decisions and gate verdicts (:mod:`.verdicts`),
and maintenance (:mod:`.maintenance`). What follows holds for all of them.

Four kinds of entries, each under its own key prefix:

``blob/<sha256>``
    Bytes (candidate sources, transcripts) keyed by the sha256 of the bytes themselves.
``decision/<decision key>``
    A :class:`~r1build.records.Decision` as JSON.
``gate/<gate key>``
    A static-gate :class:`~r1build.records.Result` keyed by source digest, arch, flags and toolchain.
``json/<namespace>/<key>``
    Small JSON documents (per-device measurements such as bandwidth floors).

Integrity
    Every value is stored as ``<sha256 of payload>\\n<payload>`` and verified on every read: a digest mismatch,
    a blob whose key is not its content's digest, or a record that no longer parses is a miss, reported through
    :mod:`r1build.events`, never returned. Storing a blob again heals a corrupt copy.

Where
    The directory is the one given, else ``$R1BUILD_CACHE_DIR``, else the platform's user cache directory
    (platformdirs). diskcache keeps values under 32 KiB inside its SQLite database (``cache.db``) and larger
    ones as files in two levels of sub-directories.

Several processes
    diskcache runs SQLite in WAL mode. Reads are plain SQLite reads that never wait for writers; writers wait
    for each other up to ``timeout`` seconds (then :class:`~r1build.errors.CacheError`). Opening retries while
    another process is creating the same directory. A non-empty directory that holds no cache is refused, so
    ``gc`` never deletes foreign files.

Damaged, read-only, missing
    The cache only ever speeds things up. A ``cache.db`` that is not a database or is malformed raises
    :class:`~r1build.errors.CacheDamagedError` (``r1build cache repair`` rebuilds it, see :mod:`.repair`). A
    cache this process may not write (a shared cache owned by another user, a read-only file system) is opened
    read-only: reads work, writes are skipped, maintenance is refused. :func:`open_usable` is how builds and
    project commands open it: a damaged or uncreatable cache becomes a scratch cache for the run, a read error
    in the middle of a run turns the cache off for the rest of it; either with one warning. How the index is
    opened in these cases lives in :mod:`.index`.

Interrupted imports
    Value files carry the id of the process that wrote them (``<hex>.p<pid>.val``), and a bundle import
    records itself in ``R1Meta`` before it writes anything. When an import is killed, SQLite rolls its
    transaction back; the next open finds the record of a process that is gone and removes the value files it
    left behind (``gc`` removes any unreferenced value file too).

Size
    The size limit (4 GiB for a new cache) is stored in the cache and shared by every process; each write
    evicts the least recently used entries (diskcache culls up to ten at a time) while the cache is over it.
    :meth:`Cache.gc` evicts one entry at a time down to a new limit. A read refreshes an entry's last-used time
    only when it is older than ``touch_after`` (60 s), so a warm read writes nothing (diskcache's own LRU ``get``
    writes on every read, which costs a write lock and, now and then, a WAL checkpoint with fsync).

Parsed records
    Decisions and gate results parsed in this process are remembered by payload digest (256 of them); a read
    still fetches and verifies the bytes, and returns the remembered record when they are the same. Records
    are frozen dataclasses: treat them as immutable.

A remote layer
    A :class:`Fallback` attached as :attr:`Cache.remote` (see :mod:`.remote`) is asked for a blob, decision or
    gate result this cache misses; what it returns (already verified by digest, and records by signature) is
    stored here, then used. A decision or gate result stored here is also handed to it, which publishes it when
    the run may write to the remote.

Statistics
    Hits, misses and corrupt reads are counted per kind in this process and added to lifetime totals (a small
    table in ``cache.db``, never evicted) when the cache is closed or :meth:`Cache.flush_stats` is called.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CacheError, CacheLocationError
from ..events import Note, emit
from .blobs import Blobs
from .codec import KINDS, check_payload, kind_of
from .location import default_cache_dir, resolve_cache_dir
from .maintenance import Maintenance
from .opening import DEFAULT_SIZE_LIMIT
from .storage import DEFAULT_TIMEOUT, TOUCH_AFTER, Fallback
from .verdicts import Verdicts

__all__ = [
    "DEFAULT_SIZE_LIMIT",
    "DEFAULT_TIMEOUT",
    "KINDS",
    "TOUCH_AFTER",
    "Cache",
    "Fallback",
    "check_payload",
    "default_cache_dir",
    "kind_of",
    "open_usable",
    "resolve_cache_dir",
]


class Cache(Blobs, Verdicts, Maintenance):
    """The r1build cache in one directory. Safe to share between processes and threads.

    ``create=False`` refuses a directory that holds no cache (maintenance commands: a mistyped ``--cache-dir``
    must not become a new, empty, "intact" cache). ``tolerant`` turns the cache off, with one warning, at the
    first read or write that fails in the middle of a run instead of raising (see :func:`open_usable`).
    """


def open_usable(directory: Path | str | None = None) -> Cache:
    """The cache as builds and project commands use it: an accelerator, never a dependency.

    A cache this process may only read is read (one warning, from :class:`Cache`). A damaged index, or a cache
    directory that cannot be created, is replaced for this run by a scratch cache in a temporary folder, removed
    at close, with one warning naming the fix. A read or write that fails later turns the cache off for the
    rest of the run, again with one warning. A location that is a file or a folder of other files is still a
    :class:`~r1build.errors.CacheLocationError`: that is a setting to correct, not damage.
    """
    try:
        return Cache(directory, tolerant=True)
    except CacheLocationError:
        raise
    except CacheError as exc:
        import tempfile  # here: only a damaged cache needs it

        scratch = Path(tempfile.mkdtemp(prefix="r1build-scratch-cache-"))
        emit(Note("warning", f"{exc}; going on without it (a scratch cache for this run only)"))
        cache = Cache(scratch, tolerant=True)
        cache._scratch = scratch
        cache.degraded = f"a scratch stand-in for {resolve_cache_dir(directory)} ({exc})"
        return cache
