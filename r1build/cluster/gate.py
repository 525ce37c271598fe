"""The static gate of a cluster resolve: the same verdicts, keys and cache as :class:`~r1build.gate.static.StaticGate`,
with each compile that misses the cache run on a ``compile`` slot of the cluster. The resolving machine looks the
verdicts up, applies the limits and stores them: it stays the one writer of its cache."""

from __future__ import annotations

import queue
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

from ..errors import ClusterError
from ..gate.static import StaticGate
from ..manifest.model import KernelSpec, Manifest
from ..records import Result
from .checks import gate_verdict_problem
from .facts import COMPILE_RESOURCE
from .tasks import compile_verdict, header_files

if TYPE_CHECKING:
    from ..cache import Cache
    from .session import ClusterEvaluator

__all__ = ["ClusterGate"]


class ClusterGate(StaticGate):
    """A :class:`StaticGate` whose compiles run on the cluster's compile slots (here, where the cluster has none)."""

    def __init__(self, cache: Cache, cluster: ClusterEvaluator, **kwargs: Any) -> None:
        super().__init__(cache, **kwargs)
        self.cluster = cluster
        self.remote_compiles = 0
        """Compiles the cluster's workers ran for this gate."""

    def _compile_all(self, manifest: Manifest, spec: KernelSpec, tasks: list[Any]) -> list[tuple[str, Result]]:

        if not tasks or self.cluster.inventory.compile_slots == 0:
            return super()._compile_all(manifest, spec, tasks)
        client = self.cluster.client
        headers = header_files(manifest)  # a worker on another host has none of the project's include folders
        futures = {
            client.submit(
                compile_verdict,
                manifest,
                spec,
                t.arch,
                t.candidate,
                self.timeout_s,
                headers,
                expected=self.cluster.inventory.here,
                resources={COMPILE_RESOURCE: 1},
                pure=False,
            ): t
            for t in tasks
        }
        arrived: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for future in futures:
            future.add_done_callback(arrived.put)
        done: list[tuple[str, Result]] = []
        try:
            for _ in futures:
                future = arrived.get()
                task = futures[future]
                try:
                    sent = _checked(future.result(), task.candidate.digest, task.arch, self.toolchain.ident)
                except CancelledError:
                    raise ClusterError(
                        f"{spec.name}: lost the Dask scheduler at {self.cluster.address} while "
                        "compiling; what was measured before is cached, so running the same "
                        "command again continues"
                    ) from None
                except Exception as exc:
                    raise ClusterError(
                        f"{spec.name}/{task.arch}: a gate compile failed on the cluster: {type(exc).__name__}: {exc}"
                    ) from exc
                if isinstance(sent, str):
                    raise ClusterError(
                        f"{spec.name}/{task.arch}: refused the gate verdict worker {self.cluster.worker_of(future)} "
                        f"sent back: {sent}; nothing of it was kept. Check that every host runs the same r1build, "
                        "or stop that worker"
                    )
                result, cacheable = sent
                if cacheable:
                    self.cache.put_gate(task.key, result)
                with self._lock:
                    self.remote_compiles += 1
                done.append((task.key, result))
        finally:
            client.cancel([f for f in futures if not f.done()])
        return done


def _checked(sent: object, candidate: str, arch: str, toolchain: str) -> tuple[Result, bool] | str:
    """What a compile slot sent back for ``candidate`` on ``arch``: the pair
    :func:`~r1build.cluster.tasks.compile_verdict` returns (a verdict the local gate could have given, and whether
    it may be cached), or why it is not (:func:`~r1build.cluster.checks.gate_verdict_problem`)."""
    if not (isinstance(sent, tuple) and len(sent) == 2 and isinstance(sent[1], bool)):
        return f"a {type(sent).__name__} where a verdict and whether to cache it belong"
    result, cacheable = sent
    problem = gate_verdict_problem(result, candidate, arch, toolchain)
    if problem is not None or not isinstance(result, Result):
        return problem or "no result"
    return result, cacheable
