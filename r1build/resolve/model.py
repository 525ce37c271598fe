"""What a resolve is asked and what it answers: each winner (:class:`Resolved`) and the whole
:class:`Resolution`; inside a run, one :class:`Question` (a kernel × arch and its decision key) and the :class:`Run`
every question shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..cache import Cache
from ..errors import NoWinnerError
from ..events import Note, NoteLevel, emit
from ..judge import Job
from ..lock import Lock
from ..manifest import KernelSpec, Manifest
from ..records import Candidate, Found, Provenance, ResolveOptions, Result, Unresolved, Validation

if TYPE_CHECKING:
    from .judges import Judges


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """The winner of one kernel on one arch and how it was found."""

    spec: KernelSpec
    arch: str
    key: str
    candidate: Candidate
    state: Found
    provenance: Provenance
    validation: Validation
    """``validated`` or ``unvalidated`` (a winner is never pending or rejected)."""
    time_us: float | None = None
    gpu: str | None = None
    toolchain: str | None = None
    gate: Result | None = None
    checks: int | None = None
    """Version of the GPU checks that validated it."""
    speedup_vs_library: float | None = None
    """The library's time over the winner's (the lock's ``speedup-vs-library``), when measured."""
    share_of_floor: float | None = None
    """The hardware floor's time over the winner's, when measured."""
    library_note: str | None = None
    """Why a measured winner has no speedup over the library."""


@dataclass
class Resolution:
    """All winners of one resolve run."""

    manifest: Manifest
    entries: list[Resolved]
    lock: Lock
    lock_changed: bool = False
    unresolved: list[Unresolved] = field(default_factory=list)
    """Kernel × archs where no candidate may win: nothing is locked or emitted for them."""

    def require_complete(self) -> None:
        """:class:`~r1build.errors.NoWinnerError` when some kernel × arch has no winner (before emitting)."""
        if self.unresolved:
            raise NoWinnerError(self.unresolved)


@dataclass(frozen=True)
class Question:
    """One kernel × arch to resolve, and the decision key that names it."""

    spec: KernelSpec
    arch: str
    key: str

    def job(self, manifest: Manifest, candidates: Sequence[Candidate]) -> Job:
        """The job of judging ``candidates`` for this kernel × arch (the baseline among them named)."""
        return Job(manifest, self.spec, self.arch, list(candidates), baseline_of(candidates))

    def note(self, level: NoteLevel, message: str) -> None:
        """Emit a note about this kernel × arch."""
        emit(Note(level, message, self.spec.name, self.arch))


@dataclass(frozen=True)
class Run:
    """What every question of one resolve run shares."""

    manifest: Manifest
    cache: Cache
    options: ResolveOptions
    judges: Judges
    lock: Lock | None
    """The verified lock (None: none)."""
    refused: set[str] = field(default_factory=set)
    """Warnings about refused decisions already given this run (each is said once)."""


def baseline_of(seeds: Sequence[Candidate]) -> Candidate | None:
    """The untuned baseline among the manifest's own candidates (:func:`expand_variants` puts it first)."""
    return seeds[0] if seeds and seeds[0].origin.kind == "baseline" else None
