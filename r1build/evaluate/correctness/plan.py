"""The correctness plan of one kernel, shared by all its candidates, and the verdict on a worker's replies.

For every test shape the plan is a sequence of calls into the *same* buffers, each with the reference's outputs
for its inputs, and each output pre-filled with a poison distinct to the call (a signalling NaN for floats, which
no arithmetic produces), so an element left from an earlier call or never written shows:

1.   ``capture``: the call is captured into a CUDA graph on the given stream in global capture mode and the graph
     discarded: touching the legacy default stream, synchronizing or allocating fails the capture. It comes first,
     so such a kernel is always caught by this check, before any output could be read half-written;
2-5. ``direct`` calls with signed, large-magnitude, tied and denormal inputs;
6.   ``tweak``: the inputs of call 5 with one element changed, same pointers: a result memoized on the pointers
     (or on a few sampled values) comes back stale;
7.   ``moved``: the inputs of call 2, identical, in a second set of allocations (new addresses);
8.   ``graph``: the call is captured again, new inputs are uploaded, and only the graph is replayed: work on a
     private or per-thread stream never reaches the outputs;
     ``replay`` (last test shape): the same graph replayed three more times, fresh inputs written in place
     before each: a result that depends on how often one captured graph is replayed shows;
     ``aligned`` (where the arrays sit at odd offsets): every distribution again with each array at a
     256-byte-aligned address, as cudaMalloc and PyTorch give them: a path taken only for aligned buffers runs;
     ``concurrent`` and ``after`` (last test shape): two pairs of calls made at the same time on two streams with
     different inputs (buffer sets 0 and 1), then one call alone: state shared between calls shows;
9-10. ``smem``: every SM's shared memory is filled with a pattern by a kernel launched just before the call
     (two patterns), so a kernel reading shared memory it never wrote gives a different answer. These need the
     GPU to themselves (:func:`part_of`): another process's kernels between the fill and the call, or a context
     switch, can leave shared memory cleared, and a kernel reading zeros it never wrote may then pass;
11.  ``direct`` with ``precision`` inputs, whose low mantissa bits TF32, bf16 and fp16 drop: last, so a failure
     here alone is named as likely computing below float32 (:mod:`.precision`; a direct call whose outputs match
     the reference on inputs rounded to TF32 or bf16 is named so at any call).

Outputs are read only once the whole device is idle, so work a kernel (wrongly) left on another stream has
finished and the same kernel gets the same verdict every run. Pointers are offset from aligned allocations
(unless the spec declares an alignment) and surrounded by guard bands; :mod:`.compare` judges the bytes that come
back.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from ...convert import field, record, replace
from ...errors import EvaluationError
from ...manifest.model import KernelSpec, Tolerance
from ...manifest.outputs import call_reference
from ...manifest.reference import ReferenceProblem
from ..child.messages import ArgItem, CallRecord, CallRequest, CheckReply, CheckRequest, Mode
from ..child.protocol import CAPTURE_ERRORS
from ..timing.floors import shape_key
from .compare import Mismatch, check_guards, check_unchanged, compare_outputs
from .inputs import (
    FLOAT_DTYPES,
    GUARD_BYTE,
    ArrayLayout,
    generate_inputs,
    layout_for,
    numpy_dtype,
    poison_bytes,
    reference_kwargs,
    scalar_values,
)
from .precision import DOWNCASTS, downcast_inputs, name_downcast

__all__ = [
    "CallPlan",
    "ShapePlan",
    "Verdict",
    "arg_codes",
    "arg_items",
    "check_request",
    "diagnose",
    "diagnosis_plan",
    "needs_diagnosis",
    "part_of",
    "plan_checks",
    "run_reference",
    "shape_verdict",
]

CheckPart = Literal["all", "shared", "alone"]
"""Which calls of a plan run: every one; those that keep their meaning with other work on the GPU (``shared``);
or those that need the GPU to themselves (``alone``: the shared-memory fills)."""

SMEM_PATTERNS = (0xFFFFFFFF, 0x4B4B4B4B)
"""Patterns shared memory is pre-filled with: NaN as float, -1 as int; then 1.3e7 as float."""

_SEQUENCE: tuple[tuple[str, Mode, int | None], ...] = (
    ("signed", "capture", None),
    ("signed", "direct", None),
    ("large", "direct", None),
    ("ties", "direct", None),
    ("denormal", "direct", None),
    ("denormal", "tweak", None),
    ("signed", "moved", None),
    ("signed", "graph", None),
)
_REPLAYS: tuple[tuple[str, Mode, int | None], ...] = (
    ("large", "replay", None),
    ("ties", "replay", None),
    ("signed", "replay", None),
)
"""At the last test shape, after the ``graph`` call: the same graph replayed again, fresh inputs written in place
before each replay (users capture once and replay thousands of times)."""
_ALIGNED: tuple[tuple[str, Mode, int | None], ...] = (
    ("signed", "aligned", None),
    ("large", "aligned", None),
    ("ties", "aligned", None),
    ("denormal", "aligned", None),
)
"""Every distribution again with each array at a 256-byte-aligned address (what cudaMalloc and PyTorch hand out),
where the layout puts the arrays at odd offsets (no declared alignment)."""
_CONCURRENT: tuple[tuple[str, Mode, int | None], ...] = (
    ("signed", "concurrent", None),
    ("large", "concurrent", None),
    ("ties", "concurrent", None),
    ("signed", "concurrent", None),
    ("large", "concurrent", None),
    ("ties", "concurrent", None),
    ("large", "after", None),
)
"""At the last test shape: three pairs of calls made at once on two streams (different inputs, buffer sets 0 and
1), then one call alone: a kernel may be called concurrently on different streams. Whether two calls overlap is
up to the GPU's scheduler: each pair is another chance for state shared between calls to show."""
_SMEM: tuple[tuple[str, Mode, int | None], ...] = (
    ("signed", "smem", SMEM_PATTERNS[0]),
    ("signed", "smem", SMEM_PATTERNS[1]),
    ("precision", "direct", None),
)
_TWEAKED = 4
"""Index of the call whose inputs the ``tweak`` call changes in one element."""
_MOVED = 1
"""Index of the call whose inputs the ``moved`` call repeats at new addresses."""
_NOT_DIAGNOSED = frozenset({"capture", "replay", "aligned", "concurrent", "after"})
"""Modes whose failure repeating the call in the first buffers cannot explain (it names their cause itself)."""


def _sequence(last: bool, offset: bool) -> tuple[tuple[str, Mode, int | None], ...]:
    """The calls at one test shape: the replays and the concurrent calls at the ``last`` shape only, the aligned
    calls where the arrays sit at ``offset`` addresses, the shared-memory fills last (:func:`part_of`)."""
    return _SEQUENCE + (_REPLAYS if last else ()) + (_ALIGNED if offset else ()) + (_CONCURRENT if last else ()) + _SMEM


def _buffers(mode: Mode, position: int) -> int:
    """The buffer set of a call: 1 for ``moved`` and every second ``concurrent`` call, 2 for ``aligned``."""
    if mode == "moved":
        return 1
    if mode == "aligned":
        return 2
    return position % 2 if mode == "concurrent" else 0


_CODES = {
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float32": "f32",
    "float64": "f64",
    "bool": "bool",
    "float16": "u16",
    "bfloat16": "u16",
}


@record(frozen=True, kw_only=True)
class CallPlan:
    """One call of a shape's sequence."""

    dist: str
    """Input distribution."""
    mode: Mode
    """How the call is made."""
    index: int
    """Position in the sequence; outputs are poisoned with :func:`~.inputs.poison_bytes` of it."""
    smem_pattern: int | None
    """Shared-memory fill before the call (``smem`` mode)."""
    inputs: dict[str, NDArray[Any]]
    """``in`` / ``inout`` arrays uploaded for the call."""
    expected: dict[str, NDArray[Any]]
    """The reference's ``out`` / ``inout`` arrays for those inputs."""
    buffers: int = 0
    """Which set of allocations the call uses: 0; 1 for the ``moved`` call and every second ``concurrent`` one
    (the same layout elsewhere); 2 for the ``aligned`` calls (each array at a 256-byte-aligned address)."""
    downcasts: dict[str, dict[str, NDArray[Any]]] = field(default_factory=dict)
    """``direct`` calls with float inputs that a downcast changes (all but ``ties``): the reference's outputs on
    the inputs rounded to each format of :data:`~.precision.DOWNCASTS`, by format, to recognize a kernel
    computing below float32."""

    @property
    def label(self) -> str:
        """``large inputs`` / ``graph replay`` / ``shared memory pre-filled with 0xffffffff``."""
        if self.mode == "graph":
            return "replay of a CUDA graph captured on the stream"
        if self.mode == "capture":
            return "capture into a CUDA graph on the stream"
        if self.mode == "smem":
            return f"shared memory pre-filled with 0x{self.smem_pattern or 0:08x}"
        if self.mode == "tweak":
            return "the previous call's inputs with one element changed, same pointers"
        if self.mode == "moved":
            return "the inputs of call 2 again, at new addresses"
        if self.mode == "replay":
            return f"the same captured graph replayed again, {self.dist} inputs written in place"
        if self.mode == "aligned":
            return f"{self.dist} inputs, every array at a 256-byte-aligned address"
        if self.mode == "concurrent":
            return f"{self.dist} inputs, called at the same time as another call on a second stream"
        if self.mode == "after":
            return f"{self.dist} inputs, called alone after the concurrent calls"
        return f"{self.dist} inputs"


@record(frozen=True)
class ShapePlan:
    """Every call at one test shape."""

    sizes: dict[str, int]
    """The shape."""
    key: str
    """The shape written as ``n=31``."""
    layouts: list[ArrayLayout]
    """Where each array lives in its allocation."""
    calls: list[CallPlan]
    """The sequence of calls into the same buffers."""


@record(frozen=True)
class Verdict:
    """A failed check."""

    status: Literal["incorrect", "crashed", "timed_out", "rejected"]
    """Result status."""
    detail: str
    """What happened, where, and (for contract violations) what the contract requires."""
    call: int | None = None
    """Index of the failing call in its shape's sequence, when one call failed."""
    kind: str = ""
    """The :class:`~.compare.Mismatch` kind of an output failure (``value``, ``nan``, ``unwritten``, ...)."""


def arg_codes(spec: KernelSpec) -> list[str]:
    """ctypes codes of the entry point's parameters (the trailing stream excluded)."""
    return ["ptr" if a.is_array else _CODES[a.dtype] for a in spec.args]


def _scalar_for_ctypes(dtype: str, value: int | float) -> int | float | bool:
    if dtype in ("float16", "bfloat16"):
        as_np = np.array([value], dtype=numpy_dtype(dtype))
        return int(as_np.view(np.uint16)[0])
    if dtype in FLOAT_DTYPES:
        return float(value)
    if dtype == "bool":
        return bool(value)
    return int(value)


def arg_items(spec: KernelSpec, sizes: Mapping[str, int]) -> list[ArgItem]:
    """The entry point's arguments for one shape: ``{"array": j}`` (j-th array argument) or ``{"scalar": v}``."""
    scalars = scalar_values(spec, sizes)
    items: list[ArgItem] = []
    j = 0
    for arg in spec.args:
        if arg.is_array:
            items.append({"array": j})
            j += 1
        else:
            items.append({"scalar": _scalar_for_ctypes(arg.dtype, scalars[arg.name])})
    return items


def run_reference(
    reference: Callable[..., Any], spec: KernelSpec, sizes: Mapping[str, int], inputs: Mapping[str, NDArray[Any]]
) -> dict[str, NDArray[Any]]:
    """The reference's outputs by name, checked against the declared shapes and dtypes as ``r1build check``
    checks them (:func:`~r1build.manifest.outputs.call_reference`); integer outputs in their declared dtype."""
    try:
        checked = call_reference(reference, spec, sizes, reference_kwargs(spec, sizes, inputs))
    except ReferenceProblem as exc:
        raise EvaluationError(f"{spec.name}: the reference {spec.reference} at {dict(sizes)}: {exc}") from None
    for arg in spec.args:
        if arg.name in checked and arg.dtype not in FLOAT_DTYPES:
            checked[arg.name] = checked[arg.name].astype(numpy_dtype(arg.dtype))
    return checked


def _seed(base: int, name: str, shape_index: int, call_index: int) -> int:
    return zlib.crc32(f"{base}:{name}:{shape_index}:{call_index}".encode())


def tweak_one(inputs: Mapping[str, NDArray[Any]], seed: int) -> dict[str, NDArray[Any]]:
    """A copy of ``inputs`` with one element of the largest input array changed (position drawn from ``seed``):
    what a memo keyed on the pointers, or on a few sampled values, does not notice."""
    out = {name: np.array(value, copy=True) for name, value in inputs.items()}
    name = max(out, key=lambda k: out[k].size, default=None)
    if name is None or out[name].size == 0:
        return out
    flat = out[name].reshape(-1)
    i = int(np.random.default_rng(seed).integers(0, flat.size))
    if flat.dtype == np.bool_:
        flat[i] = not flat[i]
    elif flat.dtype.kind == "f" or flat.dtype.name == "bfloat16":
        flat[i] = flat.dtype.type(float(flat[i]) * -2.0 + 1.5)
    else:
        info = np.iinfo(flat.dtype)
        flat[i] = flat.dtype.type(int(flat[i]) + 1 if int(flat[i]) < info.max else int(flat[i]) - 1)
    return out


def plan_checks(spec: KernelSpec, reference: Callable[..., Any], *, seed: int = 0) -> list[ShapePlan]:
    """The plan for every test shape of ``spec`` (the reference is called here, once per call)."""
    has_float = any(a.dtype in FLOAT_DTYPES for a in spec.args if a.is_array and a.role != "out")
    plans = []
    for si, sizes in enumerate(spec.test_shapes):
        layouts = layout_for(spec, sizes)
        sequence = _sequence(si == len(spec.test_shapes) - 1, any(lay.start % 256 for lay in layouts))
        calls: list[CallPlan] = []
        for ci, (dist, mode, pattern) in enumerate(sequence):
            if dist in ("denormal", "precision") and not has_float:
                dist = "signed"
            if mode == "tweak":
                inputs = tweak_one(calls[_TWEAKED].inputs, _seed(seed, spec.name, si, ci))
            elif mode == "moved":
                inputs = calls[_MOVED].inputs
            else:
                inputs = generate_inputs(spec, sizes, dist, _seed(seed, spec.name, si, ci))
            expected = run_reference(reference, spec, sizes, inputs)
            downcasts = {}
            if mode == "direct" and dist != "ties" and has_float:
                downcasts = {
                    fmt: run_reference(reference, spec, sizes, downcast_inputs(inputs, bits))
                    for fmt, bits in DOWNCASTS.items()
                }
            calls.append(
                CallPlan(
                    dist=dist,
                    mode=mode,
                    index=ci,
                    smem_pattern=pattern,
                    inputs=inputs,
                    expected=expected,
                    buffers=_buffers(mode, sum(c.mode == "concurrent" for c in calls)),
                    downcasts=downcasts,
                )
            )
        plans.append(ShapePlan(dict(sizes), shape_key(spec, sizes), layouts, calls))
    return plans


def part_of(plan: ShapePlan, part: CheckPart) -> ShapePlan:
    """The calls of ``plan`` that run in ``part`` (see :data:`CheckPart`), each keeping its index and poison."""
    if part == "all":
        return plan
    return replace(plan, calls=[c for c in plan.calls if (c.mode == "smem") == (part == "alone")])


def _poisons(plan: ShapePlan, call: CallPlan) -> dict[str, bytes]:
    return {lay.name: poison_bytes(lay.dtype, call.index) for lay in plan.layouts if lay.role == "out"}


def check_request(spec: KernelSpec, plan: ShapePlan, lib: str) -> tuple[CheckRequest, list[bytes]]:
    """The worker request that runs one shape's calls."""
    buffers: list[bytes] = []
    calls: list[CallRequest] = []
    for call in plan.calls:
        inputs: dict[str, int] = {}
        poison: dict[str, str] = {}
        for j, lay in enumerate(plan.layouts):
            if lay.role == "out":
                poison[str(j)] = poison_bytes(lay.dtype, call.index).hex()
            else:
                inputs[str(j)] = len(buffers)
                buffers.append(np.ascontiguousarray(call.inputs[lay.name]).tobytes())
        calls.append(
            {
                "mode": call.mode,
                "inputs": inputs,
                "poison": poison,
                "smem_pattern": call.smem_pattern,
                "buffers": call.buffers,
            }
        )
    header: CheckRequest = {
        "op": "check",
        "lib": lib,
        "args": arg_items(spec, plan.sizes),
        "calls": calls,
        "arrays": [
            {"total": lay.total, "start": lay.start, "nbytes": lay.nbytes, "guard_byte": GUARD_BYTE}
            for lay in plan.layouts
        ],
    }
    return header, buffers


_STREAM_RULE = (
    "The contract: launch every kernel, copy and memset of the call on the `stream` argument "
    "(or on streams joined to it with events); never on the default stream, a private stream or "
    "cudaStreamPerThread, and no synchronizing calls."
)


_STATE_RULE = (
    "The contract: a call launches work on its stream and nothing else: no device limits "
    "(cudaDeviceSetLimit, persisting L2), no stream or access-policy attributes, no allocation, no "
    "synchronization; whatever it changes would change every later candidate's time."
)


def _where(plan: ShapePlan, index: int) -> str:
    return f"at {plan.key} (call {index + 1} of {len(plan.calls)}: {plan.calls[index].label})"


_EARLIER = (
    "the result depends on earlier calls (state kept between calls: a memo of earlier results keyed on the "
    "pointers or on sampled values, a __device__ accumulator or flag never reset)"
)


def _first_direct(plan: ShapePlan) -> int | None:
    return next((i for i, c in enumerate(plan.calls) if c.mode == "direct"), None)


def _mismatch_detail(plan: ShapePlan, index: int, found: Mismatch) -> Verdict:
    """The verdict of a deterministic output failure of call ``index``, explained by what that call varies."""
    call = plan.calls[index]
    where = _where(plan, index)
    if found.kind in ("guard", "input"):
        return Verdict("incorrect", f"{found.message} {where}", index, found.kind)
    if call.mode == "graph":
        return Verdict(
            "incorrect",
            f"work outside the given stream: replaying only the CUDA graph captured from "
            f"the call on its stream gave wrong outputs ({found.message}) {where}. " + _STREAM_RULE,
            index,
            found.kind,
        )
    special = _new_mode_detail(call, found, where)
    if special is not None:
        return Verdict("incorrect", special, index, found.kind)
    if call.mode == "smem":
        return Verdict(
            "incorrect",
            f"reads shared memory it never wrote: {found.message} {where}, while the "
            "same inputs passed with shared memory left as it was",
            index,
            found.kind,
        )
    if call.mode == "tweak":
        return Verdict(
            "incorrect",
            f"{_EARLIER}: with one input element changed and the same pointers the "
            f"outputs are wrong ({found.message}) {where}",
            index,
            found.kind,
        )
    if call.mode == "moved":
        return Verdict(
            "incorrect",
            f"identical inputs at new addresses give wrong outputs ({found.message}) "
            f"{where}, though they passed in the first buffers: {_EARLIER}, or on the "
            "addresses",
            index,
            found.kind,
        )
    first = _first_direct(plan)
    if first is not None and index > first and found.kind == "unwritten":
        return Verdict(
            "incorrect",
            f"{_EARLIER}: {found.message} {where}, though an earlier call into the same buffers wrote every element",
            index,
            found.kind,
        )
    return Verdict("incorrect", f"{found.message} {where}", index, found.kind)


_REENTRANT_RULE = (
    "The contract: a kernel may be called concurrently on different streams (with different buffers), so a call "
    "keeps no state in __device__ variables between or across calls; scratch belongs in registers, shared memory "
    "or the call's own buffers."
)


def _new_mode_detail(call: CallPlan, found: Mismatch, where: str) -> str | None:
    """What a wrong output of a ``replay``, ``aligned``, ``concurrent`` or ``after`` call means; None for the
    other modes."""
    if call.mode == "replay":
        return (
            f"the result depends on how often a captured graph is replayed: replaying the same CUDA graph again, "
            f"with fresh inputs written in place, gave wrong outputs ({found.message}) {where}, though its first "
            "replay was right (state kept on the device between replays, or values the call decided on the host "
            "and the capture froze); callers capture once and replay thousands of times"
        )
    if call.mode == "aligned":
        return (
            f"wrong at 256-byte-aligned pointers, as cudaMalloc and PyTorch hand them out ({found.message}) "
            f"{where}, though the same kind of inputs passed at offset pointers: a path taken only for aligned "
            "buffers is wrong"
        )
    if call.mode == "concurrent":
        return (
            f"not reentrant: two calls made at the same time on two streams, with different inputs in different "
            f"buffers, gave wrong outputs ({found.message}) {where}; state shared between calls (a __device__ "
            "counter, flag or scratch array). " + _REENTRANT_RULE
        )
    if call.mode == "after":
        return (
            f"not reentrant: after two calls made at the same time on two streams, a call made alone gives wrong "
            f"outputs ({found.message}) {where}; the concurrent calls left state shared between calls corrupt "
            "(a 'last block done' counter left nonzero?). " + _REENTRANT_RULE
        )
    return None


def needs_diagnosis(plan: ShapePlan, verdict: Verdict) -> bool:
    """Whether an output failure could come from a race, from state kept across calls or from reading unwritten
    shared memory, which repeating calls tells apart (:func:`diagnosis_plan`)."""
    return (
        verdict.status == "incorrect"
        and verdict.call is not None
        and plan.calls[verdict.call].mode not in _NOT_DIAGNOSED
        and verdict.kind in ("value", "nan", "unwritten")
    )


_REPEATS = 6
"""How often the diagnosis repeats the failing call with the same inputs and shared-memory fill."""


def diagnosis_plan(plan: ShapePlan, index: int) -> ShapePlan:
    """Calls that explain the failure of call ``index``: the failing call ``_REPEATS`` times into the same
    buffers with shared memory pre-filled with pattern A; once more with pattern B; once at other addresses
    (the second buffer set); and the first direct call's inputs twice (they passed the first time), when that
    call came earlier. The repeats share one poison, so outputs left unwritten compare equal."""
    call = plan.calls[index]
    a, b = SMEM_PATTERNS
    first = _first_direct(plan)
    calls = [replace(call, mode="smem", smem_pattern=a, index=100) for _ in range(_REPEATS)]
    calls.append(replace(call, mode="smem", smem_pattern=b, index=100))
    calls.append(replace(call, mode="smem", smem_pattern=a, index=101, buffers=1 - call.buffers))
    if first is not None and first < index:
        calls += [
            replace(plan.calls[first], mode="smem", smem_pattern=a, buffers=call.buffers, index=102 + j)
            for j in range(2)
        ]
    return replace(plan, calls=calls)


def diagnose(
    plan: ShapePlan,
    index: int,
    verdict: Verdict,
    repeat: ShapePlan,
    reply: CheckReply,
    buffers: Sequence[bytes],
    tolerance: Tolerance,
) -> Verdict:
    """The failure of call ``index`` explained by the calls of :func:`diagnosis_plan`, in this order: outputs
    that depend on earlier calls (inputs that passed the first time now fail), nondeterminism (identical calls,
    different outputs), a memo of the pointers (the same inputs pass at other addresses), a dependence on shared
    memory's earlier contents; else the deterministic explanation of :func:`_mismatch_detail` (``verdict``)."""
    failed = _repeat_failure(verdict, repeat, reply, buffers)
    if failed is not None:
        return failed
    cause = _failure_cause(_Repeats(repeat, buffers, tolerance))
    if cause is None:
        return verdict
    return Verdict("incorrect", f"{cause}; first failure {_where(plan, index)}: {verdict.detail}", index, verdict.kind)


def _repeat_failure(verdict: Verdict, repeat: ShapePlan, reply: CheckReply, buffers: Sequence[bytes]) -> Verdict | None:
    """``verdict`` with why the repeated calls gave nothing to read, or None when they all ran."""
    records = reply.get("calls", [])
    runs = len(repeat.calls)
    if (
        reply.get("ok")
        and len(records) >= runs
        and not any(r.get("error") for r in records[:runs])
        and len(buffers) >= runs * len(repeat.layouts)
    ):
        return None
    why = reply.get("error") or next(
        (r.get("error") or r.get("device_state") for r in records if r.get("error") or r.get("device_state")), None
    )
    return replace(
        verdict,
        detail=f"{verdict.detail} (repeating the call to name the cause failed after "
        f"{len(records)} of {runs} calls: {why or 'no reason given'})",
    )


@record(frozen=True)
class _Repeats:
    """The buffers of the calls of :func:`diagnosis_plan` after they ran, read run by run."""

    repeat: ShapePlan
    buffers: Sequence[bytes]
    tolerance: Tolerance

    @property
    def runs(self) -> int:
        return len(self.repeat.calls)

    def datas(self, run: int) -> list[bytes]:
        n = len(self.repeat.layouts)
        return list(self.buffers[run * n : (run + 1) * n])

    def payload(self, run: int) -> list[bytes]:
        """The output bytes of run ``run``."""
        lays = self.repeat.layouts
        datas = self.datas(run)
        return [datas[j][lay.start : lay.start + lay.nbytes] for j, lay in enumerate(lays) if lay.role != "in"]

    def wrong(self, run: int) -> Mismatch | None:
        """How run ``run``'s outputs differ from the expected, or None when they pass."""
        call = self.repeat.calls[run]
        return compare_outputs(
            self.repeat.layouts,
            self.datas(run),
            call.expected,
            self.tolerance,
            _poisons(self.repeat, call),
            scale_atol=call.dist == "large",
        )


def _failure_cause(rep: _Repeats) -> str | None:
    """The cause the repeated calls show (see :func:`diagnose`), or None when they show none."""
    moved = _REPEATS + 1
    if rep.runs == _REPEATS + 4:
        again = [rep.wrong(r) for r in (rep.runs - 2, rep.runs - 1)]
        if again[0] is not None and again[1] is not None:
            return (
                f"{_EARLIER}: the inputs of the first call, which gave the right outputs "
                f"then, give wrong outputs when repeated ({again[0].message})"
            )
    same, later, second = rep.payload(0), rep.payload(1), rep.wrong(1)
    if rep.wrong(0) is None and second is not None and all(rep.payload(r) == later for r in range(2, _REPEATS)):
        # right once in these buffers, then the same wrong outputs every time: state kept, not a race
        return (
            f"{_EARLIER}: repeated with the same inputs in the same buffers, the first call gave the right outputs "
            f"and every later one the same wrong outputs ({second.message})"
        )
    if any(rep.payload(r) != same for r in range(1, _REPEATS)):
        return (
            "nondeterministic: identical calls (same inputs, same shared-memory contents "
            "before the call) gave different outputs, a race between threads or blocks (a "
            "missing __syncthreads, a non-atomic update of one element from several "
            "blocks)"
        )
    if rep.wrong(0) is not None and rep.wrong(moved) is None:
        return (
            f"{_EARLIER}: the same inputs give the right outputs at other addresses and "
            f"wrong ones, every time, in the buffers of the earlier calls"
        )
    if rep.payload(_REPEATS) != same:
        return (
            "reads shared memory it never wrote: the same inputs give different outputs "
            f"depending on what shared memory held before the call (pre-filled with "
            f"0x{SMEM_PATTERNS[0]:08x}, then 0x{SMEM_PATTERNS[1]:08x})"
        )
    return None


def _call_problem(rec: CallRecord, mode: str, where: str, i: int, more: bool) -> Verdict | Literal["next"] | None:
    """What the worker's record of call ``i`` says went wrong before its outputs are read (device state, an error
    it returned or left unread, a failed capture, a crash), or ``"next"`` where the next call tells more."""
    rc = int(rec.get("rc") or 0)
    fatal = bool(rec.get("fatal"))
    if rec.get("device_state") and not fatal:
        return Verdict("rejected", f"changed device state: {rec['device_state']} {where}. {_STATE_RULE}", i, "state")
    if mode == "capture" and rc and rc not in CAPTURE_ERRORS and not fatal and more:
        return "next"
    if rc and rc not in CAPTURE_ERRORS and not fatal:
        # the call's own error (an invalid launch configuration, say), even where it also spoilt a capture
        return Verdict(
            "incorrect",
            f"the call {rec.get('error') or f'returned error {rc}'} {where}; the "
            "contract: return cudaSuccess after launching on the stream, and a CUDA "
            "error only for arguments it cannot handle",
            i,
            "returned",
        )
    if rec.get("launch_error") and not fatal:
        return Verdict(
            "incorrect",
            f"the call's launch failed {where}: {rec['launch_error']}, though the call returned cudaSuccess; the "
            "contract: launch on the stream and return what cudaGetLastError() says",
            i,
            "returned",
        )
    if mode in ("graph", "capture") and not fatal and (rec.get("capture_error") or rc in CAPTURE_ERRORS):
        why = rec.get("capture_error") or rec.get("error") or f"returned {rc}"
        return Verdict(
            "incorrect",
            f"work outside the given stream: capturing the call into a CUDA graph on its stream failed ({why}) "
            f"{where}. " + _STREAM_RULE,
            i,
            "stream",
        )
    if rec.get("error"):
        return Verdict("crashed", f"{rec['error']} {where}", i, "crash")
    return None


def shape_verdict(spec: KernelSpec, plan: ShapePlan, reply: CheckReply, buffers: Sequence[bytes]) -> Verdict | None:
    """The first failure in a worker's reply to :func:`check_request`, or None when every call passed."""
    n = len(plan.layouts)
    records = reply.get("calls", [])
    if not reply.get("ok", False):
        return Verdict("crashed", f"{reply.get('error', 'the worker failed')} at {plan.key}")
    for i, rec in enumerate(records):
        where = _where(plan, i)
        call = plan.calls[i]
        problem = _call_problem(rec, call.mode, where, i, i + 1 < len(records))
        if problem == "next":
            continue  # an error returned while capturing: the next call, not captured, returns the call's own
        if problem is not None:
            return problem
        datas = buffers[i * n : (i + 1) * n]
        if len(datas) != n:
            return Verdict("crashed", f"the worker returned no data {where}")
        if call.mode == "capture":
            continue  # nothing ran on the stream: only whether the capture worked counts
        for lay, data in zip(plan.layouts, datas, strict=True):
            found = check_guards(lay, data)
            if found is not None:
                return _mismatch_detail(plan, i, found)
        for lay, data in zip(plan.layouts, datas, strict=True):
            if lay.role == "in":
                found = check_unchanged(lay, data, call.inputs[lay.name])
                if found is not None:
                    return _mismatch_detail(plan, i, found)
        found = compare_outputs(
            plan.layouts,
            list(datas),
            call.expected,
            spec.tolerance,
            _poisons(plan, call),
            scale_atol=call.dist == "large",
        )
        if found is not None and call.downcasts:
            found = name_downcast(
                plan.layouts, list(datas), call.expected, call.downcasts, found, likely=call.dist == "precision"
            )
        if found is not None:
            return _mismatch_detail(plan, i, found)
    if len(records) < len(plan.calls):
        return Verdict("crashed", f"the worker stopped after {len(records)} of {len(plan.calls)} calls at {plan.key}")
    return None
