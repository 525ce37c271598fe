"""The one interface every judge of candidates implements: the static gate, and the gate plus the GPU evaluator.

The generation controller and the resolver only know :class:`Evaluator`; which judge they get decides whether
results carry timings (GPU) or only the static gate's verdict (no GPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from .convert import record
from .records import Candidate, Result

if TYPE_CHECKING:
    from .manifest.model import KernelSpec, Manifest

__all__ = ["CHECKS_VERSION", "Evaluator", "Job"]

CHECKS_VERSION = 3
"""Version of the GPU evaluator's checks (correctness plan, behaviour checks, floors, allowlists). Bumped whenever a
change to them could turn a pass into a rejection: every measured decision and lock entry records the version that
judged it, ``status`` shows those judged by an older one, ``--locked`` warns about them and ``r1build resolve
--refresh`` judges them again. Version 2: the ``moved`` call's buffers are at addresses the candidate's library was
never handed before (version 1 could reuse an earlier request's), and a compute-sanitizer run that does not finish
(past twice its time limit, or ended early) rejects the candidate instead of passing it with a note. Version 3 (issue
27; the root and sample manifests re-locked under it on a GPU): the benchmark shapes get the test shapes' checks
(replays of one captured graph with fresh inputs, a lazy-output call, inputs checked unchanged, launch errors read
from the library), concurrent calls on two streams, every distribution at 256-byte-aligned pointers, arrays ending at
unmapped memory, precision inputs that expose a float32 kernel computing in TF32/bf16/fp16, a static device memory
limit, and times below the floor by more than the measurement error rejected."""


@record(frozen=True)
class Job:
    """Judge ``candidates`` of one kernel for one arch."""

    manifest: Manifest
    """The manifest the spec comes from (for paths and settings)."""
    spec: KernelSpec
    """The kernel."""
    arch: str
    """Canonical arch, e.g. ``sm_90``."""
    candidates: Sequence[Candidate]
    """Variants to judge; each already carries its tunable values."""
    baseline: Candidate | None = None
    """The baseline variant, for speedups (it may also be among ``candidates``)."""


class Evaluator(Protocol):
    """Judges candidates; returns one :class:`Result` per candidate, in order. Never raises for a bad candidate:
    a failure is a result. Raises :class:`~r1build.errors.EvaluationError` only when it cannot judge at all."""

    def evaluate(self, job: Job) -> list[Result]:
        """Judge every candidate of ``job``."""
        ...
