"""One GPU as the evaluator uses it: its worker process, its sanitizer runner, its floors and its quiet lock.

A :class:`Slot` is the only way the parent talks to a worker: :meth:`Slot.request` (starting the worker when
needed), :meth:`Slot.load` (a candidate library, again after every worker restart). :class:`Quiet` keeps the GPU
quiet while it times: checks share it, sanitizer runs stop at a hold, timing takes it alone.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ..convert import field, record, replace
from ..errors import EvaluationError
from ..filemode import write_atomically
from ..manifest.model import KernelSpec
from ..sandbox import Confinement, runner_sandbox, scrubbed_environment
from .child.messages import CompareRequest, LoadRequest
from .correctness.plan import arg_codes
from .devices import GpuInfo, visible_devices_value
from .library import Library
from .process import WorkerDied, WorkerHandle, WorkerTimedOut
from .sanitizer.runner import FINISHED, SanitizerRunner, find_sanitizer
from .timing.floors import DeviceFloors

__all__ = ["Quiet", "Slot", "Taking", "make_slot"]

WORKER_MODULE = "r1build.evaluate.child.worker"
SHOWN = ("build", "bench", "references", "sanitize")
"""The folders of the evaluator's folder that a confined worker or sanitizer run may read: the libraries under test,
the benchmark shapes' inputs, the staged references, the sanitizer runs' inputs. Nothing else of it is shown: not the
reference's outputs (a candidate that read them could copy the answers), the other slots' folders, the logs or the
comparer's folder."""


@record
class Taking:
    """How long one taking of the GPU alone waited, from the hold on: until every sanitizer run had stopped (checks
    go on meanwhile), then until the checks sharing the GPU at that moment had ended (the whole wait)."""

    runs_s: float = 0.0
    checks_s: float = 0.0


class Quiet:
    """Keeps the GPU quiet while it times.

    Checks share it: timing waits for the running ones to end, and new ones wait while the GPU is timed. Sanitizer
    runs are pausable (:meth:`pausable`): they start whenever they like, and while the GPU is being taken the
    ``hold`` file exists, holding the generation of this taking; a run's harness stops before its next GPU work and
    says so (``held()`` returns the generation). A taking has two steps: first the hold goes out and every running
    run must stop (or end, or have started under this very hold, so it stops before it touches CUDA) while checks
    go on using the GPU, since a run can take a second to reach its next stop; then new checks wait and the running
    ones end. Without a hold file, runs are waited for like checks."""

    POLL_S = 0.005
    """How often the taking looks again at whether the runs have stopped."""

    def __init__(self, hold: Path | None = None) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._holding = False
        """A taking is under way: its hold is out."""
        self._exclusive = False
        """... and it waits for the running checks or has the GPU alone: new checks wait."""
        self._generation = 0
        self._hold = hold
        self._pausable: dict[int, tuple[Callable[[], str | None], int | None]] = {}
        self._keys = 0

    @property
    def hold_file(self) -> Path | None:
        """The file a sanitizer run's harness looks for before GPU work (None: runs are not pausable)."""
        return self._hold

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def pausable(self, held: Callable[[], str | None]) -> Iterator[None]:
        """A sanitizer run: ``held()`` is the generation of the hold its harness says it stopped for, if any
        (:data:`FINISHED` once it does no more GPU work: still under every hold)."""
        if self._hold is None:
            with self.shared():
                yield
            return
        with self._cond:
            self._keys += 1
            key = self._keys
            self._pausable[key] = (held, self._generation if self._holding else None)
        try:
            yield
        finally:
            with self._cond:
                del self._pausable[key]
                self._cond.notify_all()

    def _runs_stopped(self) -> bool:
        """Whether every sanitizer run is stopped for this generation, was started under it or is finished (the
        caller holds the condition)."""
        now = str(self._generation)
        return all(since == self._generation or held() in (now, FINISHED) for held, since in self._pausable.values())

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Taking]:
        """The GPU alone: sanitizer runs stop (checks go on), then new checks wait and running ones end; what the
        wait was is the :class:`Taking` given. A stopped run stays stopped while the hold is out."""
        with self._cond:
            self._cond.wait_for(lambda: not self._holding)
            self._holding = True
            self._generation += 1
            start, taking = time.perf_counter(), Taking()
            try:
                if self._hold is not None:
                    write_atomically(self._hold, str(self._generation))
                while not self._runs_stopped():
                    self._cond.wait(self.POLL_S)
                taking.runs_s = time.perf_counter() - start
                self._exclusive = True
                while self._shared:
                    self._cond.wait(self.POLL_S)
                taking.checks_s = time.perf_counter() - start
            except BaseException:
                self._release()
                raise
        try:
            yield taking
        finally:
            with self._cond:
                self._release()

    def _release(self) -> None:
        if self._hold is not None:
            with contextlib.suppress(FileNotFoundError):
                self._hold.unlink()
        self._exclusive = self._holding = False
        self._cond.notify_all()


COMPARER_FAILURES = 2
"""Failed requests after which a slot's comparer process is closed for good (:meth:`Slot.ask_comparer`)."""


@record(kw_only=True)
class Slot:
    """One GPU: its worker, sanitizer runner and measured floors."""

    gpu: GpuInfo
    worker: WorkerHandle
    sanitizer: SanitizerRunner | None
    """None where sanitizing is off or compute-sanitizer is missing."""
    workdir: Path
    loaded: set[str] = field(default_factory=set)
    """Libraries the current worker process has loaded."""
    generation: int = 0
    """The worker generation ``loaded`` belongs to."""
    restarts: int = 0
    """How often the worker had to be started again (after a crash or a hang)."""
    floors: DeviceFloors | None = None
    warming: Future[None] | None = None
    busy: threading.Lock = field(default_factory=threading.Lock)
    """Held while a thread talks to the worker."""
    quiet: Quiet = field(default_factory=Quiet)
    """Shared by checks, paused sanitizer runs wait under it, taken alone while timing."""
    comparer: WorkerHandle | None = None
    """A second worker that is never sent a library: it judges what the timed calls left (:mod:`.child.gpu_compare`);
    None where the outputs go to files."""
    comparer_lock: threading.Lock = field(default_factory=threading.Lock)
    """Held while a thread starts or talks to the comparer."""
    comparer_failures: int = 0
    """Requests the comparer failed (it died, hung, or cannot map another process's memory here)."""
    given: Path | None = None
    """Where what its confined runs are given goes (the sanitizer's inputs, jobs and queues): a folder they may read
    and not change, unlike ``workdir`` (None: ``workdir/sanitize``, for a slot whose runs are not confined)."""

    def ensure_worker(self) -> None:
        """Start the worker if needed; a worker that (re)started has forgotten its libraries."""
        try:
            self.worker.start()
        except (WorkerDied, WorkerTimedOut) as exc:
            tail = getattr(exc, "log", "")
            raise EvaluationError(
                f"the GPU worker for {self.gpu.name} (device {self.gpu.index}) cannot start: {exc}\n{tail}"
            ) from None
        if self.worker.generation != self.generation:
            if self.generation:
                self.restarts += 1
            self.generation = self.worker.generation
            self.loaded.clear()

    def request(
        self, header: Mapping[str, Any], buffers: Sequence[bytes] = (), *, timeout_s: float
    ) -> tuple[dict[str, Any], list[bytes]]:
        """One request to the worker (started first when needed); raises what :meth:`WorkerHandle.request`
        raises."""
        self.ensure_worker()
        return self.worker.request(header, buffers, timeout_s=timeout_s)

    def ask_comparer(self, header: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any] | None:
        """One request to the comparer process (started first when needed); None where there is none or it failed
        (its work then goes to the CPU). After :data:`COMPARER_FAILURES` failures the comparer is closed and the slot
        goes on without one (a start that keeps failing, or no CUDA IPC here, would cost every timing)."""
        if self.comparer is None:
            return None
        reply: dict[str, Any] | None = None
        with self.comparer_lock:
            try:
                reply, _ = self.comparer.request(header, (), timeout_s=timeout_s)
            except (WorkerDied, WorkerTimedOut):
                reply = None
            if reply is None or not reply.get("ok") or reply.get("note"):
                self.comparer_failures += 1
                if self.comparer_failures >= COMPARER_FAILURES:
                    self.comparer.close()
                    self.comparer = None
        return reply if reply is not None and reply.get("ok") else None

    def start_comparer(self) -> None:
        """Start the comparer process ahead of its first use (its CUDA start and kernel compiles take seconds); quiet on
        failure (the first request finds out again, and the outputs go to the CPU)."""
        if self.comparer is not None:
            warm: CompareRequest = {"op": "compare", "handle": "", "size": 0, "items": [], "rtol": 0.0, "atol": 0.0}
            with self.comparer_lock, contextlib.suppress(WorkerDied, WorkerTimedOut):
                self.comparer.request(warm, (), timeout_s=60.0)  # starts it and compiles its kernels

    def load(self, spec: KernelSpec, lib: Library, *, timeout_s: float) -> str | None:
        """Load a library into the worker; None when loaded, else why it failed (the candidate crashed)."""
        key = library_key(lib)
        self.ensure_worker()
        if key in self.loaded:
            return None
        load: LoadRequest = {
            "op": "load",
            "lib": key,
            "path": str(lib.path),
            "entry": spec.name,
            "argtypes": arg_codes(spec),
        }
        reply, _ = self.request(load, timeout_s=timeout_s)
        if not reply.get("ok"):
            return f"the library could not be loaded: {reply.get('error')}"
        self.loaded.add(key)
        return None


def library_key(lib: Library) -> str:
    """How requests name a loaded library."""
    return lib.digest + ":" + lib.arch


def worker_environment(gpu: GpuInfo, home: Path) -> dict[str, str]:
    """The scrubbed environment of a worker (and of sanitizer runs) for one GPU."""
    package_parent = str(Path(__file__).resolve().parents[2])
    path = [package_parent, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return scrubbed_environment(
        os.environ,
        home=home,
        extra={
            "PYTHONPATH": os.pathsep.join(path),
            "CUDA_VISIBLE_DEVICES": visible_devices_value(gpu.index),
        },
    )


def make_slot(
    gpu: GpuInfo, root: Path, *, sanitize: bool, nvcc: str | None, name: str | None = None, comparer: bool = False
) -> Slot:
    """The slot of ``gpu`` with its work directory under ``root`` (``name``, ``gpu<index>`` by default); its
    worker (and with ``comparer`` its comparer process) starts on first use.

    What loads candidate libraries runs confined: its own folder (``workdir``) writable, the GPU, r1build's Python, and
    of ``root`` only :data:`SHOWN`, read-only. Everything else of the slot lies outside its folder, where a confined
    run cannot plant a link for this process to follow or a module for an unconfined one to import: the workers'
    logs (``root/logs``), what the sanitizer runs are given and the hold file (``root/sanitize/<name>``, read-only
    to them), and the comparer process, which runs unconfined (``root/comparers/<name>``, not shown)."""
    workdir = root / (name or f"gpu{gpu.index}")
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    shown = tuple(root / part for part in SHOWN)
    given = root / "sanitize" / workdir.name
    for folder in (*shown, given):
        folder.mkdir(parents=True, exist_ok=True)
    env = worker_environment(gpu, workdir / "home")
    sandbox, confinement = runner_sandbox(), Confinement(workdir=workdir, readable=shown, python=True, gpu=True)
    worker = WorkerHandle(
        sandbox.command([sys.executable, "-m", WORKER_MODULE], confinement),
        env,
        workdir,
        name="worker",
        log_path=root / "logs" / f"{workdir.name}-worker.log",
    )
    sanitizer = None
    if sanitize:
        exe = find_sanitizer(nvcc)
        if exe is not None:
            sanitizer = SanitizerRunner(exe, env, sandbox=sandbox, confinement=replace(confinement, toolkit=exe))
    comparing = None
    if comparer:  # never loads a library, so not confined: a folder and a home no confined run can write
        own = root / "comparers" / workdir.name
        (own / "home").mkdir(parents=True, exist_ok=True)
        comparer_env = worker_environment(gpu, own / "home")
        comparing = WorkerHandle([sys.executable, "-m", WORKER_MODULE], comparer_env, own, name="comparer")
    return Slot(
        gpu=gpu,
        worker=worker,
        sanitizer=sanitizer,
        workdir=workdir,
        quiet=Quiet(given / "hold"),
        comparer=comparing,
        given=given,
    )
