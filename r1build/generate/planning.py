"""The plan of a round: what each sample of it asks the model. Round 0 asks for the task; later rounds continue a
conversation from a parent (the best kernels so far and the failures to repair, alternating) with a feedback turn.
Diversity comes from the temperature schedule where the provider honours temperature, and from named
optimization directions where it does not (or where the manifest names some)."""

from __future__ import annotations

import itertools
from collections import Counter

from ..convert import record
from ..manifest.model import Generation, KernelSpec, Manifest
from .outcome import SampleLoss
from .pool import Known, Pool
from .prompts import DEFAULT_DIRECTIONS, Judged, feedback_prompt, task_prompt

__all__ = ["Plan", "Planner", "answer_notes"]


@record(frozen=True)
class Plan:
    """What one sample asks."""

    messages: list[dict[str, str]]
    """The conversation sent (the task, or the parent's task, its answer and the feedback)."""
    temperature: float | None
    """The sample's temperature; None where the provider ignores temperature."""
    direction: str | None
    """The optimization direction named in the prompt, if any."""
    parent: str | None
    """The digest of the candidate the feedback builds on; None for a fresh task."""


def answer_notes(losses: Counter[SampleLoss]) -> list[str]:
    """What the last round's answers lacked, said in the next round's feedback."""
    notes = []
    if losses["no_code"]:
        notes.append(f"{losses['no_code']} answer(s) had no ```cuda block with the kernel.")
    if losses["truncated"]:
        notes.append(
            f"{losses['truncated']} answer(s) were cut off at the token limit before the final code: "
            "keep the reasoning focused and the final answer complete."
        )
    return notes


def _judged(known: Known) -> Judged:
    assert known.result is not None
    return Judged(known.label, known.candidate.source, known.result, dict(known.candidate.defines))


@record(frozen=True)
class Planner:
    """Plans the rounds of one search for one kernel on one arch."""

    manifest: Manifest
    spec: KernelSpec
    arch: str
    generation: Generation
    honours_temperature: bool
    """Whether the provider honours temperature (else diversity comes from directions alone)."""
    samples_per_round: int

    def directions(self) -> list[str]:
        """The optimization directions that samples take in turn (none where temperature gives diversity)."""
        if self.generation.directions:
            return list(self.generation.directions)
        if not self.honours_temperature:
            return list(DEFAULT_DIRECTIONS)
        return []

    def plan(self, round_no: int, count: int, pool: Pool, losses: Counter[SampleLoss]) -> list[Plan]:
        """The plans of ``count`` samples of round ``round_no``, from what ``pool`` knows and what the last
        round's answers lacked (``losses``)."""
        best = pool.ranked_best()
        failures = pool.recent_failures(max(count, 3))
        parents = [e for pair in itertools.zip_longest(best, failures) for e in pair if e is not None]
        if round_no == 0:
            parents = []
        notes = answer_notes(losses)
        plans = []
        for s in range(count):
            k = round_no * self.samples_per_round + s
            parent = parents[s % len(parents)] if parents else None
            plans.append(self._plan(k, parent, best, failures[:4], notes if round_no > 0 else []))
        return plans

    def plan_one(self, index: int, pool: Pool, losses: Counter[SampleLoss]) -> Plan:
        """The plan of the ``index``-th request of a continuous search. A fresh task while no generated candidate
        was judged (while only seeds were, within the first round's samples); else a refinement from the best
        lineage so far: in turn its best kernel and its latest failure to repair (the latest failure anywhere
        while nothing passed), with feedback from that lineage's own judged candidates. ``losses``: what the
        answers so far lacked."""
        best = pool.ranked_best(1)
        root = pool.lineage(best[0].candidate.digest) if best else None
        failures = pool.recent_failures(1, root) or ([] if best else pool.recent_failures(1))
        judged = any(k.result is not None for k in pool.generated_known())
        notes = answer_notes(losses) if index >= self.samples_per_round or judged else []
        if (not judged and index < self.samples_per_round) or not (best or failures):
            return self._plan(index, None, [], [], notes)
        parent = failures[0] if failures and (index % 2 or not best) else best[0]
        root = pool.lineage(parent.candidate.digest)
        return self._plan(index, parent, pool.ranked_best(2, root), pool.recent_failures(4, root), notes)

    def _plan(self, k: int, parent: Known | None, best: list[Known], failures: list[Known], notes: list[str]) -> Plan:
        """The plan of the ``k``-th sample of the search: a fresh task (with ``notes``) without a parent, else the
        continuation from ``parent`` with feedback on ``best`` and ``failures``."""
        directions = self.directions()
        temps = self.generation.temperatures
        direction = directions[k % len(directions)] if directions else None
        temperature = temps[k % len(temps)] if self.honours_temperature else None
        if parent is None:
            text = task_prompt(self.manifest, self.spec, self.arch, direction=direction)
            if notes:
                text += "\n" + feedback_prompt(
                    self.spec,
                    parent=None,
                    parent_in_conversation=False,
                    best=[],
                    failures=[],
                    notes=notes,
                    direction=None,
                )
            return Plan([{"role": "user", "content": text}], temperature, direction, None)
        in_conversation = parent.candidate.origin.kind == "generated" and bool(parent.messages)
        feedback = feedback_prompt(
            self.spec,
            parent=_judged(parent),
            parent_in_conversation=in_conversation,
            best=[_judged(b) for b in best],
            failures=[_judged(f) for f in failures],
            notes=notes,
            direction=direction,
        )
        if in_conversation:
            messages = [
                parent.messages[0],
                {"role": "assistant", "content": parent.answer},
                {"role": "user", "content": feedback},
            ]
        else:
            first = task_prompt(self.manifest, self.spec, self.arch, direction=None)
            messages = [{"role": "user", "content": first + "\n" + feedback}]
        return Plan(messages, temperature, direction, parent.candidate.digest)
