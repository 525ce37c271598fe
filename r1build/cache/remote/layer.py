"""The remote cache as a layer behind the local one: verified reads, signed publishing, one warning on faults.

Objects (under the store's prefix)
    ``r1build-v1/blob/<sha256>``: the bytes themselves, verified against the key on every read.
    ``r1build-v1/decision/<decision key>`` and ``r1build-v1/gate/<gate key>``: records, each
    ``<sha256 of payload>\\n<signature>\\n<payload>``, the payload a decision or static-gate result as JSON and
    the signature :func:`r1build.trust.signing.sign` of :func:`r1build.trust.signing.entry_payload` of its cache key
    (``decision/<key>``) and payload, as bundles sign their entries: a record signed for one key cannot be
    replayed under another. Gate results are signed too: a forged "passed" would skip the static gate.

Reading
    A blob whose bytes do not match its digest, or a record whose digest line, shape or key does not match,
    is corrupt: reported with a warning and never used. A record whose signature does not verify against the
    manifest's ``trusted-keys`` (unsigned, another key, bad signature) is refused with a warning. Either is a
    miss: the run goes on from the local cache, the lock and the manifest's sources.

Writing
    Only a run that asked (``--remote-write`` / ``R1BUILD_REMOTE_WRITE=1``), with the team's signing key. A
    decision is published after every blob it names is on the remote (each uploaded unless there already), so
    a reader that finds a decision finds its blobs. Blobs are content-addressed and immutable; a decision under
    its key is replaced whole by a newer one (each backend's put is atomic), and a torn object is a corrupt
    read, that is a miss.

Asking
    The remote is asked only on a local miss, and each object at most once a run: what it said it lacks is
    remembered (until this run publishes it). Its first request runs on a thread of its own. Until it is
    answered, what the run can do without (a gate result: the static gate compiles locally meanwhile; the
    decision that might reject a locked winner) waits for it until :data:`FIRST_ANSWER_S` after it began, then
    is a miss; a decision the run would otherwise work out, or a blob, waits for it. The run's end waits for it
    too, so a remote that never answers costs its timeout once, beside the local work.

Faults
    The first failed request (refused, timed out, an HTTP error, missing credentials) turns the remote off for
    the rest of the run with one warning line: a circuit breaker, so a down or slow remote costs one timeout.
    A write the remote answers with a refusal (HTTP 401, 403 or 405, S3's AccessDenied: credentials that may read
    and not write) turns publishing off instead, with its own warning line; reading goes on.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar, get_args

from ...convert import record
from ...errors import RemoteCacheError, SignatureError
from ...events import Note, emit
from ...keys import digest_bytes
from ...records import Decision, from_json
from ...selection.rules import decision_problem
from ..codec import RecordKind, check_payload
from .store import RemoteRefused, RemoteStore, RemoteUnavailable

if TYPE_CHECKING:
    from ...trust.signing import PrivateKey, TrustedKeys
    from ..storage import Storage
    from ..store import Cache

__all__ = ["RECORD_KINDS", "ROOT", "RemoteLayer", "RemoteProblem", "blob_key", "record_key"]

ROOT = "r1build-v1"
"""Where r1build's objects live under a store's prefix (the layout's version)."""
FIRST_ANSWER_S = 0.5
"""Seconds a request the run can do without (a gate result) waits for the remote's first answer of the run: a
remote that answers is used from the start, one that does not holds local work up no longer."""
RECORD_KINDS: tuple[RecordKind, ...] = get_args(RecordKind)
"""The kinds of signed records on a remote."""
T = TypeVar("T")


def blob_key(digest: str) -> str:
    """The remote key of a blob."""
    return f"{ROOT}/blob/{digest}"


def record_key(kind: str, key: str) -> str:
    """The remote key of the record of ``kind`` (``decision`` or ``gate``) under ``key``."""
    return f"{ROOT}/{kind}/{key}"


def signed_message(kind: str, key: str, payload: bytes) -> bytes:
    """What a record's signature covers: its cache key and its payload's digest (as a bundle entry's)."""
    from ...trust.signing import entry_payload

    return entry_payload(f"{kind}/{key}", payload)


@record(frozen=True)
class RemoteProblem:
    """An object on the remote that must not be used."""

    key: str
    """The remote key."""
    reason: str
    """What is wrong with it."""
    kind: str
    """``corrupt`` (its bytes do not verify) or ``refused`` (its signature does not)."""


class _Off(Exception):
    """The remote is off for this run (or, for a caller that does not wait, not known to be on yet)."""


class _First:
    """The run's first request to the remote, on a thread of its own: its answer, or that it failed."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.grace_until = time.monotonic() + FIRST_ANSWER_S
        """Until when a caller that need not wait waits for it (once a run, not once a caller)."""
        self.value: object = None
        self.failed = False


def _split_record(raw: bytes) -> tuple[str, str, bytes]:
    """Digest line, signature line and payload of a record object; ValueError when it has not that shape."""
    first = raw.find(b"\n")
    second = raw.find(b"\n", first + 1)
    if first != 64 or second < 0:
        raise ValueError("not a record object (digest and signature lines, then the record)")
    return raw[:64].decode("ascii", "replace"), raw[first + 1 : second].decode("ascii", "replace"), raw[second + 1 :]


class RemoteLayer:
    """The remote behind a local :class:`~r1build.cache.Cache` (its :class:`~r1build.cache.storage.Fallback`)."""

    def __init__(self, store: RemoteStore, *, trusted: TrustedKeys, signing_key: PrivateKey | None = None) -> None:
        self.store = store
        self.url = store.url
        self.trusted = trusted
        self.signing_key = signing_key
        """The key decisions are published with; None: read-only."""
        self.down: str | None = None
        """Why the remote is off for the rest of the run, or None."""
        self.unwritable: str | None = None
        """Why publishing is off for the rest of the run (the remote refused a write), or None."""
        self.counts: Counter[str] = Counter()
        """What happened: ``decision`` / ``gate`` / ``blobs`` fetched, ``published`` records, ``uploaded``
        blobs, ``corrupt`` and ``refused`` objects, ``untrusted`` lookups skipped (no trusted keys)."""
        self._lock = threading.Lock()
        self._owner = threading.get_ident()
        self._pending: list[Note] = []
        self._unusable: set[str] = set()
        """Remote keys found corrupt or refused this run: not asked (nor warned about) again."""
        self._absent: set[str] = set()
        """Remote keys the remote said it lacks this run: not asked again (until this run puts one)."""
        self._first_request: _First | None = None

    @property
    def write(self) -> bool:
        """Whether this run publishes to the remote."""
        return self.signing_key is not None

    # -- notes -------------------------------------------------------------------------------------------
    def _say(self, note: Note) -> None:
        """Emit ``note`` on the thread that made the layer (where the caller's event sink is installed); notes
        from other threads (the static gate's compile pool) wait for that thread's next call, or :meth:`close`."""
        with self._lock:
            self._pending.append(note)
        if threading.get_ident() == self._owner:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for note in pending:
            emit(note)

    # -- faults ------------------------------------------------------------------------------------------
    def _first(self, flag: str, why: str) -> bool:
        """Set the reason ``flag`` (``down`` or ``unwritable``) to ``why`` unless set; whether this call set it."""
        with self._lock:
            first = getattr(self, flag) is None
            if first:
                setattr(self, flag, why)
        return first

    def _call(self, call: Callable[[], T], *, wait: bool = True) -> T:
        """``call``'s answer; the first failure turns the remote off (said once) and raises :class:`_Off`. The
        run's first request runs on a thread of its own (:meth:`_start`); until it is answered, a caller that
        does not ``wait`` waits for it until :data:`FIRST_ANSWER_S` after it began (then :class:`_Off`), one
        that does until it ends (bounded by the store's timeout)."""
        if self.down is not None:
            raise _Off
        with self._lock:
            first = self._first_request
            mine = first is None
            if first is None:
                first = self._first_request = self._start(call)
        patience = None if wait else max(0.0, first.grace_until - time.monotonic())
        if not first.done.is_set() and not first.done.wait(patience):
            raise _Off
        if mine:
            if first.failed:
                raise _Off
            return first.value  # type: ignore[return-value]
        if self.down is not None:
            raise _Off
        try:
            return call()
        except RemoteUnavailable as exc:
            self._turn_off(exc)
            raise _Off from None

    def _start(self, call: Callable[[], object]) -> _First:
        """Run ``call`` (the run's first request) on a daemon thread: a remote that never answers holds up only
        what must wait for it."""
        first = _First()

        def ask() -> None:
            try:
                first.value = call()
            except RemoteUnavailable as exc:
                first.failed = True
                self._turn_off(exc)
            except BaseException:  # a backend's bug: the remote is off, the caller sees a miss
                first.failed = True
                self._turn_off(RemoteUnavailable("the first request failed"))
            finally:
                first.done.set()

        threading.Thread(target=ask, name="r1build-remote-first", daemon=True).start()
        return first

    def _write(self, key: str, data: bytes) -> None:
        """Put one object; a refusal turns publishing off (said once), any other failure the remote (:meth:`_call`),
        and either raises :class:`_Off`."""
        if self.down is not None or self.unwritable is not None:
            raise _Off
        try:
            self.store.put(key, data)
            with self._lock:
                self._absent.discard(key)
        except RemoteRefused as exc:
            if self._first("unwritable", str(exc)):
                self._say(
                    Note(
                        "warning",
                        f"remote cache {self.url} refused a write ({exc}); not publishing to it for the rest of "
                        "this run (reading from it goes on)",
                    )
                )
            raise _Off from None
        except RemoteUnavailable as exc:
            self._turn_off(exc)
            raise _Off from None

    def _turn_off(self, exc: RemoteUnavailable) -> None:
        """The remote is off for the rest of the run; the first time, say so."""
        if self._first("down", str(exc)):
            self._say(
                Note(
                    "warning",
                    f"remote cache {self.url} is unavailable ({exc}); going on without it "
                    "for this run (local cache, lock and the manifest's sources)",
                )
            )

    def _problem(self, problem: RemoteProblem) -> None:
        with self._lock:
            self.counts[problem.kind] += 1
            self._unusable.add(problem.key)
        what = "is corrupt" if problem.kind == "corrupt" else "is refused"
        self._say(Note("warning", f"remote cache {self.url}: {problem.key} {what} ({problem.reason}); not using it"))

    # -- checks ------------------------------------------------------------------------------------------
    def check_blob(self, digest: str, data: bytes) -> RemoteProblem | None:
        """Why the remote bytes under ``digest`` must not be used, or None."""
        if digest_bytes(data) != digest:
            return RemoteProblem(blob_key(digest), "its bytes do not match its digest", "corrupt")
        return None

    def check_record(self, kind: str, key: str, raw: bytes) -> tuple[bytes | None, RemoteProblem | None]:
        """The usable payload of a record object, else why it must not be used."""
        found = self._checked(kind, key, raw)
        return (None, found) if isinstance(found, RemoteProblem) else (found[0], None)

    def _checked(self, kind: str, key: str, raw: bytes) -> tuple[bytes, str] | RemoteProblem:
        """The usable payload of a record object and the id of the trusted key that signed it, else why it must
        not be used."""
        from ...trust.signing import verify

        where = record_key(kind, key)
        try:
            digest, signature, payload = _split_record(raw)
        except ValueError as exc:
            return RemoteProblem(where, str(exc), "corrupt")
        if digest_bytes(payload) != digest:
            return RemoteProblem(where, "its record does not match its digest", "corrupt")
        reason = check_payload(f"{kind}/{key}", payload)
        if reason is None and kind == "decision":  # one that contradicts itself is never used, signed or not
            reason = decision_problem(from_json(Decision, payload))
        if reason is not None:
            return RemoteProblem(where, reason, "corrupt")
        try:
            signer = verify(signed_message(kind, key, payload), signature, self.trusted)
        except SignatureError as exc:
            return RemoteProblem(where, str(exc), "refused")
        return payload, signer

    # -- Fallback ----------------------------------------------------------------------------------------
    def blob(self, digest: str) -> bytes | None:
        if threading.get_ident() == self._owner:
            self._flush()
        where = blob_key(digest)
        if where in self._unusable or where in self._absent:
            return None
        try:
            data = self._call(lambda: self.store.get(where))
        except _Off:
            return None
        if data is None:
            with self._lock:
                self._absent.add(where)
            return None
        problem = self.check_blob(digest, data)
        if problem is not None:
            self._problem(problem)
            return None
        with self._lock:
            self.counts["blobs"] += 1
        return data

    def record(self, kind: str, key: str, *, wait: bool = True) -> tuple[bytes, str] | None:
        if threading.get_ident() == self._owner:
            self._flush()
        if not self.trusted:  # said once, at close, unless the remote turned out to be down anyway
            with self._lock:
                self.counts["untrusted"] += 1
            return None
        where = record_key(kind, key)
        if where in self._unusable or where in self._absent:
            return None
        try:
            raw = self._call(lambda: self.store.get(where), wait=wait)
        except _Off:
            return None
        if raw is None:
            with self._lock:
                self._absent.add(where)
            return None
        found = self._checked(kind, key, raw)
        if isinstance(found, RemoteProblem):
            self._problem(found)
            return None
        with self._lock:
            self.counts[kind] += 1
        return found

    def stored(self, cache: Storage, kind: str, key: str, payload: bytes) -> None:
        if self.signing_key is not None and self.unwritable is None:
            with contextlib.suppress(_Off):
                self.publish(cache, kind, key, payload)

    def publish(self, cache: Storage, kind: str, key: str, payload: bytes) -> bool:
        """Upload a record, after every blob it names (from ``cache``); whether it was published. Raises
        :class:`_Off` when the remote is off (said once)."""
        from ...trust.signing import sign

        assert self.signing_key is not None, "publishing needs the signing key"
        decision = from_json(Decision, payload) if kind == "decision" else None
        problem = decision_problem(decision) if decision is not None else None
        if problem is not None:  # readers would find it corrupt: the team's key does not sign it
            self._say(Note("warning", f"not publishing {kind}/{key[:16]} to {self.url}: {problem}"))
            return False
        digests = decision.blobs() if decision is not None else []
        for digest in digests:
            if self._call(lambda d=digest: self.store.head(blob_key(d))):  # type: ignore[misc]
                continue
            data = cache.peek(f"blob/{digest}")
            if data is None:
                self._say(
                    Note(
                        "warning",
                        f"not publishing {kind}/{key[:16]} to {self.url}: blob {digest[:16]}, "
                        "which it names, is not in the local cache",
                    )
                )
                return False
            self._write(blob_key(digest), data)
            with self._lock:
                self.counts["uploaded"] += 1
        signature = sign(signed_message(kind, key, payload), self.signing_key)
        body = digest_bytes(payload).encode() + b"\n" + signature.encode() + b"\n" + payload
        self._write(record_key(kind, key), body)
        with self._lock:
            self.counts["published"] += 1
        return True

    # -- maintenance (``cache push`` / ``cache verify --remote``) ------------------------------------------
    def _required(self, call: Callable[[], T]) -> T:
        try:
            return self._call(call)
        except _Off:
            if self.down is None and self.unwritable is not None:
                raise RemoteCacheError(f"remote cache {self.url} refused a write: {self.unwritable}") from None
            raise RemoteCacheError(f"remote cache {self.url} is unavailable: {self.down}") from None

    def push(self, cache: Cache) -> tuple[int, int]:
        """Publish every decision and gate result of ``cache`` that the remote lacks (blobs first); returns
        (published, already there). :class:`~r1build.errors.RemoteCacheError` when the remote fails."""
        published = present = 0
        for entry in cache.entries():
            if entry.kind not in RECORD_KINDS:
                continue
            key = entry.key.split("/", 1)[1]
            payload = cache.peek(entry.key)
            if payload is None:
                continue
            if self._required(lambda k=key, e=entry: self.store.head(record_key(e.kind, k))):  # type: ignore[misc]
                present += 1
            elif self._required(lambda k=key, e=entry, p=payload: self.publish(cache, e.kind, k, p)):  # type: ignore[misc]
                published += 1
        return published, present

    def audit(self, decision_keys: Iterable[str] = ()) -> tuple[int, list[RemoteProblem]]:
        """Check what is on the remote: every object where the backend can list, else the decisions under
        ``decision_keys`` (a lock's) and the blobs they name. Digests, shapes, signatures, and that each
        decision's blobs are there. Returns (objects checked, problems)."""

        def listing() -> list[str] | None:  # listed whole here: a backend's listing fails as it is iterated
            keys = self.store.keys(f"{ROOT}/")
            return None if keys is None else list(keys)

        listed = self._required(listing)
        names = listed if listed is not None else [record_key("decision", k) for k in decision_keys]
        checked = 0
        problems: list[RemoteProblem] = []
        blobs_named: set[str] = set()
        seen_blobs: set[str] = set()
        for name in names:
            parts = name.split("/")
            if len(parts) != 3 or parts[0] != ROOT or parts[1] not in ("blob", *RECORD_KINDS):
                problems.append(RemoteProblem(name, "not an object r1build writes", "corrupt"))
                continue
            raw = self._required(lambda n=name: self.store.get(n))  # type: ignore[misc]
            if raw is None:
                continue  # a lock entry with no decision on the remote: nothing to check
            checked += 1
            kind, key = parts[1], parts[2]
            if kind == "blob":
                seen_blobs.add(key)
                problem = self.check_blob(key, raw)
                if problem is not None:
                    problems.append(problem)
                continue
            _, problem = self.check_record(kind, key, raw)
            if problem is not None:
                problems.append(problem)
            if kind == "decision":  # its blobs are checked even when it is refused: they are content-addressed
                with contextlib.suppress(ValueError):
                    blobs_named.update(from_json(Decision, _split_record(raw)[2]).blobs())
        for digest in sorted(blobs_named - seen_blobs):
            raw = self._required(lambda d=digest: self.store.get(blob_key(d)))  # type: ignore[misc]
            if raw is None:
                problems.append(RemoteProblem(blob_key(digest), "a decision names it, but it is missing", "corrupt"))
                continue
            checked += 1
            problem = self.check_blob(digest, raw)
            if problem is not None:
                problems.append(problem)
        return checked, problems

    def close(self) -> None:
        first = self._first_request
        if first is not None:
            first.done.wait()  # bounded by the store's timeout: its warning is said before the run's summary
        self.store.close()
        self._flush()
        with self._lock:
            counts, self.counts = self.counts, Counter()
        if counts["untrusted"] and self.down is None:
            emit(
                Note(
                    "warning",
                    f"remote cache {self.url}: its decisions and gate results were not used: "
                    "[cache] trusted-keys is empty, so no signature can be trusted",
                )
            )
        parts = [
            f"{counts[name]} {label}"
            for name, label in (
                ("decision", "decisions fetched"),
                ("gate", "gate results fetched"),
                ("blobs", "blobs fetched"),
                ("published", "records published"),
                ("uploaded", "blobs uploaded"),
                ("corrupt", "corrupt objects skipped"),
                ("refused", "records refused"),
            )
            if counts[name]
        ]
        if parts:
            emit(Note("info", f"remote cache {self.url}: {', '.join(parts)}"))
