"""The inference-time scaling controller: parallel samples, judged, fed back, within a budget.

By default the search is continuous (:mod:`.continuous`: a request slot is refilled the moment its answer is in,
answers are judged as they arrive, stops act at once); ``generation.search = "rounds"`` runs it in rounds as
described below.

A search for one kernel on one arch:

1. judges the seeds (baseline, hand-written candidates) so the first feedback knows the bar;
2. runs rounds. Each round sends up to ``budget.samples`` requests at once, at most
   ``generation.max_concurrency`` in flight. Diversity comes from the temperature schedule where the provider
   honours temperature, and from named optimization directions where it does not (or where the manifest names
   some). Round 0 asks for the task; later rounds continue a conversation from a parent kernel (its answer's
   content is sent back, its reasoning never) with a feedback turn: the parent's result, the best kernels so
   far with their time and share of the floor, the other failures with their compiler errors, rejections,
   mismatch summaries or sanitizer findings. Parents alternate between the best kernels and the failures to
   repair. Answers are extracted and judged as they arrive, in batches, while other requests still stream;
3. stops at the first of: the round budget; the candidate budget (samples started); the token budget and the
   money budget (see :mod:`.budget`: each request holds its ``max_tokens`` before it is sent, so requests in
   flight always finish and their answers are kept); the wall-clock budget (every request's deadline is the
   search's; a pause the server asks for that would outlast it stops the search at once, and an answer it cuts
   off is kept when it already holds complete code); the circuit breaker
   (``max-consecutive-failures`` failed requests in a row); the target share of the floor; ``patience`` timed
   rounds without a faster kernel (rounds where nothing could be timed, as without a GPU, do not count). Without
   timings (the static gate alone cannot rank candidates) the search ends after the first round in which a
   generated candidate passed.

A search in which no request ever got an answer raises :class:`~r1build.errors.GenerationError` naming the
cause (``no answer from URL: 20 requests, all HTTP 503 Service Unavailable``); otherwise the outcome carries the
stop reason and its cause in words.

Identical candidates (same normalized source and tunable values) are judged once. Every sample's transcript is
stored in the cache, and the search links them under its decision key however it ends (budget, fatal error,
Ctrl-C), so ``r1build replay`` finds them. The controller knows nothing of how candidates are judged: it calls an
:class:`~r1build.judge.Evaluator`.

The pieces, in the order a reader meets them: :class:`~.pool.Pool` (:mod:`.pool`) holds the distinct candidates
a search knows, in preference order (:class:`~.pool.Order`), with their results, and ranks them;
:func:`~.pool.read_answer` and :meth:`~.pool.Pool.admit_answer` are the one path from an answer to candidates,
taken by the live search and by :func:`~.stored_search.replay_search` (:mod:`.stored_search`) alike;
:class:`~.planning.Planner` (:mod:`.planning`) plans what each sample of a round asks; :class:`_Search`, here,
runs the rounds (samples, judging, stops) around a pool. What a search produced and spent is
:mod:`.outcome`'s; budgets (stop reasons, the token and money ledger) are :mod:`.budget`'s.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ..convert import record, replace
from ..errors import CandidateProfileError, EndpointSilentError, R1BuildError
from ..events import Note, NoteLevel, Progress, Stage, emit
from ..keys import decision_key
from .budget import Ledger, Reservation, StopReason, estimate_tokens
from .client import ChatClient
from .continuous import MIN_GAIN, Continuous
from .exchange import Attempt, Exchange, Meter
from .extract import Extraction, complete_part, strip_think
from .job import SearchJob
from .judging import JudgeDesk
from .links import TranscriptLinks
from .outcome import SampleLoss, SearchOutcome, Usage
from .pacing import Pacer, describe_faults
from .planning import Plan, Planner
from .pool import Known, Order, Pool, outcome_of, read_answer
from .providers import Endpoint
from .resumption import resume_cut_short
from .stored_search import replay_search
from .transcripts import store_transcript, transcript_payload

__all__ = ["MIN_GAIN", "Order", "SampleLoss", "SearchOutcome", "Usage", "replay_search", "run_search"]

FINALISTS = 2
"""With a profiler, the fastest candidates of each round (and of the seeds) profiled under Nsight Compute."""


@record
class _SampleSpend:
    """One sample's spend against the search's ledger (what the client asks before and tells after each
    attempt)."""

    search: _Search
    prompt_tokens: int
    """The prompt's estimated tokens."""
    held: Reservation | None = None

    async def reserve(self) -> int | StopReason:
        search = self.search
        if search.stop_reason is not None and search.on_stop is not None:
            return search.stop_reason  # a continuous search that stopped sends nothing more, retries included
        reservation = await self.search.ledger.acquire(self.prompt_tokens)
        if isinstance(reservation, str):
            return reservation
        self.held = reservation
        return reservation.max_tokens

    def charge(self, *, prompt_tokens: int, completion_tokens: int) -> None:
        self.search.ledger.settle(self.held, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        self.held = None
        self.search.sync_usage()


def _now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class _Search:
    """One live search for one kernel on one arch: rounds of samples around a :class:`Pool`.

    State, by concern: the request side (``client``, ``pacer``, ``ledger``, ``meters`` of the attempts in flight,
    ``tasks`` of the samples in flight, ``deadline``); the round in progress (``round``, ``round_notes`` fed back
    to the next round, ``desk``: the candidates waiting to be judged and the judge's counts,
    ``finished_samples``); the stop (``stop_reason``, ``cause``, ``fatal``); and what it spent and produced
    (``usage``, ``faults`` by label, ``links``: its transcripts by round and sample, ``pool``).
    """

    def __init__(self, job: SearchJob, endpoint: Endpoint) -> None:
        self.job = job
        """What the search is for, who judges and where it is kept."""
        manifest, spec, arch = job.manifest, job.spec, job.arch
        self.manifest = manifest
        self.profiler = job.profiler
        """The profiler of the finalists, until it fails (then none for the rest of the search)."""
        self.spec = spec
        self.arch = arch
        self.cache = job.cache
        self.endpoint = endpoint
        self.generation = manifest.settings.generation
        self.budget = spec.budget
        self.usage = Usage()
        self.pool = Pool(
            manifest, spec, arch, evaluator=job.evaluator, usage=self.usage, seeds=job.seeds, perf_model=job.perf_model
        )
        self.links = TranscriptLinks(job.cache, decision_key(manifest, spec, arch), kernel=spec.name, arch=arch)
        self.deadline = time.monotonic() + self.budget.wall_time_s
        self.stop_reason: StopReason | None = None
        self.cause = ""
        self.fatal: R1BuildError | None = None
        self.meters: set[Meter] = set()
        self.ledger = Ledger(budget=self.budget, prices=self.generation.prices, max_tokens=self.generation.max_tokens)
        self.pacer = Pacer(
            self.generation.retry_backoff_s, self.generation.max_consecutive_failures, self.deadline, random.Random()
        )
        self.faults: Counter[str] = Counter()
        self.model_warned = False
        """Whether the search warned that another model answered."""
        self.last_fault = ""
        """What the last failed attempt said (redacted), for the error of a search that got no answer."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.desk = JudgeDesk(self.pool, spec.name, self.progress)
        self.round_notes: Counter[SampleLoss] = Counter()
        self.finished_samples = 0
        self.round = 0
        self.client: ChatClient | None = None
        self.early: dict[tuple[int, int], str] = {}
        """The source gated from a sample's answer while it still streamed, by (round, sample)."""
        self.on_stop: Callable[[StopReason], int] | None = None
        """Called once when the search stops (a continuous search cancels what can no longer matter); returns how
        many requests on the wire it cancelled."""
        self.planner = Planner(
            manifest,
            spec,
            arch,
            generation=self.generation,
            honours_temperature=endpoint.profile.honours_temperature,
            samples_per_round=self.budget.samples,
        )

    # -- bookkeeping -------------------------------------------------------------------------------------
    def note(self, level: NoteLevel, message: str) -> None:
        emit(Note(level, message, kernel=self.spec.name, arch=self.arch))

    def progress(self) -> None:
        total = min(self.budget.candidates, self.budget.rounds * self.budget.samples)
        emit(
            Progress(
                f"generate {self.spec.name}/{self.arch}",
                self.finished_samples,
                total,
                {
                    "round": f"{self.round + 1}/{self.budget.rounds}",
                    "in_flight": sum(m.on_the_wire for m in self.meters),
                    "candidates": len(self.pool.generated),
                    **self.desk.fields(),
                    "passed": len(self.pool.generated_passed),
                    "tokens": self.usage.completion_tokens + self.live_tokens(),
                    "spend": f"${self.usage.cost_usd:.4f}",
                },
            )
        )

    def live_tokens(self) -> int:
        """Estimated tokens of the attempts in flight (progress only: accounting waits for their usage)."""
        return sum(m.tokens for m in self.meters)

    def sync_usage(self) -> None:
        """Tokens and money of :attr:`usage` from the ledger."""
        self.usage.prompt_tokens = self.ledger.prompt_tokens
        self.usage.completion_tokens = self.ledger.completion_tokens
        self.usage.cost_usd = self.ledger.usd

    def exhausted(self) -> StopReason | None:
        """The budget that no longer allows a new sample, if any."""
        if self.pacer.stopped is not None:
            return self.pacer.stopped
        if self.usage.samples >= self.budget.candidates:
            return "candidates"
        if time.monotonic() >= self.deadline:
            return "wall_time"
        return self.ledger.spent()

    def stop(self, reason: StopReason, cause: str = "") -> None:
        """End the search: no new requests. A fatal error also cancels the requests in flight; any other stop
        lets them finish (their tokens are held from the budget, their answers are kept)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.cause = cause or (self.pacer.cause if reason == self.pacer.stopped else "")
            cut = self.on_stop(reason) if self.on_stop is not None else 0
            sent = sum(m.on_the_wire for m in self.meters) - cut
            said = reason.replace("_", " ")
            if cut and reason != "fatal":
                self.note("info", f"stopping ({said}): cancelled {cut} request(s) in flight that can no longer matter")
            if sent and reason != "fatal":
                self.note("info", f"stopping ({said}): letting {sent} request(s) in flight finish")
        if reason != "fatal":
            return
        current = asyncio.current_task()
        for task in list(self.tasks):
            if task is not current:
                task.cancel()

    def describe_stop(self, reason: StopReason) -> str:
        """The stop in words."""
        if self.cause:
            return self.cause
        b, u = self.budget, self.usage
        if reason == "rounds":
            return f"all {b.rounds} round(s) ran"
        if reason == "candidates":
            return f"the candidate budget is spent: {u.samples} of {b.candidates} samples"
        if reason == "tokens":
            return f"the token budget is spent: {u.completion_tokens:,} of {b.tokens or 0:,} completion tokens"
        if reason == "money":
            if self.ledger.usd == 0 and not self.ledger.held:
                return self.ledger.describe_unaffordable()
            return f"the money budget is spent: ${u.cost_usd:.4f} of ${b.money_usd or 0:g}"
        if reason == "wall_time":
            return f"the wall-time budget ({b.wall_time_s:g} s) is spent"
        if reason == "target":
            return f"a kernel reached the target share of the floor ({b.target_share:.0%})"
        if reason == "patience":
            return f"{b.patience} timed round(s) in a row brought no faster kernel"
        if reason == "passed_gate":
            return "a generated candidate passed the gate, and without timings nothing can rank more"
        if reason == "endpoint_failing":
            return self.pacer.cause
        return reason.replace("_", " ")

    # -- judging ---------------------------------------------------------------------------------------
    async def await_all(self, tasks: Sequence[asyncio.Task[None]], judging: asyncio.Task[None]) -> None:
        """Wait for ``tasks`` (a round's samples, or the continuous search's request slots), tell the judge queue
        that nothing more comes, then wait for ``judging``; the first error of a task is raised, ``judging``
        cancelled."""
        try:
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self.tasks.difference_update(tasks)
            self.desk.close()
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                judging.cancel()
                raise outcome
        await judging

    # -- one sample --------------------------------------------------------------------------------------
    def report(self, round_no: int, sample: int, attempt: Attempt, wait: float | None) -> None:
        if attempt.outcome != "ok":
            self.usage.count(attempt.outcome)
            self.faults[attempt.label] += 1
            self.last_fault = attempt.message
        what = f"round {round_no} sample {sample}: {attempt.message}"
        if wait is None:
            self.note("warning", f"{what}; giving up on this sample")
        else:
            self.note("warning", f"{what}; retrying in {wait:.1f} s")

    async def sample(
        self, round_no: int, sample: int, plan: Plan, slots: asyncio.Semaphore, meter: Meter | None = None
    ) -> None:
        async with slots:
            reason = self.stop_reason or self.exhausted()
            if reason is not None:
                self.stop(reason)
                return
            assert self.client is not None
            exchange = Exchange(
                plan.messages, self.client.params(temperature=plan.temperature, max_tokens=self.generation.max_tokens)
            )
            exchange.holds_code = lambda content: complete_part(content, self.spec.name) is not None
            spend = _SampleSpend(self, estimate_tokens(sum(len(m["content"]) for m in plan.messages)))
            meter = meter if meter is not None else Meter()
            self.usage.samples += 1
            self.meters.add(meter)
            started, t0 = _now_iso(), time.monotonic()
            try:
                await self.client.complete(
                    exchange,
                    deadline=self.deadline,
                    meter=meter,
                    spend=spend,
                    report=lambda a, w: self.report(round_no, sample, a, w),
                )
            finally:
                self.meters.discard(meter)
                if spend.held is not None:  # cancelled before the request was sent
                    self.ledger.release(spend.held)
                if not exchange.attempts:  # nothing was sent: a budget or a stop came first
                    self.usage.samples -= 1
                    extraction = None
                else:
                    extraction = self.settle(round_no, sample, exchange)
                    digest = self._keep_transcript(
                        (round_no, sample), plan, exchange, extraction, started, time.monotonic() - t0
                    )
            if exchange.fatal is not None:
                self.fatal = exchange.fatal
                self.stop("fatal")
                return
            if extraction is not None:
                self.enqueue(round_no, sample, plan, exchange, extraction, digest)
            self.progress()
            reason = exchange.budget or self.exhausted()
            if reason is not None and reason != "candidates":
                self.stop(reason)

    def _keep_transcript(
        self,
        where: tuple[int, int],
        plan: Plan,
        exchange: Exchange,
        extraction: Extraction | None,
        started: str,
        elapsed_s: float,
    ) -> str:
        """Store the transcript of one finished sample (secrets redacted) and link it to the search; its digest."""
        round_no, sample = where
        digest = store_transcript(
            self.cache,
            transcript_payload(
                kernel=self.spec.name,
                arch=self.arch,
                round=round_no,
                sample=sample,
                provider=self.endpoint.profile.name,
                endpoint=self.endpoint.display_url,
                model=self.endpoint.model,
                direction=plan.direction,
                temperature=plan.temperature,
                parent=plan.parent,
                exchange=exchange,
                extraction=self.extraction_doc(extraction) if extraction else None,
                started=started,
                elapsed_s=elapsed_s,
            ),
            secrets=self.endpoint.secrets,
        )
        self.pool.attach_transcript(round_no, sample, digest)
        self.finished_samples += 1
        self.links.add(where, digest, stored_now=True)  # a process killed now leaves them to resume from
        return digest

    def settle(self, round_no: int, sample: int, exchange: Exchange) -> Extraction | None:
        """Account a finished sample (its tokens and money are already in the ledger) and extract its candidate;
        returns the extraction, if any."""
        usage = self.usage
        usage.requests += len(exchange.attempts)
        usage.retries += max(0, len(exchange.attempts) - 1)
        usage.estimated = usage.estimated or exchange.estimated
        self.sync_usage()
        self.keep_partial(round_no, sample, exchange)
        completion = exchange.completion
        if completion is not None:
            usage.answers += 1
            usage.reasoning_tokens += completion.reasoning_tokens
            self.check_model(completion.model)
        where = f"round {round_no} sample {sample}"
        if completion is None:
            kind = exchange.failure or "gave_up"
            if kind != "fatal":
                usage.count("cancelled" if kind == "cancelled" else "gave_up")
            return None
        if completion.finish_reason == "stop":
            self.ledger.observe(exchange.attempts[-1].completion_tokens)
        extraction, loss = read_answer(completion.finish_reason, completion.content, self.spec.name, usage)
        if loss is not None and loss not in ("content_filter", "interrupted"):  # (the server's doing, not the model's)
            self.round_notes[loss] += 1  # fed back to the next round (:func:`~.planning.answer_notes`)
        if loss == "truncated":
            self.note(
                "warning",
                f"{where}: the answer was cut off at max_tokens ({exchange.params['max_tokens']}); "
                + ("its complete code is kept" if extraction is not None else "not a candidate"),
            )
        elif loss == "interrupted":
            self.note(
                "warning",
                f"{where}: the server ended the answer early (finish_reason {completion.finish_reason}); "
                + ("its complete code is kept" if extraction is not None else "not a candidate"),
            )
        elif loss == "content_filter":
            self.note("warning", f"{where}: the answer was stopped by the provider's content filter")
        elif loss == "no_code" and extraction is not None:
            said = completion.said_instead()  # a refusal or tool calls: what the model said, not "(empty)"
            self.note("warning", f"{where}: " + (said or f"no CUDA code block in the answer ({extraction.reason})"))
        return extraction

    def check_model(self, answered: str | None) -> None:
        """Warn, once a search, when the server says another model answered than the one asked for (a proxy or a
        gateway that routes elsewhere: not R1's answers, maybe not R1's price); a version suffix is the same."""
        asked = self.endpoint.model
        if not answered or self.model_warned:
            return
        a, b = answered.lower(), asked.lower()
        if a.startswith(b) or b.startswith(a) or a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]:
            return
        self.model_warned = True
        self.note(
            "warning",
            f"{self.endpoint.display_url} answered as model {answered!r}, not {asked!r} that was asked for; the "
            "transcripts record which model answered",
        )

    def keep_partial(self, round_no: int, sample: int, exchange: Exchange) -> None:
        """An answer paid for but cut off (the wall-time deadline, a stream cut on the last retry) becomes the
        sample's answer, ``finish_reason: partial``, when it holds complete code: the part up to its last closing
        fence, so a replay extracts the same candidate."""
        partial = exchange.partial
        if exchange.completion is not None or partial is None or exchange.failure in ("cancelled", "fatal", None):
            return
        kept = complete_part(partial.content, self.spec.name)
        if kept is None:
            return
        exchange.completion = replace(partial, content=kept, finish_reason="partial")
        self.usage.count("kept_partial")
        self.note(
            "info",
            f"round {round_no} sample {sample}: the answer was cut off ({exchange.failure}) after complete code: kept",
        )

    def extraction_doc(self, extraction: Extraction) -> dict[str, Any]:
        return {"reason": extraction.reason, "blocks": extraction.blocks}

    def enqueue(
        self, round_no: int, sample: int, plan: Plan, exchange: Exchange, extraction: Extraction, transcript: str
    ) -> None:
        """Queue for judging the candidates of a sample's answer that the pool did not know."""
        if extraction.source is None or exchange.completion is None:
            return
        if self.early.get((round_no, sample)) == extraction.source:
            return  # gated while the answer streamed
        self.admit(round_no, sample, plan, extraction.source, exchange.completion.content, transcript)

    def admit(self, round_no: int, sample: int, plan: Plan, source: str, content: str, transcript: str) -> None:
        """Admit the code ``source`` of the answer ``content`` of (``round_no``, ``sample``) to the pool and queue
        the candidates it did not know for the judge."""
        for candidate in self.pool.admit_answer(
            source,
            model=self.endpoint.model,
            round_no=round_no,
            sample=sample,
            transcript=transcript,
            messages=plan.messages[:1],
            answer=strip_think(content).strip(),
            parent=plan.parent,
        ):
            self.desk.put(candidate)

    # -- an earlier search cut short ------------------------------------------------------------------------
    def resume(self) -> dict[int, set[int]]:
        """Take back what a search of this decision key cut short received (:mod:`.resumption`); by round, the
        samples not to ask again."""
        resumed = resume_cut_short(
            self.cache, self.links, usage=self.usage, ledger=self.ledger, pool=self.pool, model=self.endpoint.model
        )
        if resumed is None:
            return {}
        self.sync_usage()
        u = self.usage
        self.note(
            "info",
            f"continuing the search cut short ({resumed.stop_reason}): {u.answers} answer(s) of {u.samples} "
            f"sample(s) already received are kept, not asked again ({u.completion_tokens:,} completion tokens, "
            f"${u.cost_usd:.4f} of the budget)",
        )
        return resumed.done

    # -- rounds ------------------------------------------------------------------------------------------
    async def run_round(
        self, round_no: int, count: int, slots: asyncio.Semaphore, skip: frozenset[int] = frozenset()
    ) -> None:
        self.round_notes.clear()
        plans = self.planner.plan(round_no, count, self.pool, self.round_notes)
        judging = asyncio.create_task(self.desk.loop())
        tasks = [
            asyncio.create_task(self.sample(round_no, s, plan, slots)) for s, plan in enumerate(plans) if s not in skip
        ]
        self.tasks.update(tasks)
        await self.await_all(tasks, judging)
        await self.profile_finalists([k for k in self.pool.generated_known() if k.candidate.origin.round == round_no])

    async def profile_finalists(self, known: Sequence[Known]) -> None:
        """Profile the fastest timed of ``known`` under Nsight Compute (:data:`FINALISTS` of them) and keep the
        findings with their results, so the next round's feedback says what bounds them. A profile that fails
        turns profiling off for the rest of the search, with a note, unless the candidate's own run failed
        (:class:`~r1build.errors.CandidateProfileError`: that finalist alone goes unprofiled)."""
        timed = sorted(
            (
                k
                for k in known
                if k.result is not None and k.result.ok and k.result.timing is not None and k.result.profile is None
            ),
            key=lambda k: k.result.timing.median_us,  # type: ignore[union-attr]
        )
        for finalist in timed[:FINALISTS]:
            if self.profiler is None:
                return
            try:
                profile = await asyncio.to_thread(
                    self.profiler.profile, self.manifest, self.spec, self.arch, finalist.candidate
                )
            except CandidateProfileError as exc:  # the candidate's own doing: the others are still profiled
                self.note("warning", f"profiling {finalist.label} under Nsight Compute failed, skipped: {exc}")
                continue
            except R1BuildError as exc:
                self.note(
                    "warning",
                    f"profiling {finalist.label} under Nsight Compute failed, profiling is off for this search: {exc}",
                )
                self.profiler = None
                return
            assert finalist.result is not None
            finalist.result = replace(finalist.result, profile=profile)

    async def run(self) -> SearchOutcome:
        """The search; its transcripts are linked under the decision key however it ends."""
        try:
            outcome = await self._run()
        except R1BuildError as exc:
            self.links.end("fatal", str(exc))
            raise
        except (asyncio.CancelledError, KeyboardInterrupt):
            self.links.end("interrupted", "interrupted before the search ended")
            raise
        self.links.end(outcome.stop_reason, outcome.cause)
        return outcome

    async def _run(self) -> SearchOutcome:
        pool = self.pool
        done = self.resume()  # what a search of this key cut short already received
        # the seeds (and the answers resumed): the first feedback knows the bar
        await pool.judge([k.candidate for k in pool.in_order()])
        await self.profile_finalists(list(pool.known.values()))
        async with ChatClient(self.endpoint, self.generation, pacer=self.pacer) as client:
            self.client = client
            if self.generation.search == "continuous":
                rounds_done = await Continuous(self, done).run()
            else:
                rounds_done = await self.run_rounds(done)
        if self.fatal is not None:
            raise self.fatal
        if self.usage.answers == 0 and self.usage.requests > 0 and not pool.generated:
            raise EndpointSilentError(self.no_answer())
        reason = self.stop_reason or "rounds"
        return outcome_of(pool, self.usage, self.links.digests(), reason, rounds_done, self.describe_stop(reason))

    async def run_rounds(self, done: dict[int, set[int]]) -> int:
        """The search in rounds (``generation.search = "rounds"``); returns the rounds run."""
        pool = self.pool
        slots = asyncio.Semaphore(self.generation.max_concurrency)
        stale = 0
        first = max(done, default=0)  # the round that was cut short goes on where it stopped
        rounds_done = first
        for round_no in range(first, self.budget.rounds):
            self.round = round_no
            reason = "target" if pool.target_reached(self.budget.target_share) else self.exhausted()
            if reason is not None:
                self.stop(reason)
                break
            before = pool.best_time()
            skip = frozenset(done.get(round_no, ()))
            count = min(self.budget.samples, self.budget.candidates - self.usage.samples + len(skip))
            await self.run_round(round_no, count, slots, skip)
            if self.fatal is not None:
                raise self.fatal
            rounds_done += 1
            if self.stop_reason is not None:
                break
            self.progress()
            after = pool.best_time()
            if not pool.timed():
                # nothing could be timed (no GPU): patience does not count this round
                if pool.generated_passed:
                    self.stop("passed_gate")
                    break
                continue
            if after is not None and (before is None or after < before * (1.0 - MIN_GAIN)):
                stale = 0
            else:
                stale += 1
            if stale >= self.budget.patience:
                self.stop("patience")
                break
        else:
            self.stop("target" if pool.target_reached(self.budget.target_share) else "rounds")
        return rounds_done

    def no_answer(self) -> str:
        """Why no request got an answer, in words."""
        url = self.endpoint.display_url
        where = f"{self.spec.name}/{self.arch}"
        last = self.last_fault if len(self.last_fault) <= 300 else self.last_fault[:300] + "..."
        said = f"; last error: {last}" if last else ""
        if set(self.faults) == {"connection failed"}:
            return (
                f"{where}: no request reached {url}: every attempt failed to connect ({self.usage.requests} "
                f"requests; is the server running, is the URL right?){said}"
            )
        text = f"{where}: no answer from {url}: {describe_faults(self.faults)}"
        if self.stop_reason == "endpoint_failing":
            return f"{text} (stopped after {self.generation.max_consecutive_failures} failed requests in a row){said}"
        if self.stop_reason in ("wall_time", "tokens", "money"):
            text += f"; then {self.describe_stop(self.stop_reason)}"
        return text + said


async def run_search(job: SearchJob, endpoint: Endpoint) -> SearchOutcome:
    """Search for candidates of ``job.spec`` on ``job.arch`` through ``endpoint`` (see the module docstring);
    with ``job.profiler``, each round's finalists are profiled under Nsight Compute and the findings go into the
    next round's feedback; with ``job.perf_model``, generated candidates are judged in predicted order (and some
    skipped, in its skip mode)."""
    spec, arch = job.spec, job.arch
    search = _Search(job, endpoint)
    outcome = await search.run()
    u = outcome.usage
    generated = outcome.generated()
    emit(
        Stage(
            "generate",
            spec.name,
            arch,
            done=True,
            detail=(
                f"{len(generated)} generated, {sum(1 for _, r in generated if r.ok)} passed, "
                f"in {outcome.rounds} round(s); "
                f"{u.samples} samples, {u.requests} requests, {u.completion_tokens} tokens, ${u.cost_usd:.4f}; "
                f"stopped: {outcome.cause}"
            ),
        )
    )
    return outcome
