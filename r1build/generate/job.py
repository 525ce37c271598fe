"""What identifies and serves one search: the record passed down from :func:`r1build.generate.search` (and
:func:`~r1build.generate.replay`) to the controller, the live search and the replay, in place of a chain of
keyword arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..cache import Cache
from ..convert import record
from ..judge import Evaluator
from ..manifest.archs import parse_arch
from ..manifest.model import KernelSpec, Manifest
from ..records import Candidate

if TYPE_CHECKING:
    from ..perfmodel import PerfModel
    from ..profile import Profiler

__all__ = ["SearchJob"]


@record(frozen=True)
class SearchJob:
    """One search for one kernel on one arch: what it searches for, who judges, where it is kept, what it starts
    from. The arch is parsed when the job is made (:class:`ValueError` naming the spellings for one that is not
    an arch)."""

    manifest: Manifest
    """The manifest the kernel is declared in: its generation settings (endpoint, temperatures, prices)."""
    spec: KernelSpec
    """The kernel searched for, with its budget."""
    arch: str
    """The arch searched on, canonical (:class:`~r1build.manifest.archs.Arch`) once the job is made."""
    evaluator: Evaluator
    """The judge of every candidate: the static gate, or a GPU that checks and times."""
    cache: Cache
    """Where the transcripts (and their links under the decision key) are stored and read back."""
    seeds: Sequence[Candidate] = ()
    """Candidates judged first, that come first in the outcome (baseline, hand-written ones, their variants)."""
    profiler: Profiler | None = None
    """Where ncu and a local GPU are: each round's finalists are profiled and the findings fed back."""
    perf_model: PerfModel | None = None
    """Orders (and, in its skip mode, skips) GPU work by its predictions."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "arch", parse_arch(self.arch))
