"""What runs inside a Dask worker: one static-gate compile (one candidate for all its archs), or one GPU job
through the local evaluator.

A GPU job runs exactly what ``r1build resolve`` runs on a machine with a GPU: :class:`~r1build.evaluate.GpuEvaluator`
(gate, library builds, correctness checks, sanitizers, timing in an isolated worker process with a scrubbed
environment), one per Dask worker process and resolve, so its GPU worker process and compiles serve every job of
one resolve. Its cache is a scratch one of the worker's (gate verdicts, the GPU's floors): the resolving machine is
the one writer of the project's cache and lock, and gets every verdict back with the job's results.

The project's reference modules travel with each job (:class:`ProjectFiles`) and are written once per content
digest under the worker's temporary folder; candidate sources travel inside the job.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

from ..convert import field, record, replace
from ..errors import ClusterRefusedError, EvaluationError
from ..judge import Job
from ..keys import digest_bytes, digest_json
from ..manifest.flags import include_flag
from ..manifest.model import KernelSpec, Manifest
from ..manifest.reference import reference_modules
from ..records import Candidate, Result

__all__ = [
    "PROGRESS_TOPIC",
    "JobOutcome",
    "ProjectFiles",
    "WorkerEvaluator",
    "compile_verdict",
    "compile_verdicts",
    "evaluate_job",
    "local_gpu_evaluator",
    "project_files",
    "worker_cache",
    "worker_facts",
]

PROGRESS_TOPIC = "r1build-jobs"
"""The Dask event topic a worker logs ``{"job": tag, "state": "running", "name": worker name}`` to when it starts a
GPU job (Dask adds the worker's address as ``worker``)."""

_MAX_PROJECT_BYTES = 16 << 20
_MAX_PROJECT_FILES = 2000


class WorkerEvaluator(Protocol):
    """What judges a GPU job inside a worker (the local GPU evaluator, or a test's stand-in for the GPU)."""

    def evaluate(self, job: Job) -> list[Result]:
        """One result per candidate of ``job``."""
        ...


@record(frozen=True)
class ProjectFiles:
    """The project files a job needs on a worker: for a GPU job every reference module and the Python files beside
    it; for any compile the headers under the manifest's relative include folders (``-Iinclude``), which a worker on
    another host does not have."""

    manifest_name: str
    """The manifest's file name (``kernels.toml``, ``pyproject.toml``)."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Path relative to the manifest's folder → bytes."""

    @property
    def digest(self) -> str:
        """Identity of the content (the folder a worker writes it to)."""
        return digest_json(
            {"manifest": self.manifest_name, "files": {k: digest_bytes(v) for k, v in self.files.items()}}
        )


def _include_files(manifest: Manifest, root: Path) -> dict[str, bytes]:
    """Every file under the manifest's relative include folders (not the project's own folder or one above it,
    as :func:`~r1build.manifest.flags.include_digest` counts them), by path relative to ``root``."""
    files: dict[str, bytes] = {}
    pending: dict[str, Path] = {}
    size = 0
    for flag in manifest.settings.nvcc_flags:
        for folder in (include_flag(flag) or ("", []))[1]:
            path = (manifest.root / folder).resolve()
            if Path(folder).is_absolute() or path == root or path in root.parents or root not in path.parents:
                continue  # a system folder, the project itself, or a folder outside it: not the project's to send
            # under the folder as the flag names it (a link's name, not its target's): the worker's compile looks there
            named = Path(os.path.normpath(root / folder))
            where = named if root in named.parents else path
            # every file, hidden ones too: the folder's digest keys the gate's verdicts, here and on the worker
            for p in sorted(path.rglob("*")) if path.is_dir() else []:
                if p.is_file():
                    rel = (where / p.relative_to(path)).relative_to(root).as_posix()
                    if rel not in files:
                        pending[rel] = p
                        size += p.stat().st_size
                        if size > _MAX_PROJECT_BYTES or len(pending) > _MAX_PROJECT_FILES:
                            _refuse(manifest, len(pending), size, partial=True)  # before reading them all
                        files[rel] = b""
    return {rel: pending[rel].read_bytes() for rel in files}


def header_files(manifest: Manifest) -> ProjectFiles:
    """The headers under the manifest's relative include folders alone (what a compile on a worker needs).
    :class:`~r1build.errors.ClusterRefusedError` when that is more than a job should carry."""
    return _bounded(manifest, _include_files(manifest, manifest.root.resolve()))


def project_files(manifest: Manifest, specs: Sequence[KernelSpec]) -> ProjectFiles:
    """The reference modules of ``specs`` (the numpy, gpu and torch references) and the ``.py`` files beside them
    (:func:`~r1build.manifest.reference.reference_modules`: a reference importing its neighbours finds them on the
    worker), and the headers of :func:`header_files`. :class:`~r1build.errors.ClusterRefusedError` when that is more
    than a job should carry."""
    files: dict[str, bytes] = _include_files(manifest, manifest.root.resolve())
    refs = [r for spec in specs for r in (spec.reference, spec.gpu_reference, spec.torch_reference) if r is not None]
    for rel, path in reference_modules(manifest.root, refs).items():
        files.setdefault(rel, path.read_bytes())
    return _bounded(manifest, files)


def _bounded(manifest: Manifest, files: dict[str, bytes]) -> ProjectFiles:
    size = sum(len(v) for v in files.values())
    if size > _MAX_PROJECT_BYTES or len(files) > _MAX_PROJECT_FILES:
        _refuse(manifest, len(files), size)
    return ProjectFiles(manifest.path.name, files)


def _refuse(manifest: Manifest, count: int, size: int, *, partial: bool = False) -> NoReturn:
    """Refuse a job whose project files are ``count`` files of ``size`` bytes (``partial``: at least, counting
    stopped there)."""
    raise ClusterRefusedError(
        f"the reference modules of {manifest.path}, the Python files beside them and the headers of its include "
        f"folders are {'at least ' if partial else ''}{count} files, {size >> 20} MiB: too "
        "much to send with every job; keep the references in a folder of their own, and include folders to the "
        "project's own headers"
    )


def _materialize(project: ProjectFiles) -> Path:
    """The project's files in a folder of this worker (written once per content, atomically)."""
    base = Path(tempfile.gettempdir()) / "r1build-cluster" / "projects"
    target = base / project.digest[:32]
    if target.is_dir():
        return target
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".incoming-", dir=base))
    root = scratch.resolve()
    for rel, data in project.files.items():
        path = (scratch / rel).resolve()
        if root not in path.parents:  # the resolving machine wrote these names; refuse any that leave the folder
            raise EvaluationError(f"project file {rel!r} leaves the project folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    try:
        scratch.rename(target)
    except OSError:  # another job of the same project got there first
        shutil.rmtree(scratch, ignore_errors=True)
    return target


@record(frozen=True)
class JobOutcome:
    """What a worker sends back for one GPU job."""

    results: list[Result]
    """One per candidate, in order: exactly what the local evaluator returned, with the host recorded."""
    gates: dict[str, Result]
    """The static gate's verdicts (before limits) the job's evaluator holds, by gate key, for the resolving
    machine's cache."""
    host: str
    """Host name of the worker."""
    worker: str
    """The Dask worker's name."""


_lock = threading.RLock()  # reentrant: a factory may open worker_cache() under it
_evaluators: dict[tuple[str, str], WorkerEvaluator] = {}
_active: dict[tuple[str, str], int] = {}
_scratch: list[Any] = []


def worker_cache() -> Any:
    """This worker process's scratch cache: the static gate's verdicts and the GPU's floors, kept across
    resolves (both depend only on their keys). Never the project's cache."""
    from ..cache import Cache

    with _lock:
        if not _scratch:
            _scratch.append(Cache(Path(tempfile.gettempdir()) / "r1build-cluster" / f"cache-{os.getpid()}"))
        return _scratch[0]


def local_gpu_evaluator() -> WorkerEvaluator:
    """The evaluator of a GPU worker: the local GPU evaluator on the GPUs this process sees (one, under
    ``r1build worker``, which sets ``CUDA_VISIBLE_DEVICES`` per worker)."""
    from ..evaluate import GpuEvaluator, detect_gpus

    gpus = detect_gpus()
    if not gpus:
        raise EvaluationError(
            f"worker on {socket.gethostname()} advertises a GPU arch but sees no GPU (cupy "
            "missing, no driver, or CUDA_VISIBLE_DEVICES empty)"
        )
    return GpuEvaluator(worker_cache(), gpus=gpus)


def _evaluator(factory: Callable[[], WorkerEvaluator], session: str) -> tuple[tuple[str, str], WorkerEvaluator]:
    """The evaluator of one resolve (``session``) in this worker: made at its first job, so what a GPU evaluator
    remembers in memory (libraries, sanitizer verdicts) lasts one resolve, as on a machine that resolves locally;
    the evaluators of earlier resolves that have no job running are closed then. A factory arrives unpickled
    with every job, so it is known by its repr (a module-level function, or a partial of one)."""
    key = (repr(factory), session)
    with _lock:
        if key not in _evaluators:
            for old in [k for k in _evaluators if k[0] == key[0] and not _active.get(k)]:
                close = getattr(_evaluators.pop(old), "close", None)
                _active.pop(old, None)
                if close is not None:
                    close()
            _evaluators[key] = factory()
        _active[key] = _active.get(key, 0) + 1
        return key, _evaluators[key]


def _release(key: tuple[str, str]) -> None:
    with _lock:
        _active[key] = _active.get(key, 1) - 1


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"


def _log(message: dict[str, Any]) -> None:
    try:
        from distributed import get_worker

        get_worker().log_event(PROGRESS_TOPIC, message)
    except (ImportError, ValueError):
        pass


_facts: list[Any] = []
"""This worker process's :class:`~r1build.cluster.facts.ProcessFacts`, once computed."""


def refuse_other(expected: Any) -> None:
    """Refuse a task from a resolving machine whose r1build or nvcc is not this worker's (``expected``: its
    :class:`~r1build.cluster.facts.ProcessFacts`; None asks nothing). The resolve surveys the workers present when
    it starts; Dask gives work to one that joins later all the same, and such a worker must not judge with other
    code or another compiler."""
    if expected is None:
        return
    from .facts import mismatch, process_facts

    with _lock:
        if not _facts:
            _facts.append(process_facts(with_gpus=False))
        mine = _facts[0]
    problem = mismatch(expected, mine, _worker_name())
    if problem is not None:
        raise ClusterRefusedError(f"{problem} (it joined the cluster after this resolve checked its workers)")


def evaluate_job(
    job: Job,
    project: ProjectFiles,
    gate_keys: Sequence[str],
    known: dict[str, Result],
    tag: str,
    session: str,
    factory: Callable[[], WorkerEvaluator] = local_gpu_evaluator,
    *,
    expected: Any = None,
) -> JobOutcome:
    """Judge one GPU job on this worker (the Dask task of a cluster resolve). ``gate_keys`` name the gate
    verdicts of the job's candidates, ``known`` the ones the resolving machine already has (not compiled again),
    ``tag`` the job in progress events, ``session`` the resolve it belongs to; ``expected``: the resolving
    machine's facts, which this worker must share (:func:`refuse_other`)."""
    refuse_other(expected)
    _log({"job": tag, "state": "running", "name": _worker_name()})
    root = _materialize(project)
    here = replace(job, manifest=replace(job.manifest, path=root / project.manifest_name))
    held, evaluator = _evaluator(factory, session)
    try:
        archs = getattr(evaluator, "archs", None)
        if archs is not None and job.arch not in archs:  # a worker started with the wrong resources
            raise EvaluationError(
                f"worker {_worker_name()} on {socket.gethostname()} advertises {job.arch}, but "
                f"its GPUs run {', '.join(sorted(archs)) or 'nothing'}: fix its --resources"
            )
        cache = getattr(evaluator, "cache", None)
        if cache is not None:
            for key, verdict in known.items():
                cache.put_gate(key, verdict)
        results = evaluator.evaluate(here)
    finally:
        _release(held)
    host = socket.gethostname()
    results = [replace(r, host=host) if r.stage == "evaluate" else r for r in results]
    gates: dict[str, Result] = {}
    if cache is not None:
        for key in gate_keys:
            verdict = cache.get_gate(key)
            if verdict is not None and key not in known:
                gates[key] = verdict
    return JobOutcome(results, gates, host, _worker_name())


_gates: dict[float, Any] = {}


def compile_verdict(
    manifest: Manifest,
    spec: KernelSpec,
    arch: str,
    candidate: Candidate,
    timeout_s: float,
    headers: ProjectFiles | None = None,
    *,
    expected: Any = None,
) -> tuple[Result, bool]:
    """:func:`compile_verdicts` of one arch."""
    return compile_verdicts(manifest, spec, [arch], candidate, timeout_s, headers, expected=expected)[0]


def compile_verdicts(
    manifest: Manifest,
    spec: KernelSpec,
    archs: Sequence[str],
    candidate: Candidate,
    timeout_s: float,
    headers: ProjectFiles | None = None,
    *,
    expected: Any = None,
) -> list[tuple[Result, bool]]:
    """The static gate's compile of one candidate for all of ``archs`` on this worker (one nvcc, as the local gate
    compiles a variant): per arch in order, the verdict before limits and whether it may be cached (the resolving
    machine applies the limits and caches them). ``headers``: the project's include folders
    (:func:`header_files`), written here and compiled against, since the manifest's folder is the resolving
    machine's; ``expected``: the resolving machine's facts, which this worker must share (:func:`refuse_other`)."""
    from ..gate.static import StaticGate

    refuse_other(expected)

    if headers is not None and headers.files:
        manifest = replace(manifest, path=_materialize(headers) / headers.manifest_name)

    with _lock:
        gate = _gates.get(timeout_s)
        if gate is None:
            gate = _gates[timeout_s] = StaticGate(worker_cache(), jobs=1, timeout_s=timeout_s)
    return gate.compile_verdicts(manifest, spec, archs, candidate)


def worker_facts() -> Any:
    """This worker's :class:`~r1build.cluster.facts.ProcessFacts` (run on every worker at connect)."""
    from .facts import process_facts

    return process_facts()
