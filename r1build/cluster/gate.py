"""The static gate of a cluster resolve: the same verdicts, keys and cache as :class:`~r1build.gate.static.StaticGate`,
with each compile that misses the cache run on a ``compile`` slot of the cluster: one task per candidate for all
the archs it is asked for (one nvcc with a ``-gencode`` per arch, as the local gate compiles it). The resolving
machine looks the verdicts up, applies the limits and stores them under the local gate's keys: it stays the one
writer of its cache, and a later local run takes them from there. The cluster is connected on the first compile
it is needed for, so a run whose verdicts are all cached never reaches the scheduler."""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

from ..errors import ClusterError
from ..gate.static import StaticGate
from ..manifest.model import KernelSpec, Manifest
from ..records import Result
from .checks import gate_verdict_problem
from .facts import COMPILE_RESOURCE
from .tasks import compile_verdicts, header_files

if TYPE_CHECKING:
    from ..cache import Cache
    from .session import ClusterEvaluator

__all__ = ["ClusterGate"]


class ClusterGate(StaticGate):
    """A :class:`StaticGate` whose compiles run on the cluster's compile slots (here, where the cluster has none)."""

    def __init__(self, cache: Cache, cluster: Callable[[], ClusterEvaluator], **kwargs: Any) -> None:
        super().__init__(cache, **kwargs)
        self._connect = cluster
        self.remote_compiles = 0
        """Compile tasks the cluster's workers ran for this gate: one per candidate, for all its archs."""

    @property
    def cluster(self) -> ClusterEvaluator:
        """The cluster, connected on first use (:class:`~r1build.errors.ClusterRefusedError` when it cannot be
        used)."""
        return self._connect()

    def _compile_all(self, manifest: Manifest, spec: KernelSpec, tasks: list[Any]) -> list[tuple[str, Result]]:
        if not tasks:
            return []  # every verdict was cached: the scheduler is not asked for anything

        cluster = self.cluster
        if cluster.inventory.compile_slots == 0:
            return super()._compile_all(manifest, spec, tasks)
        groups: dict[str, list[Any]] = {}
        for task in tasks:
            groups.setdefault(task.candidate.digest, []).append(task)
        headers = header_files(manifest)  # a worker on another host has none of the project's include folders
        futures = {
            cluster.client.submit(
                compile_verdicts,
                manifest,
                spec,
                [t.arch for t in group],
                group[0].candidate,
                self.timeout_s,
                headers,
                expected=cluster.inventory.here,
                resources={COMPILE_RESOURCE: 1},
                pure=False,
            ): group
            for group in groups.values()
        }
        arrived: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for future in futures:
            future.add_done_callback(arrived.put)
        done: list[tuple[str, Result]] = []
        try:
            for _ in futures:
                future = arrived.get()
                group = futures[future]
                for task, (result, cacheable) in zip(group, self._received(cluster, spec, future, group), strict=True):
                    if cacheable:
                        self.cache.put_gate(task.key, result)
                    done.append((task.key, result))
                with self._lock:
                    self.remote_compiles += 1
        finally:
            cluster.client.cancel([f for f in futures if not f.done()])
        return done

    def _received(
        self, cluster: ClusterEvaluator, spec: KernelSpec, future: Any, group: Sequence[Any]
    ) -> list[tuple[Result, bool]]:
        """What a compile slot sent back for one candidate on the archs of ``group``, checked:
        :class:`~r1build.errors.ClusterError` when the compile failed there or what it sent is refused."""
        candidate = group[0].candidate.digest
        name = f"{spec.name}/{','.join(t.arch for t in group)}"
        try:
            sent = _checked_all(future.result(), candidate, [t.arch for t in group], self.toolchain.ident)
        except CancelledError:
            raise ClusterError(
                f"{spec.name}: lost the Dask scheduler at {cluster.address} while compiling; what was measured "
                "before is cached, so running the same command again continues"
            ) from None
        except Exception as exc:
            raise ClusterError(f"{name}: a gate compile failed on the cluster: {type(exc).__name__}: {exc}") from exc
        if isinstance(sent, str):
            raise ClusterError(
                f"{name}: refused the gate verdict worker {cluster.worker_of(future)} sent back: {sent}; nothing "
                "of it was kept. Check that every host runs the same r1build, or stop that worker"
            )
        return sent


def _checked_all(sent: object, candidate: str, archs: Sequence[str], toolchain: str) -> list[tuple[Result, bool]] | str:
    """What a compile slot sent back for ``candidate`` on each of ``archs``: the list
    :func:`~r1build.cluster.tasks.compile_verdicts` returns, one pair per arch in order (:func:`_checked`), or why
    it is not."""
    if not isinstance(sent, list) or len(sent) != len(archs):
        count = len(sent) if isinstance(sent, list) else f"a {type(sent).__name__}"
        return f"{count} verdicts where {len(archs)} (one per arch asked for) belong"
    out = []
    for one, arch in zip(sent, archs, strict=True):
        checked = _checked(one, candidate, arch, toolchain)
        if isinstance(checked, str):
            return checked
        out.append(checked)
    return out


def _checked(sent: object, candidate: str, arch: str, toolchain: str) -> tuple[Result, bool] | str:
    """What a compile slot sent back for ``candidate`` on ``arch``: a verdict the local gate could have given,
    and whether it may be cached, or why it is not (:func:`~r1build.cluster.checks.gate_verdict_problem`)."""
    if not (isinstance(sent, tuple) and len(sent) == 2 and isinstance(sent[1], bool)):
        return f"a {type(sent).__name__} where a verdict and whether to cache it belong"
    result, cacheable = sent
    problem = gate_verdict_problem(result, candidate, arch, toolchain)
    if problem is not None or not isinstance(result, Result):
        return problem or "no result"
    return result, cacheable
