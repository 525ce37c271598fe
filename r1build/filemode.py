"""The files r1build writes for the user (the lock, bundles, reports): their mode, and what they may replace.

They are written to a temporary file and renamed into place, so a reader never sees half of one
(:func:`write_atomically`); the temporary file comes from :func:`tempfile.mkstemp`, which gives it a name of its own
(two threads or processes writing the same path never share one, and a link planted under a predictable name is
never followed) and makes it 0600. :func:`as_user_file` gives it the mode a plain
``open()`` would (0666 less the umask), so a lock or a bundle is as readable as any file the user writes. The
rename replaces whatever the path names, so :func:`replace_problem` refuses a path that is not a regular file:
run as root, ``r1build cache export /dev/null`` would otherwise put a plain file in place of the device.

The cache folder is another matter: it holds transcripts, prompts and compiler logs, so what r1build creates in
it is private, whatever the umask, unless the folder itself says otherwise (:func:`folder_modes`):
:func:`private_folder`, :func:`private_file` and ``write_atomically(..., mode=)`` give exact modes.

An output a user names (``report -o``, ``export-dataset -o``) replaces only a file r1build wrote, unless
``--force``: :func:`foreign_output` tells one by its content. A report page carries :data:`REPORT_MARKER` in its
first bytes; a dataset's first line is a record whose ``schema`` starts with :data:`DATASET_SCHEMA_PREFIX`; an
empty file (``mktemp``'s) may be replaced too. ``r1build report -o pyproject.toml`` replaced the project's file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Literal

__all__ = [
    "DATASET_SCHEMA_PREFIX",
    "REPORT_MARKER",
    "OutputKind",
    "as_user_file",
    "folder_modes",
    "foreign_output",
    "path_length_problem",
    "private_file",
    "private_folder",
    "replace_problem",
    "umask",
    "write_atomically",
    "written_by_r1build",
]

PRIVATE_FOLDER = 0o700
"""Mode of a cache folder r1build creates (and of the folders inside a private one)."""
PRIVATE_FILE = 0o600
"""Mode of the files r1build creates in a private cache folder."""

OutputKind = Literal["report", "dataset"]
"""The outputs :func:`foreign_output` recognizes: an HTML report page, a JSONL dataset."""
REPORT_MARKER = '<meta name="generator" content="r1build">'
"""In the ``<head>`` of every report page, within its first KiB: what marks the page as r1build's."""
DATASET_SCHEMA_PREFIX = "r1build.dataset/"
"""How the ``schema`` field of every dataset record starts (:data:`r1build.report.dataset.SCHEMA`)."""
_LEGACY_REPORT = b"<title>r1build report"
"""The title of a report page written before :data:`REPORT_MARKER` was, which may be replaced as well."""
_FIRST_LINE_LIMIT = 64 << 20
"""The most of a dataset's first line read to recognize it (a record with its transcript is far smaller)."""


def umask() -> int:
    """The process's umask, read without changing it where the system says (Linux's /proc), else set and
    restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def as_user_file(fd: int) -> None:
    """Give the open file ``fd`` the mode of a file the user creates: 0666 less the umask."""
    os.fchmod(fd, 0o666 & ~umask())


def folder_modes(folder: Path | str) -> tuple[int, int]:
    """The modes of the sub-folders and files r1build creates in the cache ``folder``: :data:`PRIVATE_FOLDER` and
    :data:`PRIVATE_FILE`, plus whatever the folder itself grants its group and others (sub-folders all of it, and
    its set-group-id bit; files its read and write bits). r1build creates a cache folder 0700, so only a folder the
    user made (or changed) to share (``mkdir -m 2770``, ``chmod g+rwx``) passes anything on."""
    try:
        mode = Path(folder).stat().st_mode
    except OSError:
        mode = PRIVATE_FOLDER
    shared = mode & 0o077
    return PRIVATE_FOLDER | shared | (mode & stat.S_ISGID), PRIVATE_FILE | (shared & 0o066)


def private_folder(path: Path, mode: int = PRIVATE_FOLDER) -> None:
    """Create the folder ``path`` (its missing parents as ``mkdir -p`` would) with exactly ``mode``, whatever the
    umask; nothing when it exists (a folder another process made meanwhile included); :class:`FileExistsError`
    for anything else there."""
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode & 0o777)
    except FileExistsError:
        if path.is_dir():
            return
        raise  # a file, or a link to nothing, in the way
    path.chmod(mode)


def private_file(path: Path | str, mode: int = PRIVATE_FILE, flags: int = os.O_WRONLY | os.O_EXCL) -> int:
    """Open ``path`` (created with ``O_CREAT`` and ``flags``) and give it exactly ``mode`` when this process may
    (a file of another user's, in a shared cache, keeps its own); the descriptor."""
    fd = os.open(path, os.O_CREAT | flags | getattr(os, "O_CLOEXEC", 0), mode & 0o777)
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, mode)
    return fd


NAME_MAX = 255
"""Most bytes of one name in a path (Linux's limit for every file system, and macOS's)."""
PATH_MAX = 4096
"""Most bytes of a whole path a system call takes (Linux)."""


def path_length_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` can name no file here: one of its names, or the whole, is longer than the system takes. Every
    ``stat`` of such a path fails with ENAMETOOLONG, which :mod:`pathlib`'s ``exists`` and ``is_file`` raise
    rather than answer False (a ``--cache-dir`` or ``-o`` of 300 letters ended in a traceback). None otherwise."""
    raw = os.fsencode(path)
    shown = repr(os.fsdecode(raw[:60]) + ("..." if len(raw) > 60 else ""))
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest > NAME_MAX:
        limit = f"over the {NAME_MAX} a file system allows"
        return f"{shown} is not a usable path: a name in it is {longest} bytes long, {limit}"
    if len(raw) >= PATH_MAX:
        return f"{shown} is not a usable path: it is {len(raw)} bytes long, over the {PATH_MAX - 1} the system takes"
    try:
        os.lstat(raw)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return f"{shown} is not a usable path: {exc.strerror}"
    except ValueError:  # an embedded NUL: no such file, said where it is used
        pass
    return None


def replace_problem(path: Path) -> str | None:
    """Why a file written by renaming a temporary file over ``path`` may not go there: it names a folder, a
    device, a FIFO or a socket (``/dev/null``, ``/dev/stdout``), which the rename would replace. None for a regular
    file, a link to one, or nothing there yet."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # nothing there (or nothing to see): the write itself says what is wrong
    if stat.S_ISDIR(mode):
        return f"{path} is a folder; name a file to write"
    if not stat.S_ISREG(mode):
        return f"{path} is not a regular file (a device, a FIFO or a socket), which writing there would replace"
    return None


def write_atomically(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
    """``data`` (text as UTF-8, newlines as given) as the whole of ``path``, never seen half written: a temporary
    file of its own beside ``path``, given ``mode`` (default: the mode of a file the user writes), renamed over it.
    The temporary file is gone whatever fails; :class:`OSError` is the caller's to word (the folder missing, no
    room, no permission)."""
    import tempfile  # here, not at the top: a warm build imports this module and never writes (3-5 ms of imports)

    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is None:
                as_user_file(f.fileno())
            else:
                os.fchmod(f.fileno(), mode)
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def written_by_r1build(head: bytes, kind: OutputKind) -> bool:
    """Whether ``head``, the start of a file (for a dataset, at least its first line), is r1build's ``kind``."""
    if kind == "report":
        start = head[:1024]
        return REPORT_MARKER.encode() in start or (start.startswith(b"<!DOCTYPE html>") and _LEGACY_REPORT in start)
    import json

    try:
        record = json.loads(head.split(b"\n", 1)[0])
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than the parser goes
        return False
    return isinstance(record, dict) and str(record.get("schema", "")).startswith(DATASET_SCHEMA_PREFIX)


def foreign_output(path: Path, kind: OutputKind) -> bool:
    """Whether writing ``kind`` at ``path`` would replace a file r1build did not write (or one it cannot read to
    tell). False for nothing there, an empty file, or r1build's own ``kind``."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return False
        with path.open("rb") as fh:
            head = fh.readline(_FIRST_LINE_LIMIT) if kind == "dataset" else fh.read(1024)
    except OSError:
        return True
    return not written_by_r1build(head, kind)
