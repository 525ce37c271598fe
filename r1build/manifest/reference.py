"""Loading a kernel's numpy reference (``module:function`` next to the manifest) and hashing its source."""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn, TextIO

from ..digests import digest_bytes, digest_json

__all__ = [
    "EXIT_GUARD",
    "ProcessExitCalled",
    "ReferenceFiles",
    "ReferenceProblem",
    "check_reference_statically",
    "failure_text",
    "load_reference",
    "reference_file",
    "reference_modules",
    "reference_source_digest",
    "stage_references",
]


class ReferenceProblem(Exception):
    """The reference cannot be found or imported; the message says why."""


def failure_text(exc: BaseException) -> str:
    """``Type: message`` of an exception the user's code raised. Its message is user code too: one that cannot be
    rendered (a ``__str__`` that raises or returns no string) is said to be so, instead of raising out of the error
    report as a traceback."""
    try:
        message = str(exc)
    except Exception as inner:  # user code: any failure is reported
        message = f"(its message cannot be shown: {type(inner).__name__})"
    return f"{type(exc).__name__}: {message}"


def reference_file(root: Path, ref: str) -> Path:
    """The ``.py`` file a ``module:function`` reference names (``pkg.mod`` → ``pkg/mod.py``)."""
    return ReferenceFiles(root).file(ref)


def reference_source_digest(root: Path, ref: str) -> str:
    """sha256 of the reference module's source bytes."""
    return ReferenceFiles(root).digest(ref)


class ReferenceFiles:
    """The reference modules of one manifest as it is loaded: each module's file found, read and hashed once
    however many kernels name it (50 kernels of one module looked it up 150 times)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[str, Path] = {}
        self._sources: dict[Path, bytes] = {}

    def file(self, ref: str) -> Path:
        """The ``.py`` file ``ref`` names; :class:`ReferenceProblem` when it is malformed or missing."""
        module, sep, func = ref.partition(":")
        if not sep or not module or not func:
            raise ReferenceProblem(f"{ref!r} is not of the form 'module:function'")
        found = self._files.get(module)
        if found is not None:
            return found
        rel = Path(*module.split("."))
        for candidate in (self.root / rel.with_suffix(".py"), self.root / rel / "__init__.py"):
            if candidate.is_file():
                self._files[module] = candidate
                return candidate
        raise ReferenceProblem(f"module {module!r} not found next to the manifest (looked for {rel}.py in {self.root})")

    def source(self, ref: str) -> bytes:
        path = self.file(ref)
        if path not in self._sources:
            self._sources[path] = path.read_bytes()
        return self._sources[path]

    def digest(self, ref: str) -> str:
        """sha256 of the module's source bytes."""
        return digest_bytes(self.source(ref))

    def check_statically(self, ref: str) -> None:
        """Check, without importing it, that the module parses and defines the function at top level."""
        path, func = self.file(ref), ref.partition(":")[2]
        try:
            names = _defined_names(self.source(ref), str(path))
        except SyntaxError as exc:
            raise ReferenceProblem(f"{path.name}:{exc.lineno}: syntax error: {exc.msg}") from None
        if func not in names:
            from ..convert import did_you_mean

            raise ReferenceProblem(f"{path.name} has no function {func!r}{did_you_mean(func, names)}")


def _top_level_names(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names]
    return names


@functools.lru_cache(maxsize=16)
def _defined_names(source: bytes, filename: str) -> tuple[str, ...]:
    """The top-level names of a module's ``source``, parsed once per content (the kernels of a manifest often
    share one reference module: 50 kernels, one parse)."""
    return tuple(_top_level_names(ast.parse(source, filename=filename)))


_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages"})
"""Folders under a reference's folder whose Python files are not the reference's neighbours."""


def reference_modules(root: Path, refs: Sequence[str]) -> dict[str, Path]:
    """The files a process needs to import the references ``refs`` away from the project (a sandboxed GPU worker, a
    cluster worker): each module, and the ``.py`` files under its folder, so a reference that imports its
    neighbours finds them (a module at the project's top level brings the top-level ``.py`` files only, hidden
    folders and :data:`_SKIP_DIRS` none). By path relative to the manifest's folder ``root``, sorted."""
    root = root.resolve()
    files = ReferenceFiles(root)
    found: dict[str, Path] = {}
    for ref in dict.fromkeys(refs):
        path = files.file(ref).resolve()
        folder = path.parent
        beside = (
            list(folder.glob("*.py"))
            if folder == root
            else [
                p
                for p in folder.rglob("*.py")
                if not any(part.startswith(".") or part in _SKIP_DIRS for part in p.relative_to(folder).parts[:-1])
            ]
        )
        for p in [path, *beside]:
            if p.is_file() and root in p.parents:
                found.setdefault(p.relative_to(root).as_posix(), p)
    return dict(sorted(found.items()))


def stage_references(root: Path, refs: Sequence[str], into: Path) -> Path:
    """A folder under ``into`` holding a copy of :func:`reference_modules` of ``refs`` at their paths relative to the
    manifest's folder ``root``: the root a process that may not read the project (a sandboxed GPU worker, which sees
    the evaluator's folder) loads the references from. Nothing else of the project travels (the same files a
    cluster job carries). Named by a digest of the paths and bytes, written once (atomically: concurrent stagings
    of the same files agree)."""
    entries = [(rel, path.read_bytes()) for rel, path in reference_modules(root, refs).items()]
    target = into / digest_json({rel: digest_bytes(data) for rel, data in entries})[:24]
    if target.is_dir():
        return target
    scratch = into / f".{target.name}-{os.getpid()}-{threading.get_ident()}"
    for rel, data in entries:
        (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
        (scratch / rel).write_bytes(data)
    try:
        scratch.rename(target)
    except OSError:  # staged meanwhile by another thread or process: theirs holds the same bytes
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def check_reference_statically(root: Path, ref: str) -> None:
    """Check, without importing it, that the reference module parses and defines the function at top level."""
    ReferenceFiles(root).check_statically(ref)


class ProcessExitCalled(Exception):
    """Raised in place of ``os._exit`` while a reference runs (see :class:`_ExitGuard`)."""


class _ExitGuard:
    """While a reference's module is imported or a call waits for it, ``os._exit`` raises instead of ending the
    process: a reference that called it made ``r1build check`` exit 0 with nothing checked. ``sys.exit`` needs no
    guard (it raises SystemExit, which is reported). Only this process is guarded: a process forked meanwhile (a
    reference's multiprocessing pool; fork is Linux's default start) ends with the real ``os._exit``, as its
    multiprocessing code does, instead of going on as a second r1build. When the last reference is done, a recursion
    limit it lowered is raised back (r1build's own code after it ended in a RecursionError traceback), and standard
    output and error it closed or replaced are put back (r1build's next line ended in a ValueError traceback)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._real = os._exit
        self._limit = sys.getrecursionlimit()
        self._pid = os.getpid()
        self._streams: dict[str, tuple[TextIO, int | None]] = {}

    def _refuse(self, code: int) -> NoReturn:
        if os.getpid() != self._pid:  # a forked child: its exit is its own
            self._real(code)
        raise ProcessExitCalled(
            f"called os._exit({code}), which would end r1build itself with that status as if all were well; a "
            "reference returns its outputs"
        )

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._running == 0:
                self._limit = sys.getrecursionlimit()
                self._pid = os.getpid()
                self._streams = {name: _stream_and_fd(name) for name in ("stdout", "stderr")}
                setattr(os, "_exit", self._refuse)  # noqa: B010 (a module attribute replaced for a while)
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    setattr(os, "_exit", self._real)  # noqa: B010
                    if sys.getrecursionlimit() < self._limit:
                        sys.setrecursionlimit(self._limit)
                    for name, (stream, fd) in self._streams.items():
                        _put_back(name, stream, fd)


def _stream_and_fd(name: str) -> tuple[TextIO, int | None]:
    """``sys.<name>`` and its file descriptor (None where it has none: a test's capture)."""
    stream: TextIO = getattr(sys, name)
    try:
        return stream, stream.fileno()
    except (OSError, ValueError, AttributeError):
        return stream, None


def _put_back(name: str, stream: TextIO, fd: int | None) -> None:
    """``sys.<name>`` as it was before a reference ran: the same stream, or where the reference closed it, a new one
    on the same descriptor (closing ``sys.stdout`` leaves descriptor 1 open)."""
    if not stream.closed:
        setattr(sys, name, stream)
        return
    if fd is None:
        return
    with contextlib.suppress(OSError, ValueError):
        new = open(fd, "w", encoding=stream.encoding, errors=stream.errors, closefd=False, buffering=1)  # noqa: SIM115
        setattr(sys, name, new)  # kept open for the rest of the process, as the one it replaces was


EXIT_GUARD = _ExitGuard()
"""Held while user code of a reference runs: importing its module, or a call (:func:`.outputs.call_reference`)."""


_loaded: dict[Path, ModuleType] = {}


def _load_module(path: Path, name: str) -> ModuleType:
    if path in _loaded:
        return _loaded[path]
    spec = importlib.util.spec_from_file_location(f"r1build_reference_{name}", path)
    if spec is None or spec.loader is None:
        raise ReferenceProblem(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    root = str(path.parent)
    sys.path.insert(0, root)
    try:
        with EXIT_GUARD.held():
            spec.loader.exec_module(module)
    except KeyboardInterrupt:  # the user's, or raised by the module itself: the caller's to see
        raise
    except BaseException as exc:  # user code: any failure (sys.exit, GeneratorExit, its own classes) is reported
        raise ReferenceProblem(f"importing {path} failed: {failure_text(exc)}") from exc
    finally:
        if root in sys.path:
            sys.path.remove(root)
    _loaded[path] = module
    return module


def load_reference(root: Path, ref: str) -> Callable[..., Any]:
    """Import the reference function."""
    path = reference_file(root, ref)
    module_name, _, func_name = ref.partition(":")
    module = _load_module(path, module_name.replace(".", "_"))
    try:  # a module's own __getattr__ may raise anything
        func = getattr(module, func_name, None)
    except Exception as exc:
        raise ReferenceProblem(f"looking up {func_name!r} in {path.name} raised {failure_text(exc)}") from None
    if func is None:
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None))]
        from ..convert import did_you_mean

        raise ReferenceProblem(f"{path.name} has no function {func_name!r}{did_you_mean(func_name, names)}")
    if not callable(func):
        raise ReferenceProblem(f"{ref!r} is not callable")
    return func  # type: ignore[no-any-return]
