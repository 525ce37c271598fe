"""The cluster tests' parts: a real Dask cluster on 127.0.0.1 (:class:`TestCluster`), a stand-in for the GPU inside
its workers (:class:`FakeGpu`), and copies of the tiny project (:func:`tiny_project`).

:class:`FakeGpu` is what a worker's evaluator factory makes in these tests instead of the local GPU evaluator:
the real static gate (nvcc, symbol allowlist) first, then a verdict and a time chosen by the test, like
``tests.resolve.resolve_support.GpuDouble`` on the resolving machine. Dask, the workers, the scheduling by arch
resource, the transport and the cache writes are all real; only the GPU is not. It also leaves a file per job it
judged in ``record_dir`` (which worker, which kernel and arch), and can kill its own worker process or hold a job
back, for the fault tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from distributed import Nanny, Scheduler

from r1build.cache.store import Cache
from r1build.gate.static import StaticGate
from r1build.judge import Job
from r1build.records import Candidate, Result
from tests.support.decisions import measured_result

__all__ = ["TINY", "FakeGpu", "TestCluster", "fake_time_us", "tiny_project"]

TINY = Path(__file__).resolve().parents[1] / "packages" / "tiny"


class TestCluster:
    """A Dask scheduler on 127.0.0.1 and one worker process (under its nanny) per entry of ``workers``, which maps
    a worker's name to its resources. They run on an event loop of their own, on a thread of this process, so a
    test can stop the scheduler under a running resolve."""

    __test__ = False

    def __init__(self, workers: dict[str, dict[str, float]], *, nthreads: int = 1) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="test-cluster", daemon=True)
        self._thread.start()
        self.scheduler: Any = None
        self.nannies: dict[str, Any] = {}
        try:
            self.address: str = self._call(self._start(workers, nthreads))
        except BaseException:
            self.close()
            raise

    def _call(self, coro: Any, timeout_s: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _start(self, workers: dict[str, dict[str, float]], nthreads: int) -> str:
        self.scheduler = await Scheduler(host="127.0.0.1", port=0, dashboard_address=":0")
        nannies = {
            name: Nanny(
                self.scheduler.address,
                nthreads=nthreads,
                resources=resources,
                name=name,
                host="127.0.0.1",
                dashboard=False,
                memory_limit=0,
                death_timeout=30,
            )
            for name, resources in workers.items()
        }
        await asyncio.gather(*nannies.values())
        self.nannies = nannies
        return str(self.scheduler.address)

    def worker_pid(self, name: str) -> int:
        """The process id of worker ``name``."""
        return int(self.nannies[name].process.process.pid)

    def kill_worker(self, name: str) -> None:
        """SIGKILL worker ``name``'s process (its nanny starts a new one)."""
        os.kill(self.worker_pid(name), signal.SIGKILL)

    def stop_scheduler(self) -> None:
        """Close the scheduler, as a crash of its host would: clients and workers lose it."""
        self._call(self.scheduler.close())

    async def _close(self) -> None:
        await asyncio.gather(*(n.close(timeout=5) for n in self.nannies.values()), return_exceptions=True)
        if self.scheduler is not None:
            with contextlib.suppress(Exception):
                await self.scheduler.close()

    def close(self) -> None:
        """Stop the workers and the scheduler."""
        with contextlib.suppress(Exception):
            self._call(self._close(), timeout_s=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> TestCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fake_time_us(candidate: Candidate) -> float:
    """The time the stand-in reports for a candidate: distinct per variant, the same on every machine."""
    return 10.0 + int(candidate.digest[:6], 16) % 1000 / 10


def _worker_name() -> str:
    from distributed import get_worker

    return str(get_worker().name)


@dataclass
class FakeGpu:
    """Judges like a GPU of the worker's arch (see the module docstring)."""

    record_dir: str | None = None
    """Where each judged job leaves a JSON file: worker, kernel, arch, candidates."""
    device: str = "Test GPU"
    """The GPU name put on results."""
    die_once: str | None = None
    """A marker file: the first job that finds it absent creates it and kills this worker process mid-job."""
    archs: frozenset[str] | None = None
    """The archs its GPU runs, as the local GPU evaluator says (None: whatever the worker advertises)."""
    hold_arch: str | None = None
    """Jobs of this arch wait (up to 60 s) until ``release`` exists."""
    release: str | None = None
    reject: str | None = None
    """Every candidate the gate passes is found incorrect, with this detail (as newer checks would find it)."""

    def __post_init__(self) -> None:
        self.cache = Cache(Path(tempfile.mkdtemp(prefix="r1build-fake-gpu-")) / "cache")
        self.gate = StaticGate(self.cache, jobs=1)

    def evaluate(self, job: Job) -> list[Result]:
        if self.die_once is not None and not Path(self.die_once).exists():
            Path(self.die_once).write_text(_worker_name())
            os._exit(3)  # the worker dies mid-job, as a host losing power would
        if self.hold_arch == job.arch and self.release is not None:
            deadline = time.monotonic() + 60
            while not Path(self.release).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if self.record_dir is not None:
            name = f"{job.spec.name}-{job.arch}-{time.monotonic_ns()}.json"
            (Path(self.record_dir) / name).write_text(
                json.dumps(
                    {
                        "worker": _worker_name(),
                        "kernel": job.spec.name,
                        "arch": job.arch,
                        "candidates": [c.digest for c in job.candidates],
                    }
                )
            )
        out = []
        for c, gated in zip(job.candidates, self.gate.evaluate(job), strict=True):
            if not gated.ok:
                out.append(gated)
            elif self.reject is not None:
                rejected = Result(
                    candidate=c.digest, arch=job.arch, status="incorrect", stage="evaluate", detail=self.reject
                )
                out.append(replace(rejected, device=self.device, gate=gated.gate))
            else:
                # the gate's report kept, as the real evaluator keeps it
                measured = measured_result(c.digest, fake_time_us(c), arch=job.arch, device=self.device)
                out.append(replace(measured, gate=gated.gate))
        return out


def tiny_project(where: Path, archs: list[str], *, variants: bool = True, evaluation: str = "") -> Path:
    """The tiny project copied to ``where`` for these archs; with ``variants``, a hand-written candidate of tunable
    ``BLOCK`` beside its baseline: three variants per arch (the baseline, ``BLOCK=128``, ``BLOCK=256``).
    ``evaluation``: lines of an ``[evaluation]`` table."""
    shutil.copytree(TINY, where, ignore=shutil.ignore_patterns("__pycache__", "kernels.lock"))
    source = (where / "scale.cu").read_text(encoding="utf-8")
    block = source.replace("namespace {", "#ifndef BLOCK\n#define BLOCK 256\n#endif\n\nnamespace {", 1)
    (where / "scale_block.cu").write_text(
        block.replace("(n + 255) / 256, 256", "(n + BLOCK - 1) / BLOCK, BLOCK"), encoding="utf-8"
    )
    toml = where / "kernels.toml"
    text = toml.read_text(encoding="utf-8").replace('archs = ["sm_90"]', "archs = " + json.dumps(archs))
    if variants:
        text = text.replace(
            'baseline = "scale.cu"',
            'baseline = "scale.cu"\ncandidates = ["scale_block.cu"]\ntunables = { BLOCK = [128, 256] }',
        )
    if evaluation:
        text = text.replace("[[kernel]]", f"[evaluation]\n{evaluation}\n\n[[kernel]]", 1)
    toml.write_text(text, encoding="utf-8")
    return where


def facts_of_a_worker_without_r1build() -> Any:
    """What ``Client.run`` gets from a worker where r1build is not installed (run there by the tests)."""
    raise ModuleNotFoundError("No module named 'r1build'")
