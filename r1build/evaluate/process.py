"""Child processes that run untrusted candidate code: a scrubbed environment, and a worker handle that survives
whatever the worker does (crash, hang, garbage on the wire) by killing and restarting it.

The worker is a separate Python process speaking :mod:`r1build.evaluate.child.protocol` over two private pipes (its
stdout and stderr go to a log file, since candidate code may print). It starts in its own session so a kill
reaches everything it started. While it works it sends ``{"tick": ...}`` frames; each one restarts the reply
deadline, so a long batch of calls is fine while a single hung call is caught within one call's timeout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ..sandbox import scrubbed_environment
from ..sandbox.files import open_beneath, read_tail
from .child.protocol import PeerClosed, PeerTimeout, ProtocolError, read_message, write_message

__all__ = [
    "WorkerDied",
    "WorkerHandle",
    "WorkerTimedOut",
    "describe_exit",
    "log_tail",
    "scrubbed_environment",
]


def describe_exit(returncode: int | None) -> str:
    """``exit code 3`` / ``signal SIGSEGV`` / ``still running``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def log_tail(path: Path, limit: int = 1500) -> str:
    """The end of a log file, or empty: its last ``limit`` bytes only (a worker can print without end), never
    through a link or from a FIFO (:func:`~r1build.sandbox.files.read_tail`)."""
    data, size = read_tail(path, limit)
    text = data.decode(errors="replace").strip()
    return ("..." + text) if size > limit else text


def _open_log(path: Path) -> BinaryIO:
    """``path`` opened to append to, created where missing; what is there and no regular file (a link, a FIFO) is
    removed first, so the output never goes through a link to another file."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        fd = open_beneath(path.parent, path.name, flags)
    except OSError:
        path.unlink(missing_ok=True)
        fd = open_beneath(path.parent, path.name, flags | os.O_EXCL)
    return os.fdopen(fd, "ab")


class WorkerDied(Exception):
    """The worker exited (crashed) while a request was in flight."""

    def __init__(self, message: str, returncode: int | None, log: str) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.log = log


class WorkerTimedOut(Exception):
    """The worker sent nothing within the timeout; it was killed."""


class WorkerHandle:
    """One worker process, started on first use and restarted after it dies or is killed."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        workdir: Path,
        *,
        name: str = "worker",
        start_timeout_s: float = 180.0,
        log_path: Path | None = None,
    ) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.workdir = workdir
        self.name = name
        self.start_timeout_s = start_timeout_s
        self.log_path = log_path or workdir / f"{name}.log"
        """Where its output goes: outside ``workdir`` for a confined worker, whose folder is its own to change."""
        self.generation = 0
        """Incremented at every start: state the worker held (loaded libraries) is gone when it changes."""
        self.hello: dict[str, Any] = {}
        """The worker's first message (device facts)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._to_child = -1
        self._from_child = -1
        self._closed = False
        self._asked = 0  # the generation last asked to exit

    @property
    def running(self) -> bool:
        """Whether a worker process is up."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> dict[str, Any]:
        """Start the worker if it is not running; returns its hello message. A closed handle starts nothing (raises
        :class:`WorkerDied`): work still in flight when its owner closed it ends instead of leaving a process."""
        if self.running:
            return self.hello
        if self._closed:
            raise WorkerDied(f"{self.name} was closed", None, "")
        self._reap()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            with _open_log(self.log_path) as log:
                self._proc = subprocess.Popen(
                    [*self.command, str(req_r), str(rep_w)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.workdir,
                    pass_fds=(req_r, rep_w),
                    start_new_session=True,
                    close_fds=True,
                )
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._to_child, self._from_child = req_w, rep_r
        self.generation += 1
        try:
            header, _ = read_message(self._from_child, self.start_timeout_s)
        except PeerTimeout:
            self.kill()
            raise WorkerTimedOut(f"{self.name} did not start within {self.start_timeout_s:g} s") from None
        except (PeerClosed, ProtocolError) as exc:
            code = self._wait(5.0)
            self._reap()
            raise WorkerDied(
                f"{self.name} failed to start ({describe_exit(code)}): {exc}", code, log_tail(self.log_path)
            ) from None
        if header.get("error"):
            self.kill()
            raise WorkerDied(f"{self.name} failed to start: {header['error']}", None, log_tail(self.log_path))
        self.hello = header
        return header

    def request(
        self, header: Mapping[str, Any], buffers: Sequence[bytes | bytearray | memoryview] = (), *, timeout_s: float
    ) -> tuple[dict[str, Any], list[bytes]]:
        """Send one request and wait for its reply; ``timeout_s`` bounds the silence between frames.

        Raises :class:`WorkerTimedOut` (the worker was killed) or :class:`WorkerDied` (it exited, or sent
        garbage and was killed). A reply with ``"exiting": true`` means the worker ends itself after replying
        (its CUDA context is unusable); it is reaped here so the next request starts a fresh one.
        """
        self.start()
        try:
            write_message(self._to_child, header, buffers)
            while True:
                reply, bufs = read_message(self._from_child, timeout_s)
                if "tick" not in reply:
                    break
        except PeerTimeout:
            self.kill()
            raise WorkerTimedOut(f"no answer within {timeout_s:g} s; the worker was killed") from None
        except (PeerClosed, ProtocolError) as exc:
            if isinstance(exc, ProtocolError):
                self.kill()
            code = self._wait(10.0)
            if code is None:
                self.kill()
            tail = log_tail(self.log_path)
            self._reap()
            raise WorkerDied(f"the worker died ({describe_exit(code)})", code, tail) from None
        if reply.get("exiting"):
            if self._wait(30.0) is None:
                self.kill()
            self._reap()
        return reply, bufs

    def _wait(self, timeout_s: float) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """Kill the worker and everything it started (its process group)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._wait(30.0)
        self._reap()

    def _reap(self) -> None:
        for fd in (self._to_child, self._from_child):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._to_child = self._from_child = -1
        if self._proc is not None:
            self._wait(0.1)
        self._proc = None

    def ask_to_exit(self) -> None:
        """Ask the worker to exit without waiting for it (:meth:`close` waits); it is not started again. Closing
        several workers, ask each first: their exits (each a CUDA context torn down) then overlap."""
        self._closed = True
        if self.running and self._asked != self.generation:  # once to each process
            self._asked = self.generation
            with contextlib.suppress(PeerClosed, OSError):
                write_message(self._to_child, {"op": "exit"})

    def close(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit (unless :meth:`ask_to_exit` did), then make sure it has; it is not started
        again."""
        self.ask_to_exit()
        deadline = time.monotonic() + timeout_s
        while self.running and time.monotonic() < deadline:
            time.sleep(0.02)
        self.kill()
