"""The one seam through which r1build runs a tool to its end (nvcc, the shared-library link, binutils, the
sanitizer, ``--version`` probes): a :class:`Runner`, handed in where a caller wants another (as pypa/build's
``runner=``), :func:`run_process` otherwise. The sandbox builds on it (:func:`~r1build.sandbox.run_confined`);
tests hand in a recording runner and see the command lines without running anything.

Long-lived worker processes that r1build talks to over pipes (the GPU and check workers, the sanitizer's
streaming run) are not tools run to their end, and start their processes themselves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from . import stopping

__all__ = ["Runner", "run_process"]


class Runner(Protocol):
    """Runs ``argv`` to its end: in ``cwd``, with the environment ``env`` (None: this process's), no standard
    input, output captured as text (undecodable bytes replaced; with ``merge_stderr`` the standard error goes into
    ``stdout``, in order). Raises :class:`OSError` when the program cannot be started and
    :class:`subprocess.TimeoutExpired` (its ``output`` holding what was written) when it runs past ``timeout_s``."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        merge_stderr: bool = False,
    ) -> subprocess.CompletedProcess[str]: ...


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    merge_stderr: bool = False,
) -> subprocess.CompletedProcess[str]:
    """The default :class:`Runner`: :func:`subprocess.run`'s behaviour, with the program in a session of its own,
    so a timeout (or an interrupt) stops its children too (nvcc's cudafe++, cicc and ptxas), not only itself. In a
    compile scope (:mod:`.stopping`) it never starts once the scope was stopped, and an interrupt of the scope
    stops it at once (:class:`~.stopping.CompilesStopped`)."""
    stopping.check()  # interrupted while it waited (for a compile slot, say): it never starts
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,  # never the caller's terminal: an #include "/dev/stdin" reads nothing
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    with proc, stopping.running(proc):
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            partial, partial_err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout_s or 0.0, output=partial, stderr=partial_err) from None
        except BaseException:
            _stop(proc)
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err if not merge_stderr else "")


def _stop(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc``'s process group (its session: it and every child it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
