"""``r1build worker``: the Dask workers of one host, one per visible GPU and one for compiles.

Each GPU worker is a Dask worker (under its nanny, which restarts it when it dies) that sees exactly one GPU
(``CUDA_VISIBLE_DEVICES``), advertises the GPU's archs as resources (``sm_90=2,sm_90a=2`` on an H200: two jobs at
once, so that the next job's compiles overlap the GPU's checks and timing, which the evaluator keeps one at a
time), and is named after the host, the device and the GPU. The compile worker advertises ``compile=N`` for the
static gate. TLS and authentication come from Dask's own configuration, as for ``dask worker``.

Whoever can submit to the scheduler runs code in these workers, so ``r1build worker`` first replaces itself
(:func:`exec_scrubbed`, the same process id) by a process whose environment holds no credential
(:func:`worker_process_environment`): the Dask nannies run in it, and the worker processes they spawn inherit it,
so a task finds no API key or cloud credential in ``os.environ`` nor in ``/proc/<pid>/environ`` of its process or
of its nanny (which shows the environment a process was executed with, whatever it changed since).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..convert import field, record
from ..errors import ClusterRefusedError
from ..evaluate.devices import GpuInfo, archs_of, visible_devices_value
from ..manifest.addresses import cluster_address_problem
from ..sandbox import scrubbed_environment
from ..settings import WORKER_VARIABLES
from . import tls_problem
from .facts import COMPILE_RESOURCE

__all__ = [
    "WorkerPlan",
    "check_scheduler",
    "exec_scrubbed",
    "plan_workers",
    "run_workers",
    "worker_process_environment",
]

_KEPT = ("HOME", "TMPDIR", "USER", "LOGNAME", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "VIRTUAL_ENV", "CONDA_PREFIX")
"""What a Dask worker keeps beyond a candidate's allowlist: its user, home (Dask's ``~/.config/dask``) and
temporary folder (the workers' scratch caches), its Python path and the GPUs it may use."""
_AS_THIS_HOST_HAS_THEM = ("HOME", "TMPDIR", "CUPY_CACHE_DIR", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE")
"""What a candidate's environment sets to its own (a private home, no user site): a Dask worker's are this
host's, or unset."""


@record(frozen=True)
class WorkerPlan:
    """One Dask worker to start."""

    name: str
    """Its name in the cluster (``host-gpu0``, ``host-compile``)."""
    nthreads: int
    """Tasks it runs at once."""
    resources: dict[str, float]
    """What it advertises: GPU archs, or ``compile``."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment of its process (``CUDA_VISIBLE_DEVICES`` for a GPU worker)."""
    gpu: str | None = None
    """The GPU's name, for a GPU worker."""

    def dask_command(self, scheduler: str) -> str:
        """The equivalent plain ``dask worker`` command line."""
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        res = ",".join(f"{k}={v:g}" for k, v in self.resources.items())
        return (
            f"{env + ' ' if env else ''}dask worker {scheduler} --nworkers 1 --nthreads {self.nthreads} "
            f"--resources {res} --name {self.name}"
        )


def plan_workers(
    gpus: Sequence[GpuInfo], *, compile_slots: int, jobs_per_gpu: int = 2, host: str | None = None
) -> list[WorkerPlan]:
    """The workers of one host: one per GPU in ``gpus``, and one with ``compile_slots`` compile slots (none when
    0)."""
    host = host or socket.gethostname().split(".")[0]
    plans = []
    for gpu in gpus:
        resources = {arch: float(jobs_per_gpu) for arch in archs_of(gpu)}
        plans.append(
            WorkerPlan(
                f"{host}-gpu{gpu.index}",
                jobs_per_gpu,
                resources,
                {"CUDA_VISIBLE_DEVICES": visible_devices_value(gpu.index)},
                gpu.name,
            )
        )
    if compile_slots > 0:
        plans.append(WorkerPlan(f"{host}-compile", compile_slots, {COMPILE_RESOURCE: float(compile_slots)}))
    return plans


async def _serve(scheduler: str, plans: Sequence[WorkerPlan], ready: Callable[[], None], timeout_s: float) -> None:
    from distributed import Nanny

    nannies: list[Any] = [
        Nanny(
            scheduler,
            nthreads=p.nthreads,
            resources=p.resources,
            name=p.name,
            env=p.env,
            death_timeout=timeout_s,
            dashboard=False,
            memory_limit=0,
        )
        for p in plans
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await asyncio.wait_for(asyncio.gather(*(n.start() for n in nannies)), timeout_s)
        except (OSError, TimeoutError, asyncio.TimeoutError, RuntimeError) as exc:
            # Dask wraps what stopped a nanny: RuntimeError("Nanny failed to start.") from the OSError
            cause = exc.__cause__ if isinstance(exc, RuntimeError) else exc
            if isinstance(exc, RuntimeError) and not isinstance(cause, (OSError, TimeoutError)):
                raise
            raise ClusterRefusedError(
                f"the Dask scheduler at {scheduler} is unreachable ({str(cause) or f'timed out after {timeout_s:g} s'})"
            ) from None
        ready()
        finished = asyncio.ensure_future(asyncio.gather(*(n.finished() for n in nannies)))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({finished, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
    finally:
        await asyncio.gather(*(n.close(timeout=10) for n in nannies), return_exceptions=True)


def worker_process_environment(base: Mapping[str, str]) -> dict[str, str]:
    """The environment of ``r1build worker``'s Dask nannies and workers, from ``base`` (this process's): the
    allowlist of a candidate's process (:func:`~r1build.evaluate.process.scrubbed_environment`, which drops every
    name that looks like a credential), plus :data:`_KEPT`, the ``R1BUILD_*`` variables of
    :data:`~r1build.settings.WORKER_VARIABLES`, and every ``DASK_*`` variable: Dask's settings, the TLS key
    file's path among them, which a task reads through ``dask.config`` in any case."""
    extra = {k: base[k] for k in (*_KEPT, *WORKER_VARIABLES) if k in base}
    env = scrubbed_environment(base, home=Path(base.get("HOME") or "/"), extra=extra)
    for name in _AS_THIS_HOST_HAS_THEM:
        if name in base:
            env[name] = base[name]
        else:
            env.pop(name, None)
    env.update({k: v for k, v in base.items() if k.startswith("DASK_")})
    return env


def exec_scrubbed(argv: Sequence[str]) -> NoReturn:
    """Replace this process (same id) by ``python -m r1build.cli.main *argv`` with the
    :func:`worker_process_environment` of this one: ``/proc/<pid>/environ`` then shows the scrubbed one."""
    env = worker_process_environment(os.environ)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "r1build.cli.main", *argv], env)


def check_scheduler(scheduler: str) -> None:
    """:class:`~r1build.errors.ClusterRefusedError` when ``scheduler`` is malformed, Dask is not installed, or
    Dask's configuration gives a worker no TLS settings for a ``tls://`` address."""
    problem = cluster_address_problem(scheduler)
    if problem is not None:
        raise ClusterRefusedError(f"--scheduler: {problem}")
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ClusterRefusedError("r1build worker needs Dask: pip install 'r1build[cluster]'") from None
    problem = tls_problem(scheduler, "worker")
    if problem is not None:
        raise ClusterRefusedError(f"--scheduler: {problem}")


def run_workers(
    scheduler: str, plans: Sequence[WorkerPlan], *, ready: Callable[[], None] = lambda: None, timeout_s: float = 60.0
) -> None:
    """Start the planned workers, connected to ``scheduler``, and serve until SIGINT or SIGTERM (or until every
    worker has ended). :class:`~r1build.errors.ClusterRefusedError` when the address is malformed, Dask is not
    installed or the scheduler is unreachable within ``timeout_s``."""
    check_scheduler(scheduler)
    if not plans:
        raise ClusterRefusedError("nothing to start: no GPU is visible and compile slots are 0")
    asyncio.run(_serve(scheduler, plans, ready, timeout_s))
