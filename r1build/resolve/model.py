"""What a resolve is asked and what it answers: each winner (:class:`Resolved`) and the whole
:class:`Resolution`; inside a run, one :class:`Question` (a kernel × arch and its decision key) and the :class:`Run`
every question shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..cache import Cache
from ..convert import field, record
from ..errors import NoWinnerError
from ..events import Note, NoteLevel, emit
from ..judge import Job
from ..lock import Lock
from ..manifest import KernelSpec, Manifest
from ..records import Candidate, Found, Provenance, ResolveOptions, Result, Unresolved, Validation, WinnerFacts

if TYPE_CHECKING:
    from .judges import Judges


@record(frozen=True, kw_only=True)
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
    facts: WinnerFacts = field(default_factory=WinnerFacts)
    """Its time, GPU, checks, library and floor figures (none for a winner of the static gate alone)."""
    toolchain: str | None = None
    """nvcc identity that gated or measured it."""
    gate: Result | None = None


@record
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

    def device_bytes(self) -> dict[str, int]:
        """Bytes of device code each arch's winners add to a binary, by arch in the entries' order (their gate
        reports' machine code; 0 for a winner whose report predates the count)."""
        out: dict[str, int] = {}
        for r in self.entries:
            report = r.gate.gate if r.gate is not None else None
            out[r.arch] = out.get(r.arch, 0) + (report.device_bytes if report is not None else 0)
        return out

    def require_within_cap(self) -> None:
        """:class:`~r1build.errors.ManifestError` at ``max-wheel-mib`` when the winners' device code is over it."""
        cap = self.manifest.settings.max_wheel_mib
        sizes = self.device_bytes()
        total = sum(sizes.values())
        if cap is None or total <= cap * _MIB:
            return
        from ..manifest.load import located_error

        shares = ", ".join(f"{arch} {kib(n)}" for arch, n in sizes.items())
        raise located_error(
            self.manifest,
            ("max-wheel-mib",),
            f"the kernels' device code is {kib(total)}, over max-wheel-mib = {cap:g} ({kib(int(cap * _MIB))}): "
            f"{shares}; drop archs (or kernels) to fit",
        )


_MIB = 1 << 20


def kib(n: int) -> str:
    """Bytes as KiB with one decimal: ``5.2 KiB``."""
    return f"{n / 1024:.1f} KiB"


@record(frozen=True)
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


@record(frozen=True)
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
