"""One GPU as the evaluator uses it: its worker process, its sanitizer runner, its floors and its quiet lock.

A :class:`Slot` is the only way the parent talks to a worker: :meth:`Slot.request` (starting the worker when
needed), :meth:`Slot.load` (a candidate library, again after every worker restart). :class:`Quiet` keeps the GPU
quiet while it times: sanitizer runs share it, timing takes it alone.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EvaluationError
from ..manifest.model import KernelSpec
from .checks import arg_codes
from .child.messages import LoadRequest
from .devices import GpuInfo, visible_devices_value
from .floors import DeviceFloors
from .library import Library
from .process import WorkerDied, WorkerHandle, WorkerTimedOut, scrubbed_environment
from .sanitize import SanitizerRunner, find_sanitizer

__all__ = ["Quiet", "Slot", "make_slot"]

WORKER_MODULE = "r1build.evaluate.child.worker"


class Quiet:
    """Keeps the GPU quiet while it times: sanitizer runs share it, timing takes it alone (new runs wait, and
    timing waits for the running ones to end)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False

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
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            self._exclusive = True
            self._cond.wait_for(lambda: self._shared == 0)
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


@dataclass(kw_only=True)
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
    """Shared by sanitizer runs, taken alone while timing."""

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


def make_slot(gpu: GpuInfo, root: Path, *, sanitize: bool, nvcc: str | None, name: str | None = None) -> Slot:
    """The slot of ``gpu`` with its work directory under ``root`` (``name``, ``gpu<index>`` by default); its
    worker starts on first use."""
    workdir = root / (name or f"gpu{gpu.index}")
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    env = worker_environment(gpu, workdir / "home")
    worker = WorkerHandle([sys.executable, "-m", WORKER_MODULE], env, workdir, name="worker")
    sanitizer = None
    if sanitize:
        exe = find_sanitizer(nvcc)
        if exe is not None:
            sanitizer = SanitizerRunner(exe, env)
    return Slot(gpu=gpu, worker=worker, sanitizer=sanitizer, workdir=workdir)
