"""compute-sanitizer runs on small shapes: memcheck, racecheck and initcheck, one process per tool and candidate.

Each run drives the candidate's own shared library through :mod:`.harness` (standard library only, so a run
costs the sanitizer's start and little else), with the same scrubbed environment as the workers. Where the
sanitizer cannot run at all (not installed, or the machine's runtime does not support it: a probe finds out
once), the checks are skipped and the evaluator says so. Once the probe has passed, a run that ends without a
verdict is the candidate's failure, not a pass: a run past the time limit (tried a second time with twice the limit,
in case the machine was only busy), or one that exits without the harness's last line (the candidate ended the
process, or crashed the sanitizer), is ``unfinished`` and rejects the candidate; without that a kernel that is slow
or exits only under the sanitizer would skip memcheck, racecheck and initcheck. Only a canceled run (the candidate
already failed elsewhere) is ``canceled``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .child.harness import DONE

__all__ = ["TOOLS", "SanitizerOutcome", "SanitizerRunner", "find_sanitizer", "summarize_report", "uses_shared_memory"]

TOOLS = ("memcheck", "racecheck", "initcheck")
ERROR_EXIT = 86
HARNESS = Path(__file__).parent / "child" / "harness.py"
_TIMED_OUT = "\x00timed out"
"""What :meth:`SanitizerRunner._run` returns as output for a run killed at its time limit."""

_SHARED_SASS = re.compile(
    r"\b(?:LDS|STS|LDSM|STSM|ATOMS|LDGSTS|UBLKCP|UTMALDG|UTMASTG|UTMAREDG|HGMMA|QGMMA|IGMMA|"
    r"BGMMA|SYNCS)\b"
)
_PREFIX = re.compile(r"^=+ ?")
_SUMMARY = re.compile(r"(ERROR SUMMARY: (\d+) errors?)|(RACECHECK SUMMARY: .*\((\d+) errors?, \d+ warnings?\))")
_FINDING = re.compile(
    r"Invalid |Race reported|Uninitialized|Misaligned|out of bounds|Barrier error|"
    r"Program hit|Malloc/Free error|Error: ",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SanitizerOutcome:
    """The verdict of one sanitizer run."""

    tool: str
    """memcheck, racecheck or initcheck."""
    verdict: Literal["clean", "finding", "unfinished", "canceled"]
    """``finding`` and ``unfinished`` reject the candidate; ``canceled`` runs were not needed."""
    detail: str = ""
    """The first finding (what, where, which thread) and the summary; or why the run did not finish."""


def find_sanitizer(nvcc: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """compute-sanitizer from ``R1BUILD_COMPUTE_SANITIZER``, ``PATH``, next to nvcc or in /usr/local/cuda."""
    from ..settings import env_settings

    env = os.environ if environ is None else environ
    explicit = env_settings(env).compute_sanitizer
    if explicit:
        return explicit if Path(explicit).is_file() else None
    found = shutil.which("compute-sanitizer", path=env.get("PATH"))
    if found:
        return found
    candidates = []
    if nvcc:
        bin_dir = Path(nvcc).resolve().parent
        candidates += [bin_dir / "compute-sanitizer", bin_dir.parent / "compute-sanitizer" / "compute-sanitizer"]
    candidates += [
        Path("/usr/local/cuda/bin/compute-sanitizer"),
        Path("/usr/local/cuda/compute-sanitizer/compute-sanitizer"),
    ]
    return next((str(c) for c in candidates if c.is_file()), None)


def uses_shared_memory(library: Path, cuobjdump: str | None) -> bool:
    """Whether any kernel of ``library`` touches shared memory (its SASS has shared loads, stores, atomics,
    async copies or tensor-memory-accelerator traffic). racecheck only looks at shared memory, so it is skipped
    for libraries without any. True when it cannot tell."""
    if cuobjdump is None:
        return True
    try:
        proc = subprocess.run(
            [cuobjdump, "-sass", str(library)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    if proc.returncode != 0 or "Function" not in proc.stdout:
        return True
    return _SHARED_SASS.search(proc.stdout) is not None


def summarize_report(output: str, limit: int = 6) -> str | None:
    """The first finding of a sanitizer report and its summary line, or None when it reports none."""
    lines = [_PREFIX.sub("", line).rstrip() for line in output.splitlines() if line.startswith("=")]
    summary = ""
    errors = 0
    for line in lines:
        m = _SUMMARY.search(line)
        if m:
            summary = line.strip()
            errors += int(m.group(2) or m.group(4) or 0)
    first = next((i for i, line in enumerate(lines) if _FINDING.search(line) and not _SUMMARY.search(line)), None)
    if first is None and errors == 0:
        return None
    block: list[str] = []
    if first is not None:
        block.append(lines[first].strip())
        for line in lines[first + 1 :]:
            if not line.startswith((" ", "\t")) or len(block) >= limit:
                break
            block.append(line.strip())
    if summary:
        block.append(summary)
    return "; ".join(block)


class SanitizerRunner:
    """Runs compute-sanitizer over the harness for one GPU."""

    def __init__(self, executable: str, env: Mapping[str, str], *, timeout_s: float = 90.0) -> None:
        self.executable = executable
        self.env = dict(env)
        self.timeout_s = timeout_s
        self._available: str | bool | None = None
        self._probe_lock = threading.Lock()
        self._lock = threading.Lock()
        self._procs: dict[str, set[subprocess.Popen[bytes]]] = {}
        self._canceled: set[str] = set()

    def _run(self, args: list[str], cwd: Path, key: str = "", timeout_s: float | None = None) -> tuple[int | None, str]:
        cmd = [self.executable, *args]
        with self._lock:
            if key and key in self._canceled:
                return None, "canceled"
            try:
                proc = subprocess.Popen(
                    cmd,
                    cwd=cwd,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                return None, f"cannot start {self.executable}: {exc}"
            self._procs.setdefault(key, set()).add(proc)
        try:
            out, _ = proc.communicate(timeout=timeout_s or self.timeout_s)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            proc.communicate()
            return None, _TIMED_OUT
        finally:
            with self._lock:
                self._procs.get(key, set()).discard(proc)
        if key in self._canceled:
            return None, "canceled"
        return proc.returncode, out.decode(errors="replace")

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    def cancel(self, job_file: Path) -> None:
        """Stop every run of ``job_file`` (running ones are killed, later ones do not start)."""
        key = str(job_file)
        with self._lock:
            self._canceled.add(key)
            procs = list(self._procs.get(key, ()))
        for proc in procs:
            self._kill(proc)

    def available(self, workdir: Path) -> str | None:
        """None when the sanitizer works here; else why not (probed once)."""
        with self._probe_lock:
            return self._probe(workdir)

    def _probe(self, workdir: Path) -> str | None:
        if self._available is None:
            probe = ["--tool", "memcheck", "--error-exitcode", str(ERROR_EXIT), sys.executable, str(HARNESS), "--probe"]
            code, out = self._run(probe, workdir)
            if code is None and out == _TIMED_OUT:  # a busy machine: once more, with twice the time
                code, out = self._run(probe, workdir, timeout_s=2 * self.timeout_s)
            if code is None and out == _TIMED_OUT:
                self._available = f"compute-sanitizer's probe did not finish within {2 * self.timeout_s:g} s"
            elif code == 0:
                self._available = True
            else:
                tail = out.strip().splitlines()[-3:] if out.strip() else []
                self._available = f"compute-sanitizer does not run here ({'; '.join(tail) or f'exit {code}'})"
        return None if self._available is True else str(self._available)

    def run(self, tool: str, job_file: Path) -> SanitizerOutcome:
        """One tool over one harness job."""
        args = ["--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "10"]
        if tool == "racecheck":
            args += ["--racecheck-report", "hazard"]
        cmd = [*args, sys.executable, str(HARNESS), str(job_file)]
        code, out = self._run(cmd, job_file.parent, str(job_file))
        if code is None and out == _TIMED_OUT:  # past the limit: once more, with twice the time
            code, out = self._run(cmd, job_file.parent, str(job_file), 2 * self.timeout_s)
            if code is None and out == _TIMED_OUT:
                return SanitizerOutcome(
                    tool,
                    "unfinished",
                    f"{tool} did not finish within {self.timeout_s:g} s, "
                    f"nor within {2 * self.timeout_s:g} s when tried again",
                )
        if code is None and out == "canceled":
            return SanitizerOutcome(tool, "canceled", "canceled")
        if code is None:
            return SanitizerOutcome(tool, "unfinished", out[:500])  # it could not start
        if code == ERROR_EXIT:
            found = summarize_report(out)
            return SanitizerOutcome(tool, "finding", found or f"{tool} reported errors")
        lines = out.strip().splitlines()
        if code != 0:
            tail = " ".join(lines[-2:])
            return SanitizerOutcome(tool, "unfinished", f"{tool} run failed (exit {code}): {tail}"[:500])
        shapes = len(json.loads(job_file.read_text()).get("shapes", []))
        if f"{DONE} {shapes}" not in (line.strip() for line in lines):
            tail = " ".join(lines[-2:]) or "no output"
            return SanitizerOutcome(
                tool,
                "unfinished",
                f"{tool} run ended before the last shape was called (exit 0 without the harness's last line): {tail}"[
                    :500
                ],
            )
        return SanitizerOutcome(tool, "clean")
