"""The warm path of read-only commands: ``status``, ``resolve --locked`` and ``check --locked``, run again with
nothing changed, print what their last run printed without importing the resolver, GPU or LLM code.

After such a command succeeds (exit 0) in a process of its own (the ``r1build`` console script, not a call of
:func:`r1build.cli.main.main` with arguments), a *record* is stored in the user's state folder
(``replay/<key>.json`` beside the secret below; the newest 256 are kept), under a key that digests everything the
answer could depend on besides files and the cache: the arguments, the working directory, the variables that may
change the answer (:func:`r1build.settings.answer_environment`: r1build's own, the toolchain lookup's, Python's,
the locale's, the terminal's; not a CI job's own), whether stdout and stderr are terminals and their size, the
Python, and r1build's own code (its files' sizes and times). The record holds what the run printed (stdout and
stderr, in order) and what it read:

- files: the manifest, the places a manifest is looked for, the lock, the vendored folder, and every kernel's
  reference module, baseline and candidate files, each by the sha256 of its bytes and its real path (a file
  swapped for a link to the same bytes differs); the manifest and those places also by what r1build reads of
  them, parsed (:func:`_toml_view`), so an edit that changes no answer (a comment, blank lines, the order of
  keys; in a ``pyproject.toml``, anything outside ``[tool.r1build]``, such as its version) still replays;
- the modules the run imported (the references among them): those inside the project by sha256, the others by
  size and modification time;
- every cache entry read, by key, with the sha256 of the bytes stored (an absent or unreadable entry included);
- the nvcc the run would use, by its identity (:func:`r1build.toolchain.nvcc.nvcc_identity`).

The next run with the same key checks all of it (hashing the files, reading the cache's rows read-only) and,
when everything matches, prints the record; any difference, anything it cannot read, or no record runs the
command in full, which records again. A run that handed a local miss to a remote cache is not recorded (the
remote may answer next time; a run the lock and the local cache settle asks it nothing), nor is a run on a
degraded cache. What this path skips: the cache's hit statistics (a replayed run counts nothing) and files a
reference reads at run time other than modules.

Records are kept out of every cache (others may write a shared cache, a restored CI cache, an imported bundle):
whoever could write one could otherwise store a record that names today's files and prints yesterday's answer
(``check --locked`` saying "current and verified" of a lock every build refuses). A record also carries an
HMAC-SHA256 over its command line's key and its contents, made with a secret in the same folder
(:func:`r1build.settings.user_state_dir`), mode 0600, made on first use. A record whose MAC does not verify, or
any doubt about the secret (missing, another user's, readable by others, inside the cache the record names),
means no replay and no record: the command runs in full. Earlier releases kept records in the cache
(``json/replay/``); those are never read, and bundles never carry them.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

from .. import __version__
from ..digests import code_fingerprint, path_digest, toml_digest

if TYPE_CHECKING:
    import argparse
    import sqlite3

    from ..cache import Cache
    from ..manifest import Manifest

__all__ = ["NAMESPACE", "Recorder", "active", "eligible", "record_key", "replay"]

NAMESPACE = "replay"
"""The cache's JSON namespace where earlier releases kept records (``json/replay/<key>``): never read now, and
never exported (machine-local, :mod:`r1build.cache.bundle`)."""
_FORMAT = 3
_KEY_NAME = "replay-record.key"


def _cache_flag(argv: Sequence[str]) -> str | None:
    """The value of ``--cache-dir`` as given (where the record is looked for; the record names the cache it
    checks, so a guess that is wrong only finds no record)."""
    for i, arg in enumerate(argv):
        if arg == "--cache-dir" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--cache-dir="):
            return arg.partition("=")[2]
    return None


def _record_dir(argv: Sequence[str]) -> Path:
    from ..cache import resolve_cache_dir

    return resolve_cache_dir(_cache_flag(argv)).resolve()


def _terminal() -> list[Any]:
    ttys = [stream.isatty() for stream in (sys.stdout, sys.stderr)]
    size = list(os.get_terminal_size(sys.stdout.fileno() if ttys[0] else sys.stderr.fileno())) if any(ttys) else []
    return [ttys, size]


_KEYS: dict[tuple[str, ...], str] = {}
"""The key :func:`replay` made for a command line it did not answer, for the :func:`recording` of the same run
that follows it at once (taken from here by it: a later run makes its own)."""


def record_key(argv: Sequence[str]) -> str:
    """The key of the record for this command line in this process's context."""
    return _KEYS.pop(tuple(argv), None) or _record_key(argv)


def _record_key(argv: Sequence[str]) -> str:
    from ..settings import answer_environment

    env = answer_environment()
    parts = [
        _FORMAT,
        __version__,
        sys.executable,
        sys.version,
        str(Path.cwd()),
        list(argv),
        env,
        _terminal(),
        list(code_fingerprint()),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _stored_digest(raw: bytes | str | None) -> str | None:
    if raw is None:
        return None
    return hashlib.sha256(raw).hexdigest() if isinstance(raw, bytes) else "unreadable"


def _file_state(path: Path) -> str | None:
    """Real path and digest of a file or folder (None when absent)."""
    digest = path_digest(path)
    return None if digest is None else f"{path.resolve()}:{digest}"


_TOML_PLACES = ("kernels.toml", "pyproject.toml")


def _file_states(manifest: Manifest, files: list[Path]) -> dict[str, str | None]:
    """:func:`_file_state` of each of ``files``; a baseline or candidate file by the digest of the bytes the run
    read and used (the keys read each once: :func:`~r1build.keys.project_file`), not read and hashed again."""
    from ..keys import project_file

    own = {manifest.root / rel: rel for spec in manifest.kernels for rel in (spec.baseline, *spec.candidates) if rel}
    out: dict[str, str | None] = {}
    for path in files:
        rel = own.get(path)
        if rel is not None:
            with contextlib.suppress(OSError):  # gone (or never there): as the record of an absent file says
                out[str(path)] = f"{path.resolve()}:{project_file(manifest, rel)[1]}"
                continue
        out[str(path)] = _file_state(path)
    return out


def _toml_view(path: Path) -> str | None:
    """sha256 of what r1build reads of a TOML file it may take the manifest from: the whole of a ``kernels.toml``
    (or of a manifest of another name), the ``[tool.r1build]`` table of a ``pyproject.toml``; None when it cannot be
    read or parsed. Two texts with the same view (a comment, blank lines, keys in another order) give every
    command the same answer."""
    if sys.version_info >= (3, 11):  # here: only a manifest whose bytes changed is parsed
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib

    try:
        data: Any = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError, ValueError):
        return None
    if path.name == "pyproject.toml":
        tool = data.get("tool")
        data = tool.get("r1build") if isinstance(tool, dict) else None
    return toml_digest(data)


def _file_holds(path: str, state: str | None, views: dict[str, str | None]) -> bool:
    """Whether a file the run read is as it was: the same bytes at the same real path, or, for a manifest or a
    place one is looked for (``views``), the same real path and the same :func:`_toml_view`."""
    now = _file_state(Path(path))
    if now == state:
        return True
    if path not in views or now is None or state is None or now.rpartition(":")[0] != state.rpartition(":")[0]:
        return False
    view = views[path]
    return view is not None and _toml_view(Path(path)) == view


def _installed(path: str) -> bool:
    return f"-packages{os.sep}" in path


def _module_state(path: str, root: str) -> str | None:
    try:
        if path.startswith(root) and not _installed(path):
            return hashlib.sha256(Path(path).read_bytes()).hexdigest()
        st = Path(path).stat()
    except OSError:
        return None
    return f"{st.st_size}:{st.st_mtime_ns}"


def _nvcc_state() -> str | None:
    from ..errors import ToolchainError
    from ..toolchain.nvcc import find_nvcc, nvcc_identity

    try:
        return nvcc_identity(find_nvcc())
    except ToolchainError:
        return None


def _secret_file() -> Path:
    from ..settings import user_state_dir

    folder = user_state_dir()
    if folder is None:
        import platformdirs

        folder = Path(platformdirs.user_state_dir("r1build", appauthor=False))
    return folder / _KEY_NAME


def _open_regular(path: Path) -> tuple[BinaryIO, os.stat_result] | None:
    """The regular file at ``path``, open for reading, and its status; None for anything else (nothing there, a
    link, a folder, a FIFO: opened without following a link, and without blocking on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb"), st


def _read_secret(path: Path) -> bytes | None:
    """The secret in ``path`` when it is one, owned by this user and readable by no one else; None otherwise."""
    opened = _open_regular(path)
    if opened is None:
        return None
    f, st = opened
    with f:
        if os.name != "nt" and (st.st_mode & 0o077 or st.st_uid != os.getuid()):
            return None
        text = f.read(65).strip()
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except ValueError:
        return None
    return secret if len(secret) == 32 else None


def _secret(directory: Path, *, create: bool) -> bytes | None:
    """The secret that signs the records of the cache in ``directory`` (``create``: made when there is none);
    None when there is none to use."""
    path = _secret_file()
    if directory in path.resolve().parents:  # a writer of that cache could write the secret as well
        return None
    secret = _read_secret(path)
    if secret is not None or not create or path.exists():
        return secret
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = path.with_name(f".{_KEY_NAME}.{os.getpid()}")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(os.urandom(32).hex() + "\n")  # what secrets.token_hex does, without importing it (2 ms)
        os.link(part, path)  # whole or not at all; a process that made one first wins
    except FileExistsError:
        pass
    finally:
        part.unlink(missing_ok=True)
    return _read_secret(path)


def _mac(secret: bytes, key: str, record: dict[str, Any]) -> str:
    """The HMAC of a record (all of it but its ``mac``) stored under ``key``."""
    body = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(secret, f"{key}\n{body}".encode(), hashlib.sha256).hexdigest()


def _records_dir() -> Path:
    """The folder of the records: beside the secret that signs them, in the user's own state folder (never in a
    cache, which others may write)."""
    return _secret_file().parent / "replay"


def _load_record(directory: Path, key: str) -> dict[str, Any] | None:
    """The record of ``key``, of the cache in ``directory``, when its MAC verifies; None otherwise."""
    opened = _open_regular(_records_dir() / f"{key}.json")
    if opened is None:
        return None
    f, st = opened
    with f:
        if st.st_size > _MOST_BYTES:
            return None
        raw = f.read()
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("format") != _FORMAT or not isinstance(record.get("mac"), str):
        return None
    if record.get("cache") != str(directory):
        return None
    secret = _secret(directory, create=False)
    if secret is None or not hmac.compare_digest(record["mac"], _mac(secret, key, record)):
        return None
    return record


_MOST_BYTES = 64 << 20
"""A record file larger than this is no record of this module's (a command prints far less)."""
_KEEP = 256
"""Records kept: a store beyond them removes the oldest (a record whose command line is no longer run, or whose
r1build is gone, would otherwise stay for ever)."""


def _write_record(key: str, record: dict[str, Any]) -> None:
    """Store ``record`` under ``key``, whole or not at all (a file of its own renamed into place), mode 0600."""
    from ..filemode import private_file, private_folder

    folder = _records_dir()
    private_folder(folder)
    part = folder / f".{key}.{os.getpid()}.part"
    fd = private_file(part, 0o600, os.O_WRONLY | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(record, separators=(",", ":")).encode())
        os.replace(part, folder / f"{key}.json")
    finally:
        part.unlink(missing_ok=True)
    _prune(folder)


def _prune(folder: Path) -> None:
    """Remove the oldest records beyond :data:`_KEEP`."""
    with os.scandir(folder) as it:
        records = [(e.stat().st_mtime_ns, e.path) for e in it if e.name.endswith(".json")]
    if len(records) <= _KEEP:
        return
    for _, path in sorted(records)[: len(records) - _KEEP]:
        with contextlib.suppress(OSError):
            Path(path).unlink()


def _still_holds(record: dict[str, Any]) -> bool:
    """Whether everything the recorded run read is as it was."""
    from ..cache import stored_values

    views: dict[str, str | None] = record["views"]
    if not all(_file_holds(p, state, views) for p, state in record["files"].items()):
        return False
    root = record["root"]
    if any(_module_state(p, root) != state for p, state in record["modules"].items()):
        return False
    if _nvcc_state() != record["nvcc"]:
        return False
    reads: dict[str, str | None] = record["reads"]
    stored = stored_values(Path(record["cache"]), reads)
    if stored is None:
        return False
    return all(_stored_digest(stored.get(k)) == digest for k, digest in reads.items())


def replay(argv: Sequence[str]) -> int | None:
    """Print the record of this command line and return its exit code when everything it read still holds;
    None otherwise (run the command)."""
    if not eligible(argv):
        return None
    try:
        key = _KEYS[tuple(argv)] = record_key(argv)
        record = _load_record(_record_dir(argv), key)
        if record is None or not _still_holds(record):
            return None
    except Exception:
        return None
    _KEYS.pop(tuple(argv), None)
    for fd, text in record["output"]:
        (sys.stdout if fd == 1 else sys.stderr).write(text)
    sys.stdout.flush()
    sys.stderr.flush()
    return int(record["code"])


def eligible(argv: Sequence[str]) -> bool:
    """Whether a command line may be answered by a record at all (the parsed arguments decide for certain when
    the record is written, see :meth:`Recorder.keeps`)."""
    words = [a for a in argv if not a.startswith("-")]
    return bool(words) and words[0] in ("status", "resolve", "check")


class _Tee:
    """A text stream that also keeps what is written to it."""

    def __init__(self, stream: TextIO, fd: int, log: list[tuple[int, str]]) -> None:
        self._stream = stream
        self._fd = fd
        self._log = log

    def write(self, text: str) -> int:
        self._log.append((self._fd, text))
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class Recorder:
    """Watches one full run of an eligible command and stores its record when it may be replayed."""

    def __init__(self, argv: Sequence[str], key: str) -> None:
        self.argv = list(argv)
        self.key = key
        self.output: list[tuple[int, str]] = []
        self.manifest: Manifest | None = None
        self.manifest_arg: Path | None = None
        self.caches: list[Cache] = []
        self.keeper: sqlite3.Connection | None = None
        """A connection to the first cache's index, held until the record is stored (:func:`_hold`)."""
        self.modules_before = frozenset(sys.modules)
        self.allowed = False
        """Set from the parsed arguments (:meth:`keeps`)."""

    def seen_manifest(self, arg: Path | None, manifest: Manifest) -> None:
        """The command loaded ``manifest`` from the ``-m`` value ``arg`` (None: found from the working folder
        up)."""
        self.manifest, self.manifest_arg = manifest, arg

    def seen_cache(self, cache: Cache) -> None:
        """The command opened ``cache``: its reads are noted from now on."""
        cache.read_log = {}
        self.caches.append(cache)
        if self.keeper is None:
            self.keeper = _hold(cache.directory)

    def hold(self, cache_dir: Path | None) -> None:
        """Hold the index of the cache the command will open (``--cache-dir``, or the default) before it opens
        it: opening a cache (diskcache) writes its settings and closes a connection of its own (:func:`_hold`)."""
        if self.allowed and self.keeper is None:
            from ..cache import resolve_cache_dir

            self.keeper = _hold(resolve_cache_dir(cache_dir))

    def release(self) -> None:
        """Close :attr:`keeper`: the index is checkpointed once, here, if nothing else holds it."""
        if self.keeper is not None:
            self.keeper.close()
            self.keeper = None

    @staticmethod
    def keeps(args: argparse.Namespace) -> bool:
        """Whether the parsed command is one whose answer depends only on what a record watches."""
        if getattr(args, "verbose", 0) or getattr(args, "remote_write", False) or getattr(args, "out", None):
            return False
        return args.command == "status" or (args.command in ("resolve", "check") and bool(args.locked))

    def _files(self, manifest: Manifest) -> list[Path]:
        from ..lock import lock_path
        from ..manifest.reference import ReferenceFiles

        paths = [manifest.path, lock_path(manifest), manifest.root / manifest.settings.vendor_dir]
        references = ReferenceFiles(manifest.root)  # kernels share a module: it is looked for once
        paths += [references.file(spec.reference) for spec in manifest.kernels]  # not in sys.modules
        # where a manifest is looked for: the -m folder, or (no -m) every folder from here up to the one found
        if self.manifest_arg is None:
            here = Path.cwd().absolute()
            top = manifest.path.absolute().parent
            folders = [here, *(p for p in here.parents if p == top or top in p.parents)]
        else:
            # resolved, as the manifest's own path is: a relative -m named the manifest a second time, parsed again
            folders = [self.manifest_arg.resolve()] if self.manifest_arg.is_dir() else []
        for folder in folders:
            paths += [folder / "kernels.toml", folder / "pyproject.toml"]
        for spec in manifest.kernels:
            paths += [manifest.root / rel for rel in (spec.baseline, *spec.candidates) if rel is not None]
        return list(dict.fromkeys(paths))  # kernels share a reference module: each file is read and resolved once

    @staticmethod
    def _views(manifest: Manifest, files: list[Path]) -> dict[str, str | None]:
        """:func:`_toml_view` of the manifest (as its loader parsed it) and of each place a manifest is looked for
        that holds a file."""
        views = {str(p): _toml_view(p) for p in files if p.name in _TOML_PLACES and p != manifest.path and p.exists()}
        return views | {str(manifest.path): manifest.data_digest}

    def record(self, code: int) -> dict[str, Any] | None:
        """What to store for a run that ended with ``code``; None when it may not be replayed."""
        manifest = self.manifest
        if code != 0 or not self.allowed or manifest is None or len(self.caches) != 1:
            return None
        cache = self.caches[0]
        reads = dict(cache.read_log or {})
        if cache.degraded is not None or cache.fell_through:  # a miss the remote may answer next time
            return None
        if cache.directory.resolve() != _record_dir(self.argv):
            return None
        root = str(manifest.root.resolve()) + os.sep
        package = str(Path(__file__).resolve().parents[1]) + os.sep
        stdlib = str(Path(os.__file__).resolve().parent) + os.sep
        modules: dict[str, str | None] = {}
        for name in set(sys.modules) - self.modules_before:
            path = getattr(sys.modules.get(name), "__file__", None)
            if (
                isinstance(path, str)
                and not path.startswith(package)
                and (_installed(path) or not path.startswith(stdlib))
            ):
                modules[path] = _module_state(path, root)
        files = self._files(manifest)
        return {
            "format": _FORMAT,
            "files": _file_states(manifest, files),
            "views": self._views(manifest, files),
            "root": root,
            "modules": modules,
            "nvcc": _nvcc_state(),
            "cache": str(cache.directory.resolve()),
            "reads": reads,
            "output": self.output,
            "code": code,
        }

    def store(self, code: int) -> None:
        """Store the record of this run (nothing when it may not be replayed) beside the secret that signs it."""
        record = self.record(code)
        if record is None:
            return
        secret = _secret(Path(record["cache"]), create=True)
        if secret is None:
            return
        record["mac"] = _mac(secret, self.key, record)
        _write_record(self.key, record)


def _hold(directory: Path) -> sqlite3.Connection | None:
    """A connection to the cache index in ``directory`` that has read it (so SQLite counts it as a user of the
    write-ahead log), or None. While it is open, closing the run's other connections does not checkpoint the
    index and delete its log, which the next write (the statistics, this record) makes anew: each of those costs
    two fsyncs, 8 of the 12 of a first run without it."""
    import sqlite3

    database = directory / "cache.db"
    try:  # a folder this user may not search, a name too long: no connection held (the run says what is wrong)
        if not database.is_file():
            return None
        con = sqlite3.connect(str(database), isolation_level=None, check_same_thread=False)
        con.execute("SELECT count(*) FROM sqlite_master").fetchall()
    except (OSError, sqlite3.Error):
        return None
    return con


_ACTIVE: list[Recorder] = []


def active() -> Recorder | None:
    """The recorder of the run in progress, when this process's command may be recorded."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextmanager
def recording(argv: Sequence[str], result: list[int]) -> Iterator[Recorder | None]:
    """Record the run of ``argv`` (when eligible): stdout and stderr are kept as they are written; at the end,
    ``result[0]`` (the exit code) decides whether the record is stored. Failing to store costs nothing."""
    if not eligible(argv):
        yield None
        return
    recorder = Recorder(argv, record_key(argv))
    out, err = sys.stdout, sys.stderr
    sys.stdout = _Tee(out, 1, recorder.output)
    sys.stderr = _Tee(err, 2, recorder.output)
    _ACTIVE.append(recorder)
    try:
        yield recorder
    finally:
        sys.stdout, sys.stderr = out, err
        _ACTIVE.remove(recorder)
    try:
        recorder.store(result[0] if result else 1)
    except Exception:
        return
    finally:
        recorder.release()
