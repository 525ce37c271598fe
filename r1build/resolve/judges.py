"""The judges of one resolve run, made on first use: the static gate (local or on a cluster's compile slots),
the GPU evaluator of each arch (local GPUs or a cluster's workers), the Nsight Compute profiler, and whether the
LLM endpoint may be asked at all."""

from __future__ import annotations

import contextvars
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..cache import Cache
from ..events import Logger, Note, emit
from ..judge import Evaluator, Job
from ..manifest import Manifest
from ..manifest.archs import parse_arch
from ..records import ResolveOptions
from ..settings import env_settings
from ..toolchain.extras import CUPY, GENERATE
from .reach import unreachable

log = Logger("r1build.resolve")

if TYPE_CHECKING:
    from ..cluster.session import ClusterEvaluator
    from ..evaluate import GpuEvaluator
    from ..gate.static import StaticGate
    from ..manifest import KernelSpec
    from ..profile import Profiler
    from ..records import Candidate, Result
    from ..toolchain.nvcc import Toolchain


def _may_generate(manifest: Manifest, options: ResolveOptions, cache: Cache) -> bool:
    """Whether this run may ask the LLM: ``generate`` not False (None: unless ``R1BUILD_OFFLINE``), an endpoint
    configured, a cache that can keep what it costs, and the endpoint reachable at all (one TCP connection, so
    an endpoint that is down costs seconds and a warning, never a failed build)."""
    generate = options.generate if options.generate is not None else not env_settings(options.environ).offline
    if not generate:
        return False
    from ..generate import endpoint_configured, resolve_endpoint

    generation = manifest.settings.generation
    if not endpoint_configured(generation, options.environ):
        return False
    if not GENERATE.installed():
        if not options.build:
            raise GENERATE.missing()  # generating is asked for: say which extra installs it (exit 2)
        # a build has the user's own sources to fall back on, as with an endpoint that is down
        emit(
            Note(
                "warning",
                f"the build opted in to generating, but openai is not installed in the build "
                f"environment ({GENERATE.install_hint()}; for an isolated build, `r1build[generate]` in "
                "[build-system] requires): not generating in this build",
            )
        )
        return False
    url = resolve_endpoint(generation, options.environ).display_url
    if cache.degraded is not None:
        emit(
            Note("warning", f"not asking the LLM at {url}: the cache cannot keep what it would cost ({cache.degraded})")
        )
        return False
    why = unreachable(url)
    if why is not None:
        emit(Note("warning", f"the LLM endpoint {url} is unreachable ({why}): not generating in this run"))
        return False
    return True


def _nvidia_driver() -> bool:
    """Whether an NVIDIA kernel driver is loaded (a GPU that cupy could use), without loading CUDA."""
    return Path("/proc/driver/nvidia/version").exists()


def gate_batch() -> int:
    """How many of a kernel's own candidates a gate-only resolution compiles at once, in preference order: one
    per compile slot, so a batch takes one round of the cores."""
    from ..gate.nvcc import COMPILE_SLOTS

    return max(1, COMPILE_SLOTS)


ALONG = 2
"""How many of a gate-only job's candidates (the first, in preference order) go into the compiles of a GPU job of
the same kernel. Few: while a GPU machine compiles, its cores are the evaluation's bottleneck (each arch more in an
nvcc costs about a third of a compile), and the first candidate that passes wins a gate-only arch (the baseline,
as a rule); where none of these passes, the gate-only resolution gates the next a batch at a time
(:func:`~.work._gated`)."""


class Judges:
    """The evaluators available in this run, made on first use."""

    def __init__(
        self, cache: Cache, evaluate: bool | None, cluster: str | None = None, cluster_timeout_s: float = 10.0
    ) -> None:
        self.cache = cache
        self.evaluate = evaluate
        """Measure on local GPUs (:attr:`~r1build.records.ResolveOptions.evaluate`; None: when one is visible)."""
        self.cluster = cluster
        """The Dask scheduler whose workers judge instead of this machine (None: this machine)."""
        self._cluster_timeout_s = cluster_timeout_s
        self._cluster: ClusterEvaluator | None = None
        self._connecting = threading.Lock()
        self._gate: StaticGate | None = None
        self._making_gate = threading.Lock()
        self._toolchain: Toolchain | None = None
        self._objects: Path | None = None
        self._gpu: GpuEvaluator | ClusterEvaluator | None = None
        self._gpu_archs: set[str] | None = None
        self._endpoint: bool | None = None
        self._profiler: Profiler | Literal[False] | None = None

    def endpoint(self, manifest: Manifest, options: ResolveOptions) -> bool:
        """Whether an LLM endpoint may be used (decided at the first miss: importing openai is slow)."""
        if self._endpoint is None:
            self._endpoint = _may_generate(manifest, options, self.cache)
        return self._endpoint

    def silence_endpoint(self) -> None:
        """No more requests in this run: the endpoint never answered (a build goes on without it)."""
        self._endpoint = False

    def cached_gate_verdicts(
        self, manifest: Manifest, spec: KernelSpec, pairs: Sequence[tuple[str, Candidate]]
    ) -> list[Result] | None:
        """The static gate's verdict on each ``(arch, candidate)`` pair when the cache holds them all (read without
        the gate's compile machinery: a warm run makes no gate and imports none of it); None otherwise."""
        if self._gate is not None:
            return None
        from ..gate.verdicts import cached_verdicts

        return cached_verdicts(self.cache, manifest, spec, pairs, self.toolchain)

    @property
    def toolchain(self) -> Toolchain:
        """The nvcc in use, found once for the run (finding it stats the places it may be: 0.2 ms a time)."""
        if self._toolchain is None:
            from ..toolchain.nvcc import toolchain

            self._toolchain = toolchain()
        return self._toolchain

    def gate_verdicts(
        self, manifest: Manifest, spec: KernelSpec, pairs: Sequence[tuple[str, Candidate]]
    ) -> list[Result]:
        """The static gate's verdict on each ``(arch, candidate)`` pair: :meth:`cached_gate_verdicts`, else
        :attr:`gate`'s."""
        found = self.cached_gate_verdicts(manifest, spec, pairs)
        if found is not None:
            return found
        with self._making_gate:  # asked from several threads at once
            gate = self.gate
        return gate.judge(manifest, spec, pairs)

    def fresh_gate_verdicts(
        self, manifest: Manifest, asked: dict[str, tuple[KernelSpec, list[tuple[str, Candidate]]]]
    ) -> dict[str, list[Result]]:
        """:meth:`gate_verdicts` for each kernel of ``asked`` (its spec and pairs), the kernels in parallel. Apart
        from the cached ones so that a run whose verdicts are all cached starts no thread pool."""
        if not asked:
            return {}
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(asked)) as pool:
            futures = {
                name: pool.submit(contextvars.copy_context().run, self.gate_verdicts, manifest, spec, pairs)
                for name, (spec, pairs) in asked.items()
            }
            return {name: future.result() for name, future in futures.items()}

    @property
    def gate(self) -> StaticGate:
        if self._gate is None:
            if self.cluster is not None:
                from ..cluster.gate import ClusterGate

                # connects on the first compile it needs: a run whose verdicts are all cached never does
                self._gate = ClusterGate(self.cache, self._on_cluster)
            else:
                import tempfile  # here: a run whose verdicts are all cached never makes a folder

                from ..gate.static import StaticGate

                # where a local GPU may evaluate, the gate keeps its objects: the GPU evaluator links its
                # libraries from them instead of compiling each variant again
                keep = self.evaluate is not False and _nvidia_driver()
                self._objects = Path(tempfile.mkdtemp(prefix="r1build-objects-")) if keep else None
                self._gate = StaticGate(self.cache, keep_objects=self._objects)
        return self._gate

    def _on_cluster(self) -> ClusterEvaluator:
        """The cluster's evaluator, connected on first use (:class:`~r1build.errors.ClusterRefusedError` when it
        cannot be used)."""
        with self._connecting:  # the gate's compiles of several kernels may ask at once
            if self._cluster is None:
                from ..cluster.session import ClusterEvaluator

                self._cluster = ClusterEvaluator(self.cluster or "", self.cache, timeout_s=self._cluster_timeout_s)
                self._gpu = self._cluster
            return self._cluster

    def gpu_for(self, arch: str) -> Evaluator | None:
        if self.evaluate is False:
            return None
        if self.cluster is not None:
            cluster = self._on_cluster()
            self._gpu_archs = set(cluster.archs)
            return cluster if arch in self._gpu_archs else None
        if self._gpu_archs is None:
            self._gpu_archs = set()
            if not CUPY.installed():
                if self.evaluate:  # measuring was asked for (a build's R1BUILD_EVALUATE=1)
                    raise CUPY.missing()
                if _nvidia_driver():
                    emit(
                        Note(
                            "info",
                            f"an NVIDIA driver is present but cupy is not installed, so nothing is "
                            f"measured on a GPU: {CUPY.install_hint()}",
                        )
                    )
                return None
            start = time.perf_counter()
            try:
                from ..evaluate import GpuEvaluator, detect_gpus
            except ImportError:
                return None
            found = detect_gpus()
            log.debug(
                "judges: GPUs looked for in %.3f s (imports, cupy, CUDA set up): %d",
                time.perf_counter() - start,
                len(found),
            )
            if found:
                start = time.perf_counter()
                evaluator = GpuEvaluator(self.cache, gpus=found, gate=self.gate)
                log.debug("judges: GPU evaluator made in %.3f s", time.perf_counter() - start)
                self._gpu = evaluator
                self._gpu_archs = set(evaluator.archs)
        return self._gpu if arch in self._gpu_archs else None

    def profiler_for(self, arch: str) -> Profiler | None:
        """The Nsight Compute profiler for a search that the local GPU evaluator measures on ``arch``; None for
        any other judge, or without ncu (then one note says so)."""
        if self._gpu is None or self.gpu_for(arch) is not self._gpu:
            return None
        if self._profiler is None:
            from ..profile import Profiler, find_ncu

            ncu = find_ncu()
            self._profiler = Profiler(ncu) if ncu else False
            if not ncu:
                emit(
                    Note(
                        "info",
                        "ncu (Nsight Compute) not found: finalists are not profiled (put ncu on PATH or "
                        "set R1BUILD_NCU)",
                    )
                )
        return self._profiler or None

    def gpu_archs(self) -> set[str]:
        """Archs a local GPU can measure (empty until a GPU was looked for, or without one)."""
        return set(self._gpu_archs or ())

    def unmeasured(self, arch: str) -> str:
        """Why no GPU judges ``arch`` in this run; never that none is here when one of ``arch`` is (its decision
        was then refused: the warning before says why)."""
        if self.evaluate is False:
            return "GPU measuring is off (--no-gpu, or a build without R1BUILD_EVALUATE=1)"
        if arch in self.gpu_archs():
            where = f"the cluster at {self.cluster}" if self.cluster is not None else "here"
            return f"the decision a GPU of {arch} {where} made could not be used (see the warning before)"
        known = ", ".join(sorted(self.gpu_archs()))
        if self.cluster is not None:
            return (
                f"no worker of the cluster at {self.cluster} has a GPU of {arch} (GPU archs there: {known or 'none'})"
            )
        return f"no local GPU of this arch (GPUs here: {known})" if known else "no local GPU"

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Start the CPU work (gate, library builds) of every GPU job ahead, so the GPU never waits for nvcc; and
        gate the first batch (:func:`gate_batch`) of the jobs no GPU here can take, each kernel's for all its
        archs at once (one nvcc per candidate for all its archs; the verdicts are cached for the gate-only
        resolution that follows, which gates further only where no candidate of that batch may win). Where a
        local GPU judges another arch of the same kernel, only the first :data:`ALONG` candidates are compiled,
        along with the GPU's own gate compiles (:meth:`~r1build.gate.static.StaticGate.compile_along`) instead
        of by an nvcc of their own: the resolve asks for those verdicts only after the GPU jobs
        (:func:`~.run.resolve`)."""
        gpu_jobs = [job for job in jobs if self.gpu_for(job.arch) is not None]
        gpu_kernels = {job.spec.name for job in gpu_jobs}
        batch = gate_batch()
        by_kernel: dict[str, list[Job]] = {}
        for job in jobs:
            if self.gpu_for(job.arch) is None:
                by_kernel.setdefault(job.spec.name, []).append(job)
        keep = self.cache.degraded is None  # somewhere to keep the verdicts
        # per kernel, the first batch's candidates that the gate compiles now (the others: along the GPU's)
        now = {
            name: {c.digest for job in kernel_jobs for c in job.candidates[:batch]}
            for name, kernel_jobs in by_kernel.items()
        }
        start = time.perf_counter()
        if keep and self.cluster is None and any(name in gpu_kernels for name in by_kernel):
            now.update(self._compile_along(gpu_jobs, by_kernel, min(ALONG, batch)))
            log.debug("judges: gate-only batches set to compile along in %.3f s", time.perf_counter() - start)
        if gpu_jobs and self._gpu is not None:
            start = time.perf_counter()
            self._gpu.prepare(gpu_jobs)
            log.debug("judges: GPU jobs started in %.3f s", time.perf_counter() - start)
        by_kernel = {name: kernel_jobs for name, kernel_jobs in by_kernel.items() if now[name]}
        if not by_kernel or not keep:  # nothing to gate, or nowhere to keep the verdicts
            return
        gate = self.gate

        def judge(kernel_jobs: list[Job]) -> None:
            first = kernel_jobs[0]
            wanted = now[first.spec.name]
            pairs = [(job.arch, c) for job in kernel_jobs for c in job.candidates[:batch] if c.digest in wanted]
            gate.judge(first.manifest, first.spec, pairs)

        from concurrent.futures import ThreadPoolExecutor

        from ..gate.nvcc import COMPILE_SLOTS
        from ..toolchain.stopping import stoppable

        # Ctrl-C stops every kernel's compiles at once (the scope is in the contexts the threads run in)
        with stoppable() as scope, ThreadPoolExecutor(max_workers=min(COMPILE_SLOTS, len(by_kernel))) as pool:
            try:
                for future in [
                    pool.submit(contextvars.copy_context().run, judge, kernel_jobs)
                    for kernel_jobs in by_kernel.values()
                ]:
                    future.result()
            except BaseException as exc:
                pool.shutdown(wait=False, cancel_futures=True)
                if not isinstance(exc, Exception):
                    scope.stop()
                raise

    def _compile_along(
        self, gpu_jobs: Sequence[Job], by_kernel: dict[str, list[Job]], batch: int
    ) -> dict[str, set[str]]:
        """Have the gate compile the first ``batch`` candidates of each gate-only job of a kernel with a GPU job
        along with that GPU job's own gate compiles (one nvcc per candidate for all its archs); returns, per such
        kernel, the digests that are left to gate now: those whose GPU verdicts are all in the cache already (the
        GPU job compiles nothing for them)."""
        from ..gate.static import gate_key

        gate = self.gate
        tc = gate.toolchain
        gpu_archs: dict[str, list[str]] = {}
        for job in gpu_jobs:
            gpu_archs.setdefault(job.spec.name, []).append(job.arch)
        left: dict[str, set[str]] = {}
        for name, kernel_jobs in by_kernel.items():
            if name not in gpu_archs:
                continue
            first = kernel_jobs[0]
            candidates = list({c.digest: c for job in kernel_jobs for c in job.candidates[:batch]}.values())
            cached = {
                c.digest
                for c in candidates
                if all(
                    self.cache.get_gate(gate_key(first.manifest, first.spec, parse_arch(a), c, tc)) is not None
                    for a in gpu_archs[name]
                )
            }
            left[name] = cached
            for job in kernel_jobs:
                gate.compile_along(name, [c for c in job.candidates[:batch] if c.digest not in cached], [job.arch])
        return left

    def close(self) -> None:
        """Stop GPU workers; remove the gate's objects."""
        if self._gpu is not None:
            self._gpu.close()
        if self._objects is not None:
            shutil.rmtree(self._objects, ignore_errors=True)
