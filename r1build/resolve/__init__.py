"""Resolution: every kernel × arch of a manifest to one winning candidate, and the build's generated files.

The order of sources for one kernel on one arch (its *decision key* names the question):

1. the lock, when its entry answers this key and may be used (a lock entry never names a pending or rejected
   winner, nor one that the cached decision of its key records as rejected): the winner's source from the cache,
   the vendored folder, or the manifest's own files (verified by digest);
2. a decision in the cache for this key (its winner re-checked by :func:`~r1build.selection.rules.decision_winner`);
3. on a miss, real work: a GPU evaluator of this arch judges the baseline, hand-written files and every tunable
   value set, and an LLM endpoint (when configured and not ``--offline``) generates more candidates around them;
4. with no GPU of this arch and no endpoint, the static gate judges the user's own sources and the first that
   passes in preference order wins, ``unvalidated``.

Only a candidate that may win (:mod:`r1build.selection.rules`) is ever a winner: one that a check rejected never is,
and a
generated one judged by the gate alone stays ``pending`` in the cached decision until a GPU of its arch judges it.
A kernel × arch where none may win is :class:`~r1build.records.Unresolved`: nothing is locked or emitted for it,
the rest of the manifest still resolves and is locked, and :meth:`Resolution.require_complete` raises
:class:`~r1build.errors.NoWinnerError` for callers that emit. Everything emitted passes the static gate for its
arch (cached, so a warm build compiles nothing twice).

The package, in the order of a run: :mod:`.model` (what is asked and answered), :mod:`.run` (:func:`resolve`),
:mod:`.lookup` (answers without work, from the lock or the cache), :mod:`.work` (a miss: measure, generate, or
the gate alone), :mod:`.judges` (the gate, GPU evaluators, profiler and endpoint of a run), :mod:`.sources` (a
winner's source, verified) and :mod:`.prepare` (what a build calls).
"""

from __future__ import annotations

from ..records import ResolveOptions
from .lookup import decision_refusal, lock_refusal, stale_checks
from .model import Resolution, Resolved
from .prepare import emit_resolution, prepare_build
from .run import resolve
from .sources import WinnerSource, project_source

__all__ = [
    "Resolution",
    "ResolveOptions",
    "Resolved",
    "WinnerSource",
    "decision_refusal",
    "emit_resolution",
    "lock_refusal",
    "prepare_build",
    "project_source",
    "resolve",
    "stale_checks",
]
