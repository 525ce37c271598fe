"""Stopping a scope's compiles at once: Ctrl-C while the gate compiles stops within a second, not after every
compile left.

nvcc runs in a session of its own (a timeout stops its children with it), so the terminal's SIGINT never reaches
it, and a compile queued in a worker thread would still start after the caller was interrupted. A
:class:`StopScope` holds the compiles started in a context (and in the copies of it the gate's worker threads
and ``asyncio.to_thread`` run in); :func:`stoppable` opens one, and leaving it by an interrupt (KeyboardInterrupt,
a cancelled task) stops the scope: the nvcc process groups running are killed and no further compile starts.
A stopped compile raises :class:`CompilesStopped` and leaves no verdict, so nothing is cached from it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["CompilesStopped", "StopScope", "check", "running", "stoppable"]


class CompilesStopped(KeyboardInterrupt):
    """A compile stopped, or never started, because its scope was stopped (an interrupt): it has no verdict."""


class StopScope:
    """The compiles of one context, stopped together."""

    def __init__(self) -> None:
        self.stopped = False
        """Whether the scope was stopped: no compile starts any more."""
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()

    def stop(self) -> None:
        """Kill the process groups of the compiles running and refuse the ones to come."""
        with self._lock:
            self.stopped = True
            procs = list(self._running)
        for proc in procs:
            _kill(proc)

    def check(self) -> None:
        """:class:`CompilesStopped` when the scope was stopped."""
        if self.stopped:
            raise CompilesStopped("the compiles were stopped")

    def add(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            if not self.stopped:
                self._running.add(proc)
                return
        _kill(proc)
        raise CompilesStopped("the compiles were stopped")

    def discard(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._running.discard(proc)


_SCOPE: ContextVar[StopScope | None] = ContextVar("r1build_compile_scope", default=None)


def _kill(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc``'s process group (nvcc and its children; it leads a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def stoppable() -> Iterator[StopScope]:
    """The compile scope of the caller's context, a new one where there is none; leaving it by an interrupt (an
    exception that is no :class:`Exception`: KeyboardInterrupt, a cancelled task) stops it."""
    scope = _SCOPE.get()
    token = None
    if scope is None:
        scope = StopScope()
        token = _SCOPE.set(scope)
    try:
        yield scope
    except BaseException as exc:
        if not isinstance(exc, Exception):
            scope.stop()
        raise
    finally:
        if token is not None:
            _SCOPE.reset(token)


@contextlib.contextmanager
def running(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Hold ``proc`` (a started tool: nvcc, a link) in the context's scope while it runs; it is killed when the
    scope stops, or when this thread is interrupted while waiting for it, and then :class:`CompilesStopped` is
    raised."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.add(proc)
    try:
        yield
    except BaseException as exc:
        if not isinstance(exc, Exception):
            _kill(proc)
            with contextlib.suppress(Exception):
                proc.communicate(timeout=5)
        raise
    finally:
        if scope is not None:
            scope.discard(proc)
    if scope is not None:
        scope.check()


def check() -> None:
    """:class:`CompilesStopped` when the context's scope was stopped (before a compile starts)."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.check()
