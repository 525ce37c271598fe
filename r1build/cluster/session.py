"""The resolving machine's side of a cluster: connect to the Dask scheduler, survey its workers (refusing mixed
versions), and hand GPU jobs to workers of their arch (:class:`ClusterEvaluator`).

Dask does the scheduling, placement, retries after a lost worker and transport: every GPU job is one task with the
resource of its arch (``sm_90: 1``), every gate compile one task with the ``compile`` resource. Nothing here queues
or retries by itself.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import uuid
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

from ..convert import asdict, field, record, replace
from ..errors import ClusterError, ClusterRefusedError, EvaluationError
from ..events import Note, Progress, emit
from ..judge import CHECKS_VERSION, Job
from ..keys import decision_key, digest_json
from ..manifest.addresses import cluster_address_problem
from ..manifest.archs import ARCHS, parse_arch
from ..manifest.model import Manifest
from ..records import Result, from_json
from ..toolchain.nvcc import toolchain
from . import loopback, plain_tcp, tls_problem
from .checks import outcome_problem
from .facts import COMPILE_RESOURCE, ProcessFacts, mismatch, process_facts
from .tasks import PROGRESS_TOPIC, JobOutcome, ProjectFiles, WorkerEvaluator, evaluate_job, project_files, worker_facts

if TYPE_CHECKING:
    from distributed import Client, Future

    from ..cache import Cache

__all__ = ["COMPILE_RESOURCE", "ClusterEvaluator", "Inventory", "WorkerInfo", "connect"]

OUTCOMES_NAMESPACE = "cluster-outcome"
"""Cache namespace of GPU job outcomes that arrived and were not yet turned into a decision (a re-run after a lost
scheduler takes them from there instead of measuring again)."""

log = logging.getLogger("r1build.cluster")

_STORE_WAIT_S = 30.0
"""How long closing a session waits for the callbacks storing arrived outcomes (each writes a few cache rows)."""


def _import_client() -> type[Client]:
    try:
        from distributed import Client
    except ImportError:
        raise ClusterRefusedError("evaluating on a cluster needs Dask: pip install 'r1build[cluster]'") from None
    return Client


def connect(address: str, *, timeout_s: float) -> Client:
    """A Dask client of the scheduler at ``address`` (TLS and credentials from Dask's own configuration);
    :class:`~r1build.errors.ClusterRefusedError` when it is malformed or unreachable within ``timeout_s``."""
    problem = cluster_address_problem(address)
    if problem is not None:
        raise ClusterRefusedError(f"cluster: {problem}")
    client_class = _import_client()
    if plain_tcp(address) and not loopback(address):  # allowed by --insecure-cluster alone
        emit(
            Note(
                "warning",
                f"the scheduler at {address} is reached over plain TCP (--insecure-cluster): anyone who can "
                "reach it can run code on its workers, and whoever answers there can run code on this machine; "
                "use tls:// with Dask's TLS settings (docs/guides/cluster.md)",
            )
        )
    problem = tls_problem(address, "client")
    if problem is not None:
        raise ClusterRefusedError(f"cluster: {problem}")
    _handshake(address, timeout_s)
    from distributed.versions import VersionMismatchWarning

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", VersionMismatchWarning)
            client = client_class(address, timeout=f"{timeout_s}s", set_as_default=False)
    except Exception as exc:  # it answered the handshake just before: gone since, or refusing this client
        raise ClusterRefusedError(
            f"the Dask scheduler at {address} answered, then failed to take this client ({_why(exc)}); "
            "check that it runs and that its distributed version is this machine's"
        ) from None
    for w in caught:
        if isinstance(w.message, VersionMismatchWarning):
            emit(Note("warning", _version_note(address, str(w.message))))
        else:  # not ours to judge: on as it came
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return client


def _version_note(address: str, text: str) -> str:
    """One line for Dask's VersionMismatchWarning (a table of packages by client, scheduler and workers), which
    Python's warnings printed as it is, with the file and line of Dask that raised it."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()]
    rows = [r for r in rows if len(r) > 1 and r[0] and not r[0].startswith("-")]
    parts = [
        f"{row[0]}: "
        + ", ".join(f"{who.lower()} {version}" for who, version in zip(rows[0][1:], row[1:], strict=False))
        for row in rows[1:]
    ]
    said = "; ".join(parts) if parts else " ".join(text.split())
    return (
        f"the Dask cluster at {address} mixes package versions ({said}): Dask may fail in ways it does not "
        "explain; install the same dask and distributed on every host"
    )


def _why(exc: BaseException) -> str:
    """What ``exc`` says, or its cause where it says nothing itself (Dask's FatalCommClosedError() over an
    SSLError), or its type name."""
    for e in (exc, exc.__cause__, exc.__context__):
        if e is not None and str(e):
            return str(e) if e is exc else f"{type(e).__name__}: {e}"
    return type(exc).__name__


def _handshake(address: str, timeout_s: float) -> None:
    """Open one connection to the scheduler at ``address`` and exchange Dask's handshake, the whole within about
    ``timeout_s``; :class:`~r1build.errors.ClusterRefusedError` naming what went wrong. A Dask client's own connect
    waits for the handshake without a limit (a port that accepts and never answers hung a resolve for good) and
    fails with whatever its parser meets where something else answers (an HTTP server's reply read as a frame
    length: a MemoryError traceback), then spends 20 s closing itself."""
    import asyncio

    from distributed.comm.core import connect as dask_connect
    from distributed.security import Security

    async def attempt() -> None:
        args = Security().get_connection_args("client")
        # Dask retries the connection itself until timeout_s; the margin leaves its own error to say so
        comm = await asyncio.wait_for(dask_connect(address, timeout=timeout_s, **args), timeout_s + 2)
        await comm.close()

    start = (
        f"start it (`dask scheduler`) and its workers (`r1build worker --scheduler {address}`), or resolve "
        "without --cluster"
    )
    try:
        asyncio.run(attempt())
    except TimeoutError:
        raise ClusterRefusedError(
            f"the scheduler at {address} took the connection but gave no Dask handshake within {timeout_s + 2:g} s: "
            "is it a Dask scheduler, and does it expect TLS where the address says tcp://? (or the reverse)"
        ) from None
    except OSError as exc:
        raise ClusterRefusedError(f"the Dask scheduler at {address} is unreachable ({_why(exc)}); {start}") from None
    except Exception as exc:  # something else answers there
        raise ClusterRefusedError(
            f"what answers at {address} is no Dask scheduler (its reply could not be read: "
            f"{type(exc).__name__}: {_why(exc)[:200]}); check the host and port, and tls:// versus tcp://"
        ) from None


@record(frozen=True, kw_only=True)
class WorkerInfo:
    """One worker of the cluster, as surveyed at connect."""

    address: str
    name: str
    host: str
    archs: list[str]
    """GPU archs it advertises (its resources named like archs)."""
    compile_slots: int
    """Its ``compile`` resource."""
    facts: ProcessFacts


@record
class Inventory:
    """The workers of a cluster and what they can do."""

    workers: list[WorkerInfo] = field(default_factory=list)
    here: ProcessFacts | None = None
    """The resolving machine's facts, which every task asks its worker to share (a worker that joins after the
    survey included)."""

    @property
    def archs(self) -> dict[str, list[WorkerInfo]]:
        """Arch → the workers with a GPU of it."""
        out: dict[str, list[WorkerInfo]] = {}
        for w in self.workers:
            for arch in w.archs:
                out.setdefault(arch, []).append(w)
        return dict(sorted(out.items()))

    @property
    def compile_slots(self) -> int:
        """Gate compiles the cluster runs at once."""
        return sum(w.compile_slots for w in self.workers)

    def describe(self) -> str:
        """One line: the GPU workers per arch and the compile slots."""
        gpus = (
            "; ".join(
                f"{arch}: " + ", ".join(f"{w.name} ({', '.join(w.facts.gpus) or 'GPU not listed'})" for w in workers)
                for arch, workers in self.archs.items()
            )
            or "no GPU workers"
        )
        return f"{len(self.workers)} workers; {gpus}; {self.compile_slots} compile slots"


def _arch_resource(name: str) -> str | None:
    if not name.startswith("sm_"):
        return None
    try:
        arch = parse_arch(name)
    except ValueError:
        return None
    return arch if arch in ARCHS else None


def survey(client: Client, address: str, *, timeout_s: float, here: ProcessFacts | None = None) -> Inventory:
    """Every worker's resources and facts; :class:`~r1build.errors.ClusterRefusedError` when there is none, or one
    runs another r1build or nvcc than this machine."""
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except (TimeoutError, OSError):
        raise ClusterRefusedError(
            f"the Dask scheduler at {address} has no workers (waited {timeout_s:g} s); start "
            f"them with `r1build worker --scheduler {address}`"
        ) from None
    info = client.scheduler_info(n_workers=-1)["workers"]
    facts: dict[str, Any] = client.run(worker_facts, on_error="return")
    here = here or process_facts(with_gpus=False)
    workers = []
    problems = []
    for addr, winfo in sorted(info.items(), key=lambda kv: str(kv[1].get("name"))):
        wfacts = facts.get(addr)
        name = str(winfo.get("name", addr))
        if isinstance(wfacts, BaseException):  # no r1build there, or one too different to answer
            problems.append(
                f"worker {name} could not say which r1build it runs ({type(wfacts).__name__}: "
                f"{wfacts}): install the same r1build on every host"
            )
            continue
        if not isinstance(wfacts, ProcessFacts):
            continue  # joined after the facts were asked for: not used in this run
        problem = mismatch(here, wfacts, name)
        if problem is not None:
            problems.append(problem)
        resources = winfo.get("resources") or {}
        archs = sorted({a for r in resources if (a := _arch_resource(r)) is not None})
        workers.append(
            WorkerInfo(
                address=addr,
                name=name,
                host=str(winfo.get("host", wfacts.host)),
                archs=archs,
                compile_slots=int(resources.get(COMPILE_RESOURCE, 0)),
                facts=wfacts,
            )
        )
    if problems:
        raise ClusterRefusedError(
            f"the cluster at {address} runs other versions than this machine "
            f"({here.describe()}):\n  " + "\n  ".join(problems)
        )
    return Inventory(workers, here)


def _joined(job: Job, results: list[Result]) -> list[Result]:
    """The results of a job's parts (:meth:`ClusterEvaluator._parts`) in the job's order, each timing's speedup
    over the baseline set from the baseline's time, as the local evaluator sets it within one job."""
    by_digest = {r.candidate: r for r in results}
    base = by_digest.get(job.baseline.digest) if job.baseline is not None else None
    base_us = base.timing.median_us if base is not None and base.ok and base.timing is not None else None
    out = []
    for candidate in job.candidates:
        result = by_digest[candidate.digest]
        if result.timing is not None:
            speedup = round(base_us / result.timing.median_us, 4) if base_us and result.timing.median_us else None
            result = replace(result, timing=replace(result.timing, speedup_vs_baseline=speedup))
        out.append(result)
    return out


@record
class _Submitted:
    tag: str
    job: Job
    arch: str
    future: Future[JobOutcome] | None = None
    outcome: JobOutcome | None = None
    gate_keys: list[str] = field(default_factory=list)
    """The gate keys of its candidates, in order: the only ones its outcome may bring verdicts for."""
    refused: str | None = None
    """Why what its worker sent back was not taken (:func:`~r1build.cluster.checks.outcome_problem`)."""
    consumed: bool = False
    """Handed to the resolver, whose decision now holds it: no longer stored as an outcome."""


class ClusterEvaluator:
    """Judges GPU jobs on the workers of a Dask cluster; implements :class:`~r1build.judge.Evaluator` for every
    arch in :attr:`archs`, with :meth:`prepare` (submit every job at once, so every GPU is busy) and :meth:`close`.

    Each job is one Dask task restricted to workers with the resource of its arch; the worker runs the local GPU
    evaluator (:func:`~r1build.cluster.tasks.evaluate_job`). Outcomes are stored in the cache as they arrive (and
    their gate verdicts), so a resolve that loses the scheduler, re-run, continues where it stopped.
    """

    factory: Callable[[], WorkerEvaluator] | None = None
    """What makes the evaluator inside each worker (pickled with every job); None: the local GPU evaluator
    (:func:`~r1build.cluster.tasks.local_gpu_evaluator`). The CPU tests put a stand-in for the GPU here."""

    def __init__(self, address: str, cache: Cache, *, timeout_s: float = 10.0) -> None:
        self.address = address
        self.cache = cache
        self._client = connect(address, timeout_s=timeout_s)
        try:
            self.inventory = survey(self._client, address, timeout_s=timeout_s)
        except ClusterRefusedError:
            self._client.close()
            raise
        except Exception as exc:  # the scheduler went away while answering
            self._client.close()
            raise ClusterRefusedError(
                f"the Dask scheduler at {address} failed while listing its workers: {type(exc).__name__}: {exc}"
            ) from None
        self.archs = frozenset(self.inventory.archs)
        """Archs some worker has a GPU of."""
        self._lock = threading.Lock()
        self._jobs: dict[str, _Submitted] = {}
        self._projects: dict[str, ProjectFiles] = {}
        self._running: set[str] = set()
        self._storing = 0
        """Callbacks of arrived futures still writing to the cache (on the Dask client's threads)."""
        self._stored = threading.Condition(self._lock)
        self._closed = False
        self._context = contextvars.copy_context()
        self._session = uuid.uuid4().hex
        self._client.subscribe_topic(PROGRESS_TOPIC, self._on_event)
        emit(Note("info", f"cluster {address}: {self.inventory.describe()}"))
        emit(Note("info", f"Dask dashboard: {self._client.dashboard_link}"))

    # -- public ------------------------------------------------------------------------------------------
    @property
    def client(self) -> Client:
        """The Dask client."""
        return self._client

    def worker_of(self, future: Future[Any]) -> str:
        """The name of the worker that holds ``future``'s result, as the scheduler says (not as the result does)."""
        try:
            where = self._client.who_has([future]).get(future.key) or []
        except Exception as exc:  # the scheduler is gone: name none
            log.debug("asking who ran %s: %s", future.key, exc)
            where = []
        names = {w.address: w.name for w in self.inventory.workers}
        return ", ".join(names.get(a, a) for a in where) or "unknown"

    def prepare(self, jobs: Sequence[Job]) -> None:
        """Submit every job of an arch some worker has, biggest first, so that all GPUs start at once."""
        for job in sorted(jobs, key=lambda j: -len(j.candidates)):
            if parse_arch(job.arch) in self.archs:
                for part in self._parts(job):
                    self._submit(part)

    def evaluate(self, job: Job) -> list[Result]:
        """One result per candidate of ``job``, judged on workers of its arch."""
        arch = parse_arch(job.arch)
        if arch not in self.archs:
            raise EvaluationError(f"no worker of the cluster at {self.address} has a GPU of {arch}")
        parts = self._parts(job)
        subs = [self._submit(part) for part in parts]
        results: list[Result] = []
        for sub in subs:
            outcome = sub.outcome if sub.outcome is not None else self._wait(sub)
            results += outcome.results
        with self._lock:  # from here on the resolver's decision holds them
            for sub in subs:
                sub.consumed = True
                self.cache.delete(f"json/{OUTCOMES_NAMESPACE}/{sub.tag}")
        return results if len(parts) == 1 else _joined(job, results)

    def close(self) -> None:
        """Cancel what is still queued, let the callbacks that are storing an arrived outcome finish, and
        disconnect. The cache is closed after this: a callback still writing to it on a Dask thread while its
        connection closed crashed the process (a segmentation fault in sqlite3)."""
        with self._lock:
            self._closed = True
            pending = [s.future for s in self._jobs.values() if s.future is not None and not s.future.done()]
        try:
            if pending:
                self._client.cancel(pending)
        except Exception as exc:  # the scheduler is gone already
            log.debug("cancelling on close: %s", exc)
        with self._lock:
            if not self._stored.wait_for(lambda: self._storing == 0, timeout=_STORE_WAIT_S):
                log.warning("closing the cluster session with %d outcome(s) still being stored", self._storing)
        self._client.close()

    # -- internals ---------------------------------------------------------------------------------------
    def _tag(self, job: Job, arch: str) -> str:
        return digest_json(
            {
                "key": decision_key(job.manifest, job.spec, arch),
                "candidates": [c.digest for c in job.candidates],
                "baseline": job.baseline.digest if job.baseline is not None else None,
                "checks": CHECKS_VERSION,
                "toolchain": toolchain().ident,
            }
        )

    def _parts(self, job: Job) -> list[Job]:
        """The job as it is, or, where several workers have its arch, split in as many parts of its candidates,
        so that a large job keeps every GPU of the arch busy. The baseline is judged in the first part (added to it
        where the job does not list it), and no part times a baseline of its own: the speedups over the baseline
        are set when the parts are joined (:func:`_joined`)."""
        workers = len(self.inventory.archs.get(parse_arch(job.arch), []))
        count = min(workers, len(job.candidates))
        if count < 2:
            return [job]
        candidates = list(job.candidates)
        if job.baseline is not None and all(c.digest != job.baseline.digest for c in candidates):
            candidates.insert(0, job.baseline)
        elif job.baseline is not None:  # the baseline first: its part runs first, biggest
            candidates.sort(key=lambda c: c.digest != job.baseline.digest)  # type: ignore[union-attr]
        size = -(-len(candidates) // count)
        return [
            replace(job, candidates=candidates[i : i + size], baseline=None) for i in range(0, len(candidates), size)
        ]

    def _project(self, manifest: Manifest) -> ProjectFiles:
        key = str(manifest.path)
        if key not in self._projects:
            self._projects[key] = project_files(manifest, manifest.kernels)
        return self._projects[key]

    def _submit(self, job: Job) -> _Submitted:
        from ..gate.static import gate_key

        arch = parse_arch(job.arch)
        tag = self._tag(job, arch)
        with self._lock:
            if tag in self._jobs:
                return self._jobs[tag]
            sub = self._jobs[tag] = _Submitted(tag, job, arch)
        tc = toolchain()
        keys = sub.gate_keys = [gate_key(job.manifest, job.spec, arch, c, tc) for c in job.candidates]
        stored = self.cache.get_json(OUTCOMES_NAMESPACE, tag)
        if stored is not None:
            try:
                sub.outcome = from_json(JobOutcome, stored)
            except ValueError:
                sub.outcome = None
            if sub.outcome is not None and outcome_problem(job, sub.outcome, keys, tc.ident) is None:
                emit(Note("info", "taking the results measured before the cluster was lost", job.spec.name, arch))
                self._progress(arch)
                return sub
            sub.outcome = None
        known = {k: v for k in keys if (v := self.cache.get_gate(k)) is not None}
        args: list[Any] = [job, self._project(job.manifest), keys, known, tag, self._session]
        if self.factory is not None:
            args.append(self.factory)
        try:
            sub.future = self._client.submit(
                evaluate_job,
                *args,
                expected=self.inventory.here,
                resources={arch: 1},
                pure=False,
                priority=len(job.candidates),
                key=f"r1build-{job.spec.name}-{arch}-{tag[:16]}",
            )
        except Exception as exc:  # the client is closed: the scheduler went away between two jobs
            with self._lock:
                del self._jobs[tag]
            raise ClusterError(
                f"{job.spec.name}/{arch}: lost the Dask scheduler at {self.address} ({exc}); what "
                "was measured before is cached, so running the same command again continues"
            ) from None
        sub.future.add_done_callback(lambda f, tag=tag: self._arrived(tag, f))
        self._progress(arch)
        return sub

    def _arrived(self, tag: str, future: Future[JobOutcome]) -> None:
        """A job's future finished (on a thread of the Dask client): store its outcome and gate verdicts now, so a
        scheduler lost later loses nothing measured; nothing once the session is closing (the cache closes
        next)."""
        with self._lock:
            if self._closed:
                return
            self._storing += 1
        try:
            self._store_arrived(tag, future)
        finally:
            with self._lock:
                self._storing -= 1
                self._stored.notify_all()

    def _store_arrived(self, tag: str, future: Future[JobOutcome]) -> None:
        sub = self._jobs[tag]
        if future.status == "finished":
            try:
                outcome = future.result()
                problem = outcome_problem(sub.job, outcome, sub.gate_keys, toolchain().ident)
                if problem is not None:  # nothing of it is kept, and _wait refuses it
                    refused = f"{problem} (from worker {self.worker_of(future)})"
                    with self._lock:
                        sub.refused = refused
                else:
                    for key, verdict in outcome.gates.items():
                        if self.cache.get_gate(key) is None:  # a verdict this machine has stays
                            self.cache.put_gate(key, verdict)
                    with self._lock:
                        if not sub.consumed:
                            self.cache.put_json(OUTCOMES_NAMESPACE, tag, asdict(outcome))
                        sub.outcome = outcome
            except Exception as exc:  # the resolver gets it from the future all the same
                log.debug("storing the outcome of %s: %s", tag, exc)
        with self._lock:
            self._running.discard(tag)
        self._progress(sub.arch)

    def _wait(self, sub: _Submitted) -> JobOutcome:
        assert sub.future is not None
        name = f"{sub.job.spec.name}/{sub.arch}"
        try:
            outcome = sub.future.result()
        except CancelledError:
            raise ClusterError(
                f"{name}: lost the Dask scheduler at {self.address} during the run; what was "
                "measured before is cached, so running the same command again continues"
            ) from None
        except EvaluationError:
            raise
        except Exception as exc:
            if type(exc).__name__ == "KilledWorker":
                raise ClusterError(
                    f"{name}: the job was lost with the workers that died running it ({exc}); what was "
                    "measured before is cached, so running the same command again continues"
                ) from None
            raise ClusterError(f"{name}: the job failed on the cluster: {type(exc).__name__}: {exc}") from exc
        with self._lock:
            refused = sub.refused
        if refused is None:
            problem = outcome_problem(sub.job, outcome, sub.gate_keys, toolchain().ident)
            refused = None if problem is None else f"{problem} (from worker {self.worker_of(sub.future)})"
        if refused is not None:
            raise ClusterError(
                f"{name}: refused what the cluster at {self.address} sent back: {refused}; nothing of it was kept. "
                "Check that every host runs the same r1build, or stop that worker"
            )
        self._progress(sub.arch)
        return outcome

    def _on_event(self, event: Any) -> None:
        _, message = event if isinstance(event, tuple) else (None, event)
        tag = message.get("job") if isinstance(message, dict) else None
        with self._lock:
            sub = self._jobs.get(tag) if isinstance(tag, str) else None
            if sub is None:
                return  # another resolve's job
            if sub.outcome is None:
                self._running.add(sub.tag)
        self._progress(sub.arch)

    def _progress(self, arch: str) -> None:
        with self._lock:
            subs = [s for s in self._jobs.values() if s.arch == arch]
            finished = {s.tag for s in subs if s.outcome is not None or (s.future is not None and s.future.done())}
            running = sum(s.tag in self._running and s.tag not in finished for s in subs)
        event = Progress(
            f"cluster {arch}",
            len(finished),
            len(subs),
            {
                "queued": len(subs) - len(finished) - running,
                "running": running,
                "workers": len(self.inventory.archs.get(arch, [])),
            },
        )
        self._context.copy().run(emit, event)
