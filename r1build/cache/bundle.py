"""Cache bundles: move decisions (with the blobs they name) between machines as one file.

A bundle is a zip file::

    index.json            {"format": "r1build-bundle", "version": 1 or 2, "created": ..., "entries": [...]}
    entries/<sha256>      one payload per distinct digest (deflated)

Each index entry is ``{"key", "kind", "sha256", "size"}``: the entry's full cache key, its kind, and the sha256
and length of its payload. The zip comment holds ``r1build-bundle index sha256=<digest of index.json>``.

**Signed bundles** (version 2, written when export is given a signing key): every entry that is not a blob
(decisions, gate results, JSON documents) also carries ``"signature": "ed25519:<key id>:<base64>"``, the
signature of :func:`r1build.trust.signing.entry_payload` (its full key and the sha256 of its payload). Blobs need none:
their key is their content's digest, and only a signed decision makes a build use one. Import given trusted keys
(the manifest's ``[cache] trusted-keys``) verifies each such entry and refuses, with one warning each, those that
are unsigned, signed by a key not listed, or whose signature does not match; the rest is imported. Without trusted
keys, signatures are not checked and old unsigned (version 1) bundles import as before.

Import reads and checks the whole bundle before it writes anything: the index digest, the index's shape and
format version, that every payload member is listed and every listed payload is present, the bounds (from the sizes
the index and the zip directory declare, before a payload is inflated: no payload over :data:`MAX_ENTRY_BYTES`, no
record over :data:`MAX_RECORD_BYTES`, all of them together not over the cache's size limit nor over
:data:`MAX_EXPANSION` times the bundle file beyond :data:`EXPANSION_ALLOWANCE`), each payload's length and sha256,
that a blob's key is its digest, and that each record parses as its kind (a decision's key must be the key it is
filed under). Any failure raises :class:`~r1build.errors.BundleError` naming the problem, and the cache is left as
it was. The verified entries are then written in one transaction, each payload inflated again and checked again as
it is written. Payloads are inflated :data:`CHUNK_BYTES` at a time; a blob over :data:`STREAM_FROM_BYTES` goes
into its value file as it is inflated, so import never holds the bundle, nor a large blob, in memory.

What happens to entries the cache already has:

* identical payload: nothing (counted ``unchanged``);
* a blob: its key is its digest, so a verified blob can only differ from a *corrupt* local copy, which is
  replaced;
* a decision that differs: the bundle's decision replaces the local one only when a GPU judged the bundle's and
  either none judged the local one (a bundle from a GPU machine upgrades a static-gate-only decision) or newer GPU
  checks did (its ``checks`` version is higher, and not above this r1build's); never when it contradicts itself
  (:func:`~r1build.selection.rules.decision_problem`); otherwise the local decision is kept (``kept``); one that
  contradicts itself is not added where the cache has none either: it is refused with a warning (``refused``), as
  the remote cache refuses it, for no build would use it and `cache verify` would report it;
* a gate result or JSON document that differs: the local one is kept.

A local entry that is corrupt is always replaced by the bundle's verified one.
"""

from __future__ import annotations

import datetime as _dt
import glob
import hashlib
import json
import os
import tempfile
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .. import __version__
from ..convert import field, record
from ..errors import BundleError, SignatureError
from ..events import Note, emit
from ..filemode import as_user_file, replace_problem
from ..keys import canonical_json, digest_bytes
from ..records import Decision, from_json
from ..trust.signing import PrivateKey, TrustedKeys, entry_payload, entry_statement, sign, verify
from .codec import KINDS, check_payload, kind_of
from .index import pid_in, process_gone
from .store import Cache
from .verdicts import UNCHECKED_IMPORT, is_signer_note

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "CHUNK_BYTES",
    "EXPANSION_ALLOWANCE",
    "MACHINE_LOCAL",
    "MAX_ENTRY_BYTES",
    "MAX_EXPANSION",
    "MAX_RECORD_BYTES",
    "STREAM_FROM_BYTES",
    "BundleEntry",
    "BundleSummary",
    "export_bundle",
    "import_bundle",
    "is_machine_local",
    "read_bundle",
    "referenced_blobs",
]

BUNDLE_FORMAT = "r1build-bundle"
"""The ``format`` field of every bundle index."""
BUNDLE_VERSION = 2
"""The newest bundle layout this r1build writes (when signing) and reads; version 1, unsigned, is written
without a signing key (so older r1build reads it) and still read."""
_VERSIONS = (1, 2)
_FIELDS = frozenset({"key", "kind", "sha256", "size"})
INDEX_NAME = "index.json"
PAYLOAD_DIR = "entries/"
_COMMENT_PREFIX = b"r1build-bundle index sha256="
_MAX_INDEX_BYTES = 64 * 1024**2
MAX_ENTRY_BYTES = 64 * 1024**2
"""Largest payload of one bundle entry, as of one remote cache object: no source, transcript or record comes
near it, and a zip member that inflates beyond it is a decompression bomb, refused before it is read."""
MAX_RECORD_BYTES = 16 * 1024**2
"""Largest payload of a record (a decision, gate result or JSON document), which import parses whole: a decision
names its sources and transcripts by digest and takes kilobytes."""
MAX_EXPANSION = 100
"""Most bytes a bundle's payloads may take together, uncompressed, per byte of the bundle file (beyond
:data:`EXPANSION_ALLOWANCE`). Sources, transcripts and records deflate 3 to 10 times; deflate itself tops out near
1000 (long runs of one byte), which is what a decompression bomb uses: 1.2 MB inflating to 1.2 GB."""
EXPANSION_ALLOWANCE = 256 * 1024**2
"""Bytes a bundle's payloads may take uncompressed whatever their ratio to the bundle file (a small bundle of
very repetitive transcripts is no threat at this size); the cache's size limit bounds every bundle too."""
CHUNK_BYTES = 1024**2
"""Import inflates payloads this many bytes at a time."""
STREAM_FROM_BYTES = 4 * 1024**2
"""A blob larger than this is stored as it is inflated (into its value file), never held whole; smaller ones
and records (parsed whole) are read whole, one at a time."""
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_HEX = frozenset("0123456789abcdef")
_Bad = Callable[[str], BundleError]


@record(frozen=True)
class BundleEntry:
    """One entry of a bundle index."""

    key: str
    """Full cache key, ``<kind>/...``."""
    kind: str
    """One of the cache's kinds."""
    sha256: str
    """sha256 of the payload."""
    size: int
    """Payload bytes."""
    signature: str | None = None
    """Signed bundles: ``ed25519:<key id>:<base64>`` over :func:`~r1build.trust.signing.entry_payload` (not blobs)."""


@record(kw_only=True)
class BundleSummary:
    """What an export wrote or an import did."""

    path: str
    """The bundle file."""
    entries: dict[str, int] = field(default_factory=dict)
    """Entries per kind in the bundle."""
    payload_bytes: int = 0
    """Payload bytes in the bundle (uncompressed)."""
    file_bytes: int = 0
    """Size of the bundle file."""
    added: list[str] = field(default_factory=list)
    """Import: keys written that the cache did not have (or had corrupt)."""
    replaced: list[str] = field(default_factory=list)
    """Import: decisions replaced by a measured one from the bundle."""
    unchanged: list[str] = field(default_factory=list)
    """Import: keys the cache already had with the same payload."""
    kept: list[str] = field(default_factory=list)
    """Import: keys the cache had with a different payload, kept as they were."""
    missing: list[str] = field(default_factory=list)
    """Export: keys asked for or referenced by a decision that the cache does not hold intact (left out)."""
    signed_by: str | None = None
    """Export: the id of the key that signed the entries (None: unsigned)."""
    verified: dict[str, str] = field(default_factory=dict)
    """Import with trusted keys: key to the id of the trusted key whose signature it carries."""
    refused: dict[str, str] = field(default_factory=dict)
    """Import: keys not imported, to why (with trusted keys: unsigned, untrusted key, signature mismatch; a
    decision that contradicts itself)."""

    @property
    def total(self) -> int:
        """Entries in the bundle."""
        return sum(self.entries.values())


MACHINE_LOCAL = ("replay", "cluster-outcome")
"""JSON namespaces of records that mean something only on the machine that made them, never carried by a bundle
either way: the warm path's replay records (keyed by this machine's environment and working directory, holding the
paths it read and what a command printed: :mod:`r1build.cli.fastpath`) and GPU job outcomes a cluster run has not
yet turned into decisions (:mod:`r1build.cluster.session`). Signer notes are this machine's too
(:func:`~.verdicts.is_signer_note`)."""


def is_machine_local(key: str) -> bool:
    """Whether the full ``key`` is a record of this machine's, left out of bundles and skipped on import."""
    return is_signer_note(key) or any(key.startswith(f"json/{ns}/") for ns in MACHINE_LOCAL)


# -- export ---------------------------------------------------------------------------------------------------
def referenced_blobs(decision: Decision) -> list[str]:
    """Digests of the blobs a decision names: candidate sources and transcripts (:meth:`Decision.blobs`)."""
    return decision.blobs()


def _selection(cache: Cache, keys: Iterable[str] | None) -> list[str]:
    """The keys to export: every entry, or ``keys`` with the blobs their decisions name."""
    if keys is None:  # signer notes, replay records and pending outcomes are this machine's, not a bundle's
        return [e.key for e in cache.entries() if not is_machine_local(e.key)]
    chosen: set[str] = set()
    referenced: set[str] = set()
    for key in keys:
        if is_machine_local(key):
            continue
        chosen.add(key)
        if kind_of(key) == "decision":
            payload = cache.peek(key)
            if payload is not None:
                decision = from_json(Decision, payload)
                referenced.update(f"blob/{d}" for d in referenced_blobs(decision))
    return sorted(chosen | referenced)


def export_bundle(
    cache: Cache,
    path: Path | str,
    keys: Iterable[str] | None = None,
    *,
    signing_key: PrivateKey | None = None,
    force: bool = False,
) -> BundleSummary:
    """Write a bundle of every intact entry, or of ``keys`` (full keys; a decision brings the blobs it names).
    With ``signing_key`` every entry but blobs is signed (a version 2 bundle).

    Entries that are absent or corrupt are left out with a warning and listed in ``missing``. The file is
    written to a temporary name next to ``path`` (carrying this process's id) and renamed, so a reader never
    sees half a bundle; the temporary files of earlier, killed exports to ``path`` are removed first. A file
    already at ``path`` is replaced only when it is a bundle or empty, or with ``force``: :class:`BundleError` for
    anything else.
    """
    path = Path(path)
    summary = BundleSummary(path=str(path))
    index, payloads = _bundle_entries(cache, _selection(cache, keys), signing_key, summary)
    doc = {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION if signing_key is not None else 1,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "r1build": __version__,
        "entries": index,
    }
    index_bytes = canonical_json(doc)
    refused = replace_problem(path) or (None if force else _not_a_bundle(path))
    if refused is not None:
        raise BundleError(f"cannot write the bundle: {refused}")
    try:
        _write_bundle(path, index_bytes, payloads)
    except OSError as exc:
        raise BundleError(f"cannot write the bundle {path}: {exc}") from None
    summary.signed_by = signing_key.key_id if signing_key is not None else None
    summary.entries = _per_kind(e["kind"] for e in index)
    summary.payload_bytes = sum(e["size"] for e in index)
    summary.file_bytes = path.stat().st_size
    return summary


def _bundle_entries(
    cache: Cache, wanted: list[str], signing_key: PrivateKey | None, summary: BundleSummary
) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    """The index entries of ``wanted`` (signed but for blobs, with ``signing_key``) and their payloads by digest;
    an entry absent or corrupt is left out with a warning and listed in ``summary.missing``."""
    index: list[dict[str, Any]] = []
    payloads: dict[str, bytes] = {}
    for key in wanted:
        payload = cache.peek(key)
        if payload is None:
            summary.missing.append(key)
            emit(Note("warning", f"cache entry {key} is absent or corrupt; left out of the bundle"))
            continue
        digest = digest_bytes(payload)
        payloads[digest] = payload
        item: dict[str, Any] = {"key": key, "kind": kind_of(key), "sha256": digest, "size": len(payload)}
        if signing_key is not None and item["kind"] != "blob":
            item["signature"] = sign(entry_payload(key, payload), signing_key)
        index.append(item)
    return index, payloads


def _write_bundle(path: Path, index_bytes: bytes, payloads: dict[str, bytes]) -> None:
    """Write the bundle's zip to a temporary name next to ``path`` and rename it (the stale temporaries of
    killed exports removed first); raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.p{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        as_user_file(fd)  # the mode of any file the user writes, not mkstemp's 0600
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as zf:
            zf.comment = _COMMENT_PREFIX + digest_bytes(index_bytes).encode()
            _write_member(zf, INDEX_NAME, index_bytes)
            for digest in sorted(payloads):
                _write_member(zf, PAYLOAD_DIR + digest, payloads[digest])
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _not_a_bundle(path: Path) -> str | None:
    """Why an export may not replace the file at ``path``: it holds something else than a bundle (a manifest, a
    lock, a source named by mistake). None for nothing there, an empty file (``mktemp``'s) or an r1build bundle."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return None
        with zipfile.ZipFile(path) as zf:
            if zf.comment.startswith(_COMMENT_PREFIX):
                return None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        pass
    return f"{path} exists and is not an r1build bundle, use --force to replace it, or name another path"


def _remove_stale_temps(path: Path) -> None:
    """Remove the temporary files that earlier exports to ``path`` left when they were killed (their process is
    gone); a running export's file is left alone."""
    prefix = f".{path.name}.p"
    for tmp in path.parent.glob(f"{glob.escape(prefix)}*.tmp"):
        pid = pid_in(tmp.name[len(prefix) :].split(".", 1)[0])
        if pid is not None and process_gone(pid):
            tmp.unlink(missing_ok=True)
            emit(Note("info", f"removed {tmp}, left by an interrupted export (process {pid})"))


def _write_member(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def _per_kind(kinds: Iterable[str]) -> dict[str, int]:
    counts = Counter(kinds)
    return {k: counts[k] for k in KINDS}


# -- import ---------------------------------------------------------------------------------------------------
def import_bundle(cache: Cache, path: Path | str, *, trusted: TrustedKeys | None = None) -> BundleSummary:
    """Verify the whole bundle at ``path``, then add its entries to ``cache`` (see the module doc for conflicts).

    Raises :class:`~r1build.errors.BundleError` for a bundle that is unreadable, malformed, tampered with or over
    the bounds (:data:`MAX_ENTRY_BYTES`, :data:`MAX_EXPANSION`, the cache's size limit); the cache is then
    untouched. With ``trusted`` keys (non-empty), every entry but blobs must carry a signature by one of them:
    the others are refused, one warning each, and listed in ``refused``. Payloads are inflated a chunk at a time,
    to check them and again to store them; only a record (to parse it) or a small blob is held whole.
    """
    with _Opened(Path(path), cache.size_limit) as bundle:
        summary = BundleSummary(
            path=str(bundle.path),
            entries=_per_kind(e.kind for e in bundle.entries),
            payload_bytes=sum(e.size for e in bundle.entries),
            file_bytes=bundle.file_bytes,
        )
        entries = bundle.entries
        if trusted:
            entries = _trusted_entries(entries, trusted, summary)
        entries = [e for e in entries if not is_machine_local(e.key)]  # this machine's to make, never a bundle's
        order = sorted(entries, key=lambda e: (e.kind != "blob", e.key))  # blobs before what names them
        with cache.importing(), cache.transaction():
            for entry in order:
                _import_entry(cache, bundle, entry, summary, checked=bool(trusted))
    return summary


def _import_entry(cache: Cache, bundle: _Opened, entry: BundleEntry, summary: BundleSummary, *, checked: bool) -> None:
    """Add one verified entry to ``cache`` (in the import's transaction), noting what was done in ``summary`` and,
    for a record, its signer (the trusted key, or :data:`~.verdicts.UNCHECKED_IMPORT` where no signature was
    ``checked``)."""
    if entry.kind == "blob":  # its key is its digest: an intact local copy is the same bytes
        if cache.peek(entry.key) is not None:
            summary.unchanged.append(entry.key)
        elif entry.size > STREAM_FROM_BYTES:
            cache.put_stream(entry.key, entry.sha256, bundle.chunks(entry))
            summary.added.append(entry.key)
        else:
            cache.put_raw(entry.key, bundle.payload(entry))
            summary.added.append(entry.key)
        return
    payload = bundle.payload(entry)
    local = cache.peek(entry.key)
    problem = _self_contradiction(entry, payload)
    if local is None and problem is not None:  # never used (resolve refuses it), and `cache verify` would fail on it
        summary.refused[entry.key] = problem
        emit(Note("warning", f"{summary.path}: refused {entry.key}: {problem}"))
        return
    if local is None:
        cache.put_raw(entry.key, payload)
        summary.added.append(entry.key)
    elif local == payload:
        summary.unchanged.append(entry.key)
        return
    elif entry.kind == "decision" and _upgrades(local, payload):
        cache.put_raw(entry.key, payload)
        summary.replaced.append(entry.key)
    else:
        summary.kept.append(entry.key)
        return
    if entry.kind in ("decision", "gate"):  # kept for its signature (checked), or marked as taken unchecked
        cache.note_signer(entry.key, summary.verified.get(entry.key) if checked else UNCHECKED_IMPORT)


def _self_contradiction(entry: BundleEntry, payload: bytes) -> str | None:
    """Why the decision ``payload`` contradicts itself (:func:`~r1build.selection.rules.decision_problem`); None
    for one that does not, or an entry of another kind. The remote cache treats such a decision as corrupt."""
    from ..selection.rules import decision_problem

    if entry.kind != "decision":
        return None
    try:
        decision = from_json(Decision, payload)
    except ValueError as exc:  # JSON that is no decision record (its digest matched: made so)
        return f"not a decision record ({str(exc)[:200]})"
    return decision_problem(decision)


def _trusted_entries(entries: list[BundleEntry], trusted: TrustedKeys, summary: BundleSummary) -> list[BundleEntry]:
    """The entries to import: blobs, and the others whose signature a trusted key made; a warning for each other.
    (Each payload's sha256 was checked as the bundle was opened, and is again as it is stored.)"""
    kept: list[BundleEntry] = []
    for entry in entries:
        if entry.kind == "blob":
            kept.append(entry)
            continue
        try:
            summary.verified[entry.key] = verify(entry_statement(entry.key, entry.sha256), entry.signature, trusted)
        except SignatureError as exc:
            summary.refused[entry.key] = str(exc)
            emit(Note("warning", f"{summary.path}: refused {entry.key}: {exc}"))
            continue
        kept.append(entry)
    return kept


def _upgrades(local: bytes, incoming: bytes) -> bool:
    """Whether an incoming decision replaces a local one: judged on a GPU where the local one was not, or by
    newer GPU checks (a version this r1build knows: a higher one is a claim it cannot weigh). Never one that
    contradicts itself (:func:`~r1build.selection.rules.decision_problem`): the good local one would be lost for it."""
    from ..judge import CHECKS_VERSION
    from ..selection.rules import decision_problem

    new, old = from_json(Decision, incoming), from_json(Decision, local)
    if not new.on_gpu or (new.checks or 0) > CHECKS_VERSION or decision_problem(new) is not None:
        return False
    return not old.on_gpu or (new.checks or 0) > (old.checks or 0)


def read_bundle(path: Path | str, *, max_bytes: int | None = None) -> tuple[list[BundleEntry], dict[str, bytes]]:
    """The index entries and payloads (by sha256) of a bundle, all verified; :class:`BundleError` otherwise,
    also for a bundle over the bounds (:data:`MAX_ENTRY_BYTES`, :data:`MAX_EXPANSION`, ``max_bytes`` in all),
    told from the declared sizes before anything is inflated. Holds every payload: import streams instead."""
    with _Opened(Path(path), max_bytes) as bundle:
        return bundle.entries, {e.sha256: bundle.payload(e) for e in bundle.entries}


_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError, RuntimeError)


class _Opened:
    """A bundle opened and checked (index, members, bounds, every payload inflated once to check its length,
    sha256 and shape), whose payloads can then be read again, a chunk at a time, checked again as they are."""

    def __init__(self, path: Path, max_bytes: int | None) -> None:
        self.path = path
        try:
            if path.exists() and not path.is_file() and not path.is_dir():  # zipfile would read /dev/zero to the end
                raise BundleError(f"{path}: not a readable bundle (not a regular file: a device, a FIFO or a socket)")
            self._zf = zipfile.ZipFile(path, "r")
        except FileNotFoundError:
            raise BundleError(f"{path}: no such bundle") from None
        except _ZIP_ERRORS as exc:
            raise BundleError(f"{path}: not a readable bundle ({exc})") from None
        try:
            self.file_bytes = os.fstat(self._zf.fp.fileno()).st_size if self._zf.fp else 0
            self.entries, self._members = _checked_index(self._zf, path, self.file_bytes, max_bytes, self.bad)
            self._check_payloads()
        except BaseException:
            self._zf.close()
            raise

    def bad(self, message: str) -> BundleError:
        return BundleError(f"{self.path}: {message}; nothing was imported")

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self._zf.close()

    def chunks(self, entry: BundleEntry) -> Iterator[bytes]:
        """The payload of ``entry``, inflated :data:`CHUNK_BYTES` at a time; :class:`BundleError` (after the last
        chunk at the latest) when its length or sha256 is not the index's."""
        info = self._members[PAYLOAD_DIR + entry.sha256]
        what = f"entry {entry.key} ({info.filename})"
        digest, size = hashlib.sha256(), 0
        try:
            with self._zf.open(info) as fh:
                while chunk := fh.read(CHUNK_BYTES):
                    size += len(chunk)
                    if size > entry.size:
                        break
                    digest.update(chunk)
                    yield chunk
        except _ZIP_ERRORS as exc:
            raise self.bad(f"{what} is damaged ({exc})") from None
        if size != entry.size:
            raise self.bad(f"entry {entry.key}: payload is {size} bytes or more, the index says {entry.size}")
        if digest.hexdigest() != entry.sha256:
            raise self.bad(f"entry {entry.key}: payload does not match its sha256")

    def payload(self, entry: BundleEntry) -> bytes:
        """The whole payload of ``entry``, checked as :meth:`chunks` checks it."""
        return b"".join(self.chunks(entry))

    def _check_payloads(self) -> None:
        """Inflate every payload once: its length and sha256, and that each record parses as its kind (a
        decision's key must be the key it is filed under). Only a record is held, one at a time."""
        by_digest: dict[str, list[BundleEntry]] = {}
        for entry in self.entries:
            by_digest.setdefault(entry.sha256, []).append(entry)
        for group in by_digest.values():
            if all(e.kind == "blob" for e in group):  # a blob's key is its digest, checked with the index
                for _ in self.chunks(group[0]):
                    pass
                continue
            data = self.payload(group[0])
            for entry in group:
                reason = check_payload(entry.key, data)
                if reason is not None:
                    raise self.bad(f"entry {entry.key}: {reason}")


def _checked_index(
    zf: zipfile.ZipFile, path: Path, file_bytes: int, max_bytes: int | None, bad: _Bad
) -> tuple[list[BundleEntry], dict[str, zipfile.ZipInfo]]:
    """The index's entries, and the zip members by name, once the index digest, its shape, the members (each
    listed, each listed one present, of the size the index says) and the bounds are checked."""
    infos = zf.infolist()
    names = [i.filename for i in infos]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise bad(f"member {duplicates[0]!r} appears more than once")
    members = {i.filename: i for i in infos}
    if INDEX_NAME not in members:
        raise bad(f"no {INDEX_NAME}")
    if members[INDEX_NAME].file_size > _MAX_INDEX_BYTES:
        raise bad(f"{INDEX_NAME} is too large")
    index_bytes = _index_member(zf, members[INDEX_NAME], bad)
    if not zf.comment.startswith(_COMMENT_PREFIX):
        raise bad("the zip comment carries no index digest (not an r1build bundle?)")
    if zf.comment[len(_COMMENT_PREFIX) :].decode("ascii", "replace") != digest_bytes(index_bytes):
        raise bad(f"{INDEX_NAME} does not match its digest: the index was altered")
    entries = _parse_index(index_bytes, bad)
    listed = {PAYLOAD_DIR + e.sha256 for e in entries}
    unknown = sorted(set(members) - listed - {INDEX_NAME})
    if unknown:
        raise bad(f"member {unknown[0]!r} is not listed in the index")
    _check_sizes(entries, file_bytes, max_bytes, bad)
    for entry in entries:
        info = members.get(PAYLOAD_DIR + entry.sha256)
        if info is None:
            raise bad(f"entry {entry.key}: its payload {PAYLOAD_DIR + entry.sha256} is missing")
        if info.file_size != entry.size:
            raise bad(f"entry {entry.key}: payload is {info.file_size} bytes, the index says {entry.size}")
    return entries, members


def _check_sizes(entries: list[BundleEntry], file_bytes: int, max_bytes: int | None, bad: _Bad) -> None:
    """Refuse a payload over :data:`MAX_ENTRY_BYTES` (a record: :data:`MAX_RECORD_BYTES`), payloads over
    ``max_bytes`` together, or together over :data:`MAX_EXPANSION` times the bundle file (beyond
    :data:`EXPANSION_ALLOWANCE`), from the sizes the index declares (each is checked against its zip member's
    size, and its payload against it as it is inflated)."""
    for entry in entries:
        limit = MAX_ENTRY_BYTES if entry.kind == "blob" else MAX_RECORD_BYTES
        if entry.size > limit:
            raise bad(
                f"entry {entry.key}: its payload of {entry.size} bytes is over the {limit} bytes "
                f"{'an entry' if entry.kind == 'blob' else 'a record'} may hold (no source, transcript or record is "
                "that large)"
            )
    total = sum(e.size for e in entries)  # each entry is stored apart, even where payloads are shared
    if total > max(EXPANSION_ALLOWANCE, MAX_EXPANSION * file_bytes):
        raise bad(
            f"its payloads would take {total} bytes uncompressed, {total // max(file_bytes, 1)} times the "
            f"{file_bytes} bytes of the bundle: over the {MAX_EXPANSION} times (or {EXPANSION_ALLOWANCE} bytes) a "
            "bundle may expand to (a decompression bomb?)"
        )
    if max_bytes is not None and total > max_bytes:
        raise bad(
            f"its payloads take {total} bytes, more than the cache's size limit of {max_bytes} bytes (importing "
            "them would evict what the cache holds; `r1build cache gc --max-size` raises the limit)"
        )


def _index_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, bad: _Bad) -> bytes:
    try:
        with zf.open(info) as fh:
            data: bytes = fh.read(info.file_size + 1)
    except _ZIP_ERRORS as exc:
        raise bad(f"{info.filename} is damaged ({exc})") from None
    return data


def _parse_index(data: bytes, bad: _Bad) -> list[BundleEntry]:
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise bad(f"{INDEX_NAME} is not JSON ({exc})") from None
    except RecursionError:
        raise bad(f"{INDEX_NAME} is not an r1build bundle index (JSON nested too deeply)") from None
    if not isinstance(doc, dict) or doc.get("format") != BUNDLE_FORMAT:
        raise bad(f"{INDEX_NAME} is not an r1build bundle index")
    version = doc.get("version")
    if version not in _VERSIONS or isinstance(version, bool):
        raise bad(
            f"bundle version {version!r} is not supported (this r1build reads versions "
            f"{', '.join(map(str, _VERSIONS))})"
        )
    raw_entries = doc.get("entries")
    if not isinstance(raw_entries, list):
        raise bad(f"{INDEX_NAME}: 'entries' is not a list")
    entries: list[BundleEntry] = []
    seen: set[str] = set()
    for i, item in enumerate(raw_entries):
        where = f"{INDEX_NAME} entry {i}"
        signed = version >= 2 and isinstance(item, dict) and item.get("kind") != "blob"
        if not isinstance(item, dict) or set(item) - {"signature"} != _FIELDS or ("signature" in item and not signed):
            fields = "key, kind, sha256, size" + (" and optionally signature" if signed else "")
            raise bad(f"{where}: expected exactly the fields {fields}")
        key, kind, sha, size = item["key"], item["kind"], item["sha256"], item["size"]
        signature = item.get("signature")
        if signature is not None and not isinstance(signature, str):
            raise bad(f"{where}: signature must be a string")
        if not isinstance(key, str) or not isinstance(kind, str) or not isinstance(sha, str):
            raise bad(f"{where}: key, kind and sha256 must be strings")
        if kind not in KINDS:
            raise bad(f"{where}: unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
        if not key.startswith(kind + "/") or len(key) <= len(kind) + 1:
            raise bad(f"{where}: key {key!r} is not a {kind} key")
        if len(sha) != 64 or not set(sha) <= _HEX:
            raise bad(f"{where}: sha256 {sha!r} is not a sha256 digest")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad(f"{where}: size {size!r} is not a byte count")
        if key in seen:
            raise bad(f"{where}: key {key} is listed twice")
        if kind == "blob" and key != f"blob/{sha}":
            raise bad(f"{where}: blob key {key} is not its content's digest {sha}")
        seen.add(key)
        entries.append(BundleEntry(key, kind, sha, size, signature))
    return entries
