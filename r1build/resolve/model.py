"""What a resolve is asked and what it answers: the options, each winner (:class:`Resolved`) and the whole
:class:`Resolution`; inside a run, one :class:`Question` (a kernel × arch and its decision key) and the :class:`Run`
every question shares."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..cache import Cache
from ..errors import NoWinnerError
from ..events import Note, NoteLevel, emit
from ..judge import Job
from ..lock import Lock
from ..manifest import KernelSpec, Manifest
from ..records import Candidate, Found, Provenance, Result, Unresolved, Validation

if TYPE_CHECKING:
    from .judges import Judges


@dataclass(frozen=True, kw_only=True)
class ResolveOptions:
    """How to resolve."""

    archs: list[str] | None = None
    """Only these canonical archs (intersected with each kernel's); all targets when None."""
    kernels: list[str] | None = None
    """Only these kernels; all when None."""
    offline: bool | None = None
    """Never call an LLM. None: offline when ``R1BUILD_OFFLINE`` is set in ``environ`` or no endpoint is
    configured."""
    locked: bool = False
    """Fail unless the lock is present and current; use only what it names."""
    refresh: bool = False
    """Ignore cached decisions and the lock, and judge again."""
    frozen: bool = False
    """Use the lock as it is, without requiring it to be current (``--frozen``): every kernel × arch takes its
    entry, stale or not, each still verified against the manifest as a locked read verifies it (declared
    tunables and values, origin file and its digest, winner digest, a key naming no other kernel × arch's
    decision; :func:`~r1build.lock.load_lock`); one without an entry is an error, and nothing is generated,
    measured or written to the lock."""
    mode_words: tuple[str, str] = ("--locked", "--frozen")
    """How the caller's user asks for ``locked`` and ``frozen``, for messages: the command line's flags, or a
    build's config settings and variables."""
    use_gpu: bool | None = None
    """Measure on local GPUs on a miss. None: when one is visible."""
    write_lock: bool = True
    """Update the lock file when decisions change."""
    recover_lock: bool = False
    """A damaged lock (corrupt, truncated, conflicted, or with entries that do not verify) is rebuilt from the
    entries that still verify, the cache and the manifest, instead of being an error (``r1build lock``)."""
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    """Environment for endpoint and key lookup."""
    build: bool = False
    """Resolving for a build (the PEP 517 backend): an endpoint that never answers is a warning, and the build
    goes on with the user's own sources, instead of an error."""
    cluster: str | None = None
    """Address of a Dask scheduler: GPU jobs run on its workers of each arch, gate compiles on its compile slots
    (:mod:`r1build.cluster`), instead of on local GPUs and cores. None: this machine only."""


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
    speedup_vs_torch: float | None = None
    """The torch bar's time over the winner's (the lock's ``speedup-vs-torch``), where the kernel names a
    ``torch-reference`` and torch was timed."""
    torch_note: str | None = None
    """Why a measured winner of a kernel naming a ``torch-reference`` has no speedup over torch."""
    idle_gaps_us: float | None = None
    """Its median in the ``idle-gaps`` timing regime (the lock's ``idle-gaps-us``), where it was a finalist."""
    regime_note: str | None = None
    """Why its win holds in the ranking timing regime only (the lock's ``regime-note``)."""


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
