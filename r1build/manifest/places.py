"""The places of the user's file system a manifest names, checked before r1build reads or writes there: the lock
and the vendor folder (inside the project, also through symbolic links; never the manifest, a kernel's file or the
project's root), the include folders of ``nvcc-flags``, and the hand-written sources (UTF-8 files)."""

from __future__ import annotations

import errno
import re
from pathlib import Path

from .flags import include_flag
from .locate import Validator
from .model import KernelSpec, ProjectSettings
from .reference import reference_file

__all__ = ["check_lock_is_no_kernel_file", "check_project_paths", "is_source_path", "source_file_problem"]


_SOURCE_PATH = re.compile(r"[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*")


def is_source_path(text: str) -> bool:
    """Whether ``text`` is a hand-written source's path as the lock names it (an entry's ``origin``): relative,
    ``/``-separated parts of letters, digits and ``_ . + -``, none of them ``..``. The manifest refuses any other,
    since the lock written for it could not be read back; the lock refuses any other origin."""
    return _SOURCE_PATH.fullmatch(text) is not None and ".." not in text.split("/")


_NVCC_LIST_CHARS = ",\"'"
"""Characters nvcc takes apart in an option's value (a list separator, quotes): no rooted include path may hold one."""


_LOOP = "it is a loop of symbolic links (a link that leads back to itself, or to a folder it is in)"


def _link_loop(path: Path) -> bool:
    """Whether ``path``, or a folder on the way to it, is a loop of symbolic links: resolving it never ends
    (``Path.resolve`` raises :class:`RuntimeError` for it before Python 3.13, not :class:`OSError`)."""
    try:
        path.stat()
    except OSError as exc:
        return exc.errno == errno.ELOOP
    except ValueError:  # an embedded NUL: refused elsewhere
        return False
    return False


def check_project_paths(v: Validator, settings: ProjectSettings, manifest: Path) -> None:
    """``lock-file`` and ``vendor-dir`` name places r1build writes (and, for vendor-dir, deletes in): they must
    stay inside the project (the manifest's folder), also through symbolic links; vendor-dir is never the
    project's root, and the lock never the manifest or a folder. Neither, nor a relative include folder of
    ``nvcc-flags`` (whose headers are hashed into the gate's key), may be a loop of symbolic links."""
    root = manifest.parent.resolve()
    places: dict[str, Path] = {}
    for key, rel in (("lock-file", settings.lock_file), ("vendor-dir", settings.vendor_dir)):
        pure = Path(rel)
        if not rel.strip() or pure.is_absolute() or rel.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", rel):
            raise v.fail((key,), f"{rel!r} must be a relative path inside the project ({root})")
        if ".." in re.split(r"[/\\]", rel):
            raise v.fail((key,), f"{rel!r} must stay inside the project ({root}): '..' is not allowed")
        if _link_loop(root / pure):
            raise v.fail((key,), f"{rel!r} cannot be used: {_LOOP}")
        try:
            real = (root / pure).resolve()
            blocked = next((p for p in real.parents if p.is_relative_to(root) and p.exists() and not p.is_dir()), None)
            special = real.exists() and not real.is_dir() and not real.is_file()
        except OSError as exc:  # a name too long for the file system
            raise v.fail((key,), f"{rel!r} cannot be used: {exc.strerror}") from None
        if not real.is_relative_to(root):
            raise v.fail((key,), f"{rel!r} leads outside the project through a symbolic link (to {real})")
        if blocked is not None:
            raise v.fail((key,), f"{rel!r} cannot be created: {blocked.relative_to(root)} is a file, not a folder")
        if special:
            raise v.fail((key,), f"{rel!r} is not a regular file or folder (a FIFO, a device or a socket)")
        places[key] = real
    _check_include_folders(v, settings, root)
    vendor, lock = places["vendor-dir"], places["lock-file"]
    if vendor == root:
        raise v.fail(
            ("vendor-dir",),
            f"{settings.vendor_dir!r} is the project's root: `r1build vendor` writes and "
            "removes files in vendor-dir, so give it a folder of its own "
            "(the default is 'kernels/_r1build')",
        )
    if vendor.exists() and not vendor.is_dir():
        raise v.fail(("vendor-dir",), f"{settings.vendor_dir!r} is a file, not a folder")
    if lock == manifest.resolve() or lock.name == "pyproject.toml":
        raise v.fail(("lock-file",), f"{settings.lock_file!r} would overwrite the project's own file")
    if lock.is_dir():
        raise v.fail(("lock-file",), f"{settings.lock_file!r} is a folder, not a file")
    if lock.is_relative_to(vendor):
        raise v.fail(
            ("lock-file",),
            f"{settings.lock_file!r} is inside vendor-dir ({settings.vendor_dir!r}), "
            "which `r1build vendor` keeps to itself",
        )


def _check_include_folders(v: Validator, settings: ProjectSettings, root: Path) -> None:
    """A relative include folder of ``nvcc-flags`` is hashed into the gate's key and given to nvcc rooted at the
    project's folder ``root``: it may not be a loop of symbolic links, nor may ``root`` hold what nvcc takes apart
    in an option's value."""
    for j, flag in enumerate(settings.nvcc_flags):
        for folder in (include_flag(flag) or ("", []))[1]:
            if Path(folder).is_absolute():
                continue
            if _link_loop(root / folder):
                raise v.fail(("nvcc-flags", j), f"{flag}: the include folder {folder!r} cannot be used: {_LOOP}")
            odd = sorted(set(_NVCC_LIST_CHARS) & set(str(root)))
            if odd:
                raise v.fail(
                    ("nvcc-flags", j),
                    f"{flag}: the include folder {folder!r} is given to nvcc under the project's folder {root}, "
                    f"whose path holds {' and '.join(repr(c) for c in odd)}, which nvcc reads as a list separator "
                    "or a quote (the folder would be split or refused): move the project to a path without them",
                )


def check_lock_is_no_kernel_file(
    v: Validator, settings: ProjectSettings, root: Path, kernels: list[KernelSpec]
) -> None:
    """``lock-file`` is none of the files the kernels name (a baseline, a candidate, a reference module), which
    writing the lock would replace: ``lock-file = "scale.cu"`` had ``r1build lock`` overwrite the baseline."""
    lock = (root / settings.lock_file).resolve()
    try:
        lock_id = _file_id(lock)
    except OSError:
        return  # no lock yet: every file a kernel names is there, so none is it
    for i, spec in enumerate(kernels):
        named = [("baseline", spec.baseline), *[("candidates", c) for c in spec.candidates]]
        for key, rel in named:
            if rel is not None and _is_file(root / rel, lock, lock_id):
                raise v.fail(
                    ("lock-file",),
                    f"{settings.lock_file!r} is kernel[{i}] ({spec.name})'s {key} file, which writing the lock would "
                    "overwrite",
                )
        if _is_file(reference_file(root, spec.reference), lock, lock_id):
            raise v.fail(
                ("lock-file",),
                f"{settings.lock_file!r} is kernel[{i}] ({spec.name})'s reference module, which writing the lock "
                "would overwrite",
            )


def _file_id(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def _is_file(path: Path, resolved: Path, file_id: tuple[int, int]) -> bool:
    """Whether ``path`` resolves to ``resolved``, whose device and inode are ``file_id``: one ``stat`` for a path
    that is another file, the links resolved only for one that is the same file (a hard link is not the path)."""
    try:
        if _file_id(path) != file_id:
            return False
    except OSError:
        return False
    return path.resolve() == resolved


def _shown_path(rel: str) -> str:
    """A path for a message: whole when short, else its start and its length."""
    return repr(rel) if len(rel) <= 120 else f"{rel[:80]!r}... ({len(rel)} characters)"


def source_file_problem(root: Path, rel: str) -> str | None:
    """Why the hand-written source ``rel`` (a baseline or a candidate) cannot be used, or None: it must be a file
    of UTF-8 text (candidates are compiled, hashed and shown as text), named by a path inside the project that the
    lock can record (:func:`is_source_path`)."""
    if not is_source_path(rel):
        return (
            f"{_shown_path(rel)} must be a relative path inside the project, of parts made of letters, digits and "
            "_ . + - joined by '/' and none of them '..' (kernels.lock records it as the winner's origin)"
        )
    path = root / rel
    try:
        if path.is_dir():
            return f"{_shown_path(rel)} is a folder, not a .cu file"
        if not path.is_file():
            return f"file {_shown_path(rel)} not found (relative to {root})"
    except OSError as exc:  # a name too long for the file system, a loop of links, ...
        return f"file {_shown_path(rel)} cannot be looked up: {exc.strerror}"
    try:
        path.read_bytes().decode("utf-8")
    except OSError as exc:
        return f"file {rel!r} cannot be read: {exc.strerror}"
    except UnicodeDecodeError as exc:
        return f"file {rel!r} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x}); save it as UTF-8"
    return None
