"""The verdict on the extra calls at the benchmark shapes (:data:`~.child.gpu_compare.EXTRA_CALLS`), after
:func:`~.bench_checks.bench_verdict` passed what the timed calls left.

* ``lazy``: set 0's inputs unchanged and its outputs holding finite values (the timed calls' outputs, one element
  in :data:`~.child.gpu_compare.DECOY_STRIDE` changed) before one more call: a kernel that skips its work when its
  output already looks done leaves the changed elements (:mod:`.child.extras`);
* three replays of one CUDA graph captured on the stream, fresh inputs written in place before each: the first
  wrong means work outside the given stream at the benchmark shape (an implicit legacy or per-thread stream, which
  the capture does not take), a later one a result that depends on how often the graph is replayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...manifest.model import KernelSpec
from ..child.gpu_compare import DECOY_STRIDE, EXTRA_CALLS, extra_source
from ..child.messages import TimedShape
from .bench import BenchPlan, BenchSet, BenchShape, _compare, bench_verdict
from .compare import CHUNK, Mismatch
from .plan import Verdict

__all__ = ["extra_verdict", "place_set", "timed_verdict"]

_STREAM_RULE = (
    "The contract: launch every kernel, copy and memset of the call on the `stream` argument (or on streams "
    "joined to it with events); never on the default stream, a private stream or cudaStreamPerThread."
)


def place_set(shape: BenchShape, place: int) -> BenchSet:
    """The input set (and so the reference's outputs) of the call at ``place`` of a shape's parked layout: a
    timed set, the tweaked set (``len(sets)``), or the set an extra call used."""
    sets = len(shape.sets)
    if place > sets:
        place = extra_source(sets, place - sets - 1)
    return shape.sets[place] if place < sets else shape.tweak


def _detail(e: int, key: str, found: Mismatch) -> Verdict:
    """The verdict on a wrong output of extra call ``e`` at the benchmark shape ``key``."""
    where = f"at the benchmark shape {key}"
    if found.kind == "input":
        call = "a call over outputs it had written before" if EXTRA_CALLS[e] == "lazy" else "a replay of its graph"
        return Verdict("incorrect", f"{call} {where} {found.message}", kind="input")
    if EXTRA_CALLS[e] == "lazy":
        return Verdict(
            "incorrect",
            f"lazy output: a call skipped its work {where}: with the inputs of the call before unchanged and its "
            f"outputs holding finite values (the timed calls' outputs, one element in {DECOY_STRIDE} changed), "
            f"the outputs are wrong ({found.message}); every call must compute every output from its inputs, "
            "whatever the output buffers hold, or the timed calls did not each do the whole job",
            kind=found.kind,
        )
    replay = EXTRA_CALLS[:e].count("replay") + 1
    if replay == 1:
        return Verdict(
            "incorrect",
            f"work outside the given stream {where}: replaying only the CUDA graph captured from the call on its "
            f"stream, fresh inputs written in place, gave wrong outputs ({found.message}), though it passed at "
            "the test shapes (work on the legacy or per-thread default stream is not captured). " + _STREAM_RULE,
            kind="stream",
        )
    return Verdict(
        "incorrect",
        f"the result depends on how often a captured graph is replayed {where}: replay {replay} of one CUDA "
        f"graph captured on the stream, fresh inputs written in place, gave wrong outputs ({found.message}), "
        "though the first replay was right (state kept on the device between replays, or values the call "
        "decided on the host and the capture froze); callers capture once and replay thousands of times",
        kind=found.kind,
    )


def extra_verdict(
    spec: KernelSpec, plan: BenchPlan, replies: Sequence[TimedShape], *, chunk: int = CHUNK, within: Path | None = None
) -> Verdict | None:
    """The first failure among the extra calls of every benchmark shape (see the module docstring), or None; outputs
    read only from beneath ``within``, the worker's folder."""
    for shape, reply in zip(plan.shapes, replies, strict=False):
        if reply.get("extra_error"):
            return Verdict(
                "incorrect",
                f"work outside the given stream: capturing the call into a CUDA graph on its stream to replay it "
                f"failed at the benchmark shape {shape.key} ({reply['extra_error']}). " + _STREAM_RULE,
                kind="stream",
            )
        extras = reply.get("extra_outputs") or []
        if len(extras) < len(EXTRA_CALLS):
            return Verdict(
                "crashed", f"the worker returned {len(extras)} of {len(EXTRA_CALLS)} extra outputs at {shape.key}"
            )
        judged = reply.get("extra_judged") or []
        sets = len(shape.sets)
        for e, paths in enumerate(extras[: len(EXTRA_CALLS)]):
            bench_set = place_set(shape, sets + 1 + e)
            found = _compare(spec, bench_set, paths, judged[e] if e < len(judged) else (), chunk, within)
            if found is not None:
                return _detail(e, shape.key, found)
    return None


def timed_verdict(
    spec: KernelSpec, plan: BenchPlan, replies: Sequence[TimedShape], *, chunk: int = CHUNK, within: Path | None = None
) -> Verdict | None:
    """:func:`~.bench_checks.bench_verdict`, then :func:`extra_verdict`: the first failure, or None (outputs read
    only from beneath ``within``, the worker's folder)."""
    return bench_verdict(spec, plan, replies, chunk=chunk, within=within) or extra_verdict(
        spec, plan, replies, chunk=chunk, within=within
    )
