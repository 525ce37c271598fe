"""compute-sanitizer runs on small shapes: memcheck, racecheck and initcheck, one process per tool and batch.

Each run drives candidates' own shared libraries through :mod:`.child.harness` (standard library only, so a run
costs the sanitizer's start and little else), one library after another, with the same scrubbed environment as
the workers. A run's output is read as it comes: the harness's markers (with a token the job file holds) say which
library runs, so a run that stops making progress is killed, and a report or a crash points at the library whose
markers it came between (:attr:`BatchRun.suspect`). A run judges its libraries only as a whole: clean when it
finished with no report; anything else a batch of several says is split by :mod:`.sanitizing` until one library
remains, whose own run is its verdict. Where the
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
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Literal

from ...convert import record, replace
from ...errors import ToolchainError
from ...gate.symbols import UnreadableObject, reader
from ...sandbox import Confinement, Sandbox, unconfined
from ...sandbox.files import read_beneath
from ..child.harness import BEGIN, DONE, END, FAILED, HELD, RESUMED

__all__ = [
    "FINISHED",
    "TOOLS",
    "BatchRun",
    "SanitizerOutcome",
    "SanitizerRunner",
    "find_sanitizer",
    "racecheck_level",
    "summarize_report",
    "uses_shared_memory",
]

TOOLS = ("memcheck", "racecheck", "initcheck")
FINISHED = "finished"
"""What :meth:`SanitizerRunner.held` says of a run whose harness is done with the GPU (its ``DONE`` line): what is
left is its exit, so it counts as stopped under any hold (:class:`~..slots.Quiet`)."""
ERROR_EXIT = 86
NO_CUDA_EXIT = 255
"""compute-sanitizer's exit status for a target that never set up CUDA ("Target application terminated before first
instrumented API call"): a harness whose queue was taken before it looked."""
HARNESS = Path(__file__).parents[1] / "child" / "harness.py"

_SHARED_SASS = re.compile(
    r"\b(?:LDS|STS|LDSM|STSM|ATOMS|LDGSTS|UBLKCP|UTMALDG|UTMASTG|UTMAREDG|HGMMA|QGMMA|IGMMA|"
    r"BGMMA|SYNCS)\b"
)
_PREFIX = re.compile(r"^=+ ?")
_SUMMARY = re.compile(
    r"(ERROR SUMMARY: (\d+) errors?)|(RACECHECK SUMMARY: .*\((\d+) errors?, (\d+) warnings?(, \d+ infos?)?\))"
)
_FINDING = re.compile(
    r"Invalid |Race reported|hazard detected|Uninitialized|Misaligned|out of bounds|Barrier error|"
    r"Program hit|Malloc/Free error|Error: ",
    re.IGNORECASE,
)


@record(frozen=True)
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
    from ...settings import env_settings

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


def uses_shared_memory(library: Path, cuobjdump: str | None, sandbox: Sandbox | None = None) -> bool:
    """Whether any kernel of ``library`` touches shared memory (its SASS has shared loads, stores, atomics,
    async copies or tensor-memory-accelerator traffic). racecheck only looks at shared memory, so it is skipped
    for libraries without any. True when it cannot tell. A candidate's library is hostile input to cuobjdump's
    parsers, as its object is to binutils': cuobjdump runs as the gate's object readers do
    (:func:`r1build.gate.symbols.reader`), inside ``sandbox`` with the library's folder only and its listing held
    to :data:`~r1build.gate.symbols.LISTING_LIMIT` (None: as this process, for the user's own library)."""
    if cuobjdump is None:
        return True
    try:
        sass = reader(library, sandbox)([cuobjdump, "-sass", str(library)])
    except (UnreadableObject, ToolchainError):
        return True
    if "Function" not in sass:
        return True
    return _SHARED_SASS.search(sass) is not None


def summarize_report(output: str, limit: int = 6) -> str | None:
    """The first finding of a sanitizer report and its summary line, or None when it reports none."""
    lines = [_PREFIX.sub("", line).rstrip() for line in output.splitlines() if line.startswith("=")]
    summary = ""
    errors = 0
    for line in lines:
        m = _SUMMARY.search(line)
        if m:
            summary = line.strip()
            errors += int(m.group(2) or m.group(4) or 0) + int(m.group(5) or 0)  # racecheck: its warnings too
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


def racecheck_level(detail: str) -> Literal["error", "warning"] | None:
    """The worst severity of the hazards a racecheck finding (:func:`summarize_report`) names: ``error`` when its
    summary counts errors or a record is of that level, ``warning`` when it counts only warnings or only warning
    records show, None when it does not say."""
    counted = [(int(m.group(2) or m.group(4) or 0), int(m.group(5) or 0)) for m in _SUMMARY.finditer(detail)]
    if counted:
        errors, warnings = sum(e for e, _ in counted), sum(w for _, w in counted)
        return "error" if errors else ("warning" if warnings else None)
    if re.search(r"\b(?:ERROR|Error):", detail):
        return "error"
    return "warning" if re.search(r"\b(?:WARN|WARNING|Warning)\b", detail) else None


@record(frozen=True)
class BatchRun:
    """What one run over a batch of libraries says."""

    outcome: SanitizerOutcome
    """The run as a whole: ``clean`` holds for every library of the batch; otherwise, for a batch of one, the
    library's verdict."""
    suspect: int | None = None
    """For a run that is not clean: the library the harness's markers point at (the one running when the first
    report came, or when the run stopped), if any; with a queue job, its position in :attr:`claimed`."""
    claimed: tuple[int, ...] | None = None
    """With a queue job (``queue``): the entries this run took, lowest first (the libraries its outcome is about)."""
    held_s: float = 0.0
    """Seconds the run's harness was held (stopped while the GPU timed another job): part of its wall time."""


def claims_of(queue: Path, token: str) -> tuple[int, ...]:
    """The entries of a queue folder that the run with ``token`` took, lowest first. The folder is a confined run's
    to write: a claim is read as a regular file and no further than the token (:func:`read_beneath`), not through a
    link, a FIFO or a file of any size planted under its name."""
    taken = []
    for path in queue.glob("*.claim"):
        stem = path.name.partition(".")[0]
        with contextlib.suppress(OSError):
            if stem.isdigit() and read_beneath(queue, path.name, len(token) + 1) == token.encode():
                taken.append(int(stem))
    return tuple(sorted(taken))


@record
class _Proc:
    """One finished (or killed) process."""

    code: int | None
    output: str
    why: Literal["exited", "stalled", "canceled", "not_started"]
    held_s: float = 0.0
    """Seconds its harness said it was held (stopped while the GPU timed)."""


@record
class _Live:
    """What the markers of a running harness said so far."""

    token: str
    current: int | None = None
    progress: float = 0.0
    held: str | None = None
    """The generation of the hold the harness says it stopped for (None while it runs; :data:`FINISHED`
    once it said it is done with the GPU)."""
    held_since: float | None = None
    """When the harness said it stopped for the hold it is held at now."""
    held_s: float = 0.0
    """Seconds of holds it said it was stopped for and resumed from."""

    def mark_held(self, held: bool) -> None:
        """A ``HELD`` (``held``) or ``RESUMED`` line came: the time between them is counted in :attr:`held_s`."""
        now = time.monotonic()
        if held and self.held_since is None:
            self.held_since = now
        elif not held and self.held_since is not None:
            self.held_s += now - self.held_since
            self.held_since = None

    def held_total(self) -> float:
        """Seconds held so far, a hold still open counted up to now."""
        return self.held_s + (time.monotonic() - self.held_since if self.held_since is not None else 0.0)


def hold_marker(line: str, token: str) -> tuple[Literal["held", "resumed"], str] | None:
    """A harness's ``HELD <generation> <token>`` or ``RESUMED <token>`` line with this run's token: which, and
    the generation held for ("" for resumed); None for any other line."""
    words = line.strip().split()
    if not words or words[-1] != token:
        return None
    text = " ".join(words)
    if text.startswith(HELD) and len(words) == len(HELD.split()) + 2:
        return "held", words[-2]
    if text.startswith(RESUMED) and len(words) == len(RESUMED.split()) + 1:
        return "resumed", ""
    return None


def marker(line: str, token: str) -> tuple[Literal["begin", "end"], int] | None:
    """A harness marker (``BEGIN <i> <token>`` or ``END <i> <token>``) with this run's token: which, and the
    library's index; None for any other line."""
    line = line.strip()
    words = line.split()
    if len(words) < 2 or words[-1] != token or not words[-2].isdigit():
        return None
    if line.startswith(BEGIN):
        return "begin", int(words[-2])
    if line.startswith(END):
        return "end", int(words[-2])
    return None


def read_markers(output: str, token: str) -> tuple[int | None, int | None, set[int]]:
    """From a harness's output: the library that had begun when the first sanitizer report came (None when no
    report, or one before any library), the last library begun, and the libraries ended."""
    first_report = last_begun = None
    ended: set[int] = set()
    for raw in output.splitlines():
        line = raw.strip()
        found = marker(line, token)
        if found is not None and found[0] == "begin":
            last_begun = found[1]
        elif found is not None:
            ended.add(found[1])
        elif line.startswith("=") and first_report is None and _FINDING.search(line) and not _SUMMARY.search(line):
            first_report = last_begun
    return first_report, last_begun, ended


def _follow_output(stdout: IO[bytes], lines: list[str], live: _Live) -> None:
    """Read a run's output into ``lines`` (a reader thread's work), noting its markers in ``live`` as they come."""
    token = live.token
    for raw in stdout:
        line = raw.decode(errors="replace")
        lines.append(line)
        found = marker(line, token) if token else None
        if found is not None:
            live.current = found[1] if found[0] == "begin" else None
            live.progress = time.monotonic()
            continue
        hold = hold_marker(line, token) if token else None
        if hold is not None:
            live.held = hold[1] if hold[0] == "held" else None
            live.mark_held(hold[0] == "held")
            live.progress = time.monotonic()
        elif token and line.startswith(DONE) and line.split()[-1:] == [token]:
            live.held = FINISHED  # no more GPU work: what is left is the process's exit
            live.progress = time.monotonic()


class SanitizerRunner:
    """Runs compute-sanitizer over the harness for one GPU.

    ``timeout_s`` bounds a run's silence: a run whose harness printed no marker for that long is killed (a library
    alone is tried once more with twice the time, in case the machine was only busy). Time a harness spends held
    (it said ``HELD`` and has not resumed) is not silence."""

    def __init__(
        self,
        executable: str,
        env: Mapping[str, str],
        *,
        timeout_s: float = 90.0,
        sandbox: Sandbox | None = None,
        confinement: Confinement | None = None,
    ) -> None:
        self.executable = executable
        self.env = dict(env)
        self.timeout_s = timeout_s
        self.sandbox = sandbox or unconfined()
        """Where a run is confined (:func:`r1build.sandbox.runner_sandbox`): the harness loads candidate libraries."""
        self.confinement = confinement
        """What a confined run may see: it runs in the slot's folder, the job's folder read-only to it (a queue
        folder it claims entries in excepted)."""

        self._available: str | bool | None = None
        self._probe_lock = threading.Lock()
        self._lock = threading.Lock()
        self._procs: dict[str, set[subprocess.Popen[bytes]]] = {}
        self._live: dict[str, _Live] = {}
        self._canceled: set[str] = set()

    @property
    def dies_with_evaluator(self) -> bool:
        """Whether a run ends by itself when this process ends (a sandboxed one does: ``--die-with-parent``). Such a
        run cannot look for this process by its id, which its own PID namespace does not show, and need not."""
        return self.confinement is not None and self.sandbox.kind == "bwrap"

    def _run(
        self,
        args: list[str],
        cwd: Path,
        key: str = "",
        timeout_s: float | None = None,
        token: str = "",
        hold: Path | None = None,
        writable: tuple[Path, ...] = (),
    ) -> _Proc:
        """One run in ``cwd``; a confined one in its confinement's folder instead, where it may write, and in
        ``writable`` (a queue folder it claims entries in): the job's folder is read-only to it, so nothing this
        process writes there or reads back (a job file, an input, a claim) can be a link it planted."""
        cmd = [self.executable, *args]
        if self.confinement is not None:
            confinement = replace(self.confinement, writable=(*self.confinement.writable, *writable))
            cmd, cwd = self.sandbox.command(cmd, confinement), confinement.workdir
        live = _Live(token, progress=time.monotonic())
        proc = self._start(cmd, cwd, key, live)
        if isinstance(proc, _Proc):
            return proc
        lines: list[str] = []
        stdout = proc.stdout
        assert stdout is not None
        reader = threading.Thread(
            target=_follow_output, args=(stdout, lines, live), name="r1build-sanitizer-output", daemon=True
        )
        reader.start()
        try:
            stalled = self._wait(proc, live, hold, timeout_s or self.timeout_s)
        finally:
            reader.join()
            stdout.close()
            with self._lock:
                self._procs.get(key, set()).discard(proc)
                self._live.pop(key, None)
        output, held_s = "".join(lines), live.held_total()
        if key in self._canceled:
            return _Proc(None, output, "canceled", held_s)
        if stalled:
            return _Proc(None, output, "stalled", held_s)
        return _Proc(proc.returncode, output, "exited", held_s)

    def _start(self, cmd: list[str], cwd: Path, key: str, live: _Live) -> subprocess.Popen[bytes] | _Proc:
        """The run started and recorded under ``key``, or the :class:`_Proc` of one canceled or not started."""
        with self._lock:
            if key and key in self._canceled:
                return _Proc(None, "", "canceled")
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
                return _Proc(None, f"cannot start {self.executable}: {exc}", "not_started")
            self._procs.setdefault(key, set()).add(proc)
            self._live[key] = live
        return proc

    def _wait(self, proc: subprocess.Popen[bytes], live: _Live, hold: Path | None, limit: float) -> bool:
        """Wait for the run to end; kill it when it shows no progress for ``limit`` seconds (True: it stalled).
        A run held at ``hold`` (the file exists) is held, not silent."""
        stalled = False
        while True:
            try:
                proc.wait(timeout=0.25)
                return stalled
            except subprocess.TimeoutExpired:
                if live.held is not None and hold is not None and hold.exists():  # held, not silent
                    live.progress = time.monotonic()
                elif time.monotonic() - live.progress > limit:
                    stalled = True
                    self._kill(proc)

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

    def running(self, job_file: Path) -> int | None:
        """The library a run of ``job_file`` is calling now (by its markers), if any."""
        with self._lock:
            live = self._live.get(str(job_file))
            return live.current if live is not None else None

    def held(self, job_file: Path) -> str | None:
        """The generation of the hold a run of ``job_file`` is stopped for now (by its markers), if any."""
        with self._lock:
            live = self._live.get(str(job_file))
            return live.held if live is not None else None

    def available(self, workdir: Path) -> str | None:
        """None when the sanitizer works here; else why not (probed once)."""
        with self._probe_lock:
            return self._probe(workdir)

    def _probe(self, workdir: Path) -> str | None:
        if self._available is None:
            probe = ["--tool", "memcheck", "--error-exitcode", str(ERROR_EXIT), sys.executable, str(HARNESS), "--probe"]
            done = self._run(probe, workdir)
            if done.why == "stalled":  # a busy machine: once more, with twice the time
                done = self._run(probe, workdir, timeout_s=2 * self.timeout_s)
            if done.why == "stalled":
                self._available = f"compute-sanitizer's probe did not finish within {2 * self.timeout_s:g} s"
            elif done.code == 0:
                self._available = True
            else:
                out = done.output
                tail = out.strip().splitlines()[-3:] if out.strip() else []
                self._available = f"compute-sanitizer does not run here ({'; '.join(tail) or f'exit {done.code}'})"
        return None if self._available is True else str(self._available)

    def run(self, tool: str, job_file: Path) -> BatchRun:
        """One tool over the libraries of one harness job (:class:`~.child.messages.SanitizeJob`)."""
        job = json.loads(job_file.read_text())
        queue = Path(job["queue"]) if job.get("queue") else None
        found, taken = self._run_job(tool, job_file, job, queue)
        if queue is None:
            return found
        suspect = found.suspect  # markers count by entry number: a suspect becomes a position
        return BatchRun(found.outcome, taken.index(suspect) if suspect in taken else None, taken, found.held_s)

    def _run_job(
        self, tool: str, job_file: Path, job: dict[str, Any], queue: Path | None
    ) -> tuple[BatchRun, tuple[int, ...]]:
        """The run's verdict (a suspect by its marker number) and, with a queue job, the entries it took."""
        token = str(job["token"])
        args = ["--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "10"]
        if tool == "racecheck":
            args += ["--racecheck-report", "hazard"]
        cmd = [*args, sys.executable, str(HARNESS), str(job_file)]
        key = str(job_file)
        hold = Path(job["hold"]) if job.get("hold") else None
        claims = (queue,) if queue is not None else ()
        done = self._run(cmd, job_file.parent, key, token=token, hold=hold, writable=claims)
        taken = claims_of(queue, token) if queue is not None else ()  # what it took, known now that it ended
        listed = set(taken) if queue is not None else set(range(len(job["libs"])))
        if done.why == "stalled" and len(listed) == 1 and queue is None:  # past the limit: once more, twice the time
            done = self._run(cmd, job_file.parent, key, 2 * self.timeout_s, token=token, hold=hold, writable=claims)
            if done.why == "stalled":
                outcome = SanitizerOutcome(
                    tool,
                    "unfinished",
                    f"{tool} did not finish within {self.timeout_s:g} s, "
                    f"nor within {2 * self.timeout_s:g} s when tried again",
                )
                return BatchRun(outcome, 0, held_s=done.held_s), taken
        return replace(self._verdict(tool, done, token, len(job["shapes"]), listed), held_s=done.held_s), taken

    def _verdict(self, tool: str, done: _Proc, token: str, shapes: int, listed: set[int]) -> BatchRun:
        """What a finished (or killed) run of the harness says of the libraries it called (``listed``)."""
        libs = len(listed)
        if done.why == "canceled":
            return BatchRun(SanitizerOutcome(tool, "canceled", "canceled"))
        if done.why == "not_started":
            return BatchRun(SanitizerOutcome(tool, "unfinished", done.output[:500]), 0 if libs == 1 else None)
        first_report, last_begun, ended = read_markers(done.output, token)
        finished = f"{DONE} {shapes} libraries {libs} {token}" in (line.strip() for line in done.output.splitlines())
        hung = last_begun if last_begun is not None and last_begun not in ended else None
        if done.why == "stalled":
            return BatchRun(
                SanitizerOutcome(tool, "unfinished", f"{tool} made no progress for {self.timeout_s:g} s"), hung
            )
        lines = done.output.strip().splitlines()
        if finished and not listed and first_report is None and done.code in (0, NO_CUDA_EXIT):
            # the harness called nothing (its queue was empty when it looked): compute-sanitizer then exits 255,
            # "Target application terminated before first instrumented API call", which says nothing of a candidate
            return BatchRun(SanitizerOutcome(tool, "clean"))
        if done.code == ERROR_EXIT:
            found = summarize_report(done.output)
            what = "hazards" if tool == "racecheck" else "errors"
            return BatchRun(SanitizerOutcome(tool, "finding", found or f"{tool} reported {what}"), first_report)
        if done.code != 0:
            said = [line.strip() for line in lines if line.startswith(FAILED)]  # the harness's own words, if any
            tail = "; ".join([*said[-1:], " ".join(lines[-2:])])
            return BatchRun(
                SanitizerOutcome(tool, "unfinished", f"{tool} run failed (exit {done.code}): {tail}"[:500]), hung
            )
        if not finished or ended != listed:
            tail = " ".join(lines[-2:]) or "no output"
            return BatchRun(
                SanitizerOutcome(
                    tool,
                    "unfinished",
                    f"{tool} run ended before the last shape was called (exit 0 without the harness's last line): "
                    f"{tail}"[:500],
                ),
                hung,
            )
        return BatchRun(SanitizerOutcome(tool, "clean"))
