"""Every message between the evaluator and its children, as typed records both sides import.

The wire format is a JSON header plus raw buffers (:mod:`.protocol`), so each record is a ``TypedDict``: the
parent builds them (``checks``, ``timing``, ``bench_checks``, ``evaluator``), the worker reads them, and a type
checker holds both sides to one definition. Standard library only: the harness and the worker import it.

Requests (``op``): ``load``, ``check``, ``time``, ``save_parked``, ``compare`` (to the comparer process only),
``time_reference``, ``time_torch``, ``floors``, ``ping``, ``exit``; each reply has ``ok`` and, on failure, ``error``
(``fatal``/``exiting`` when the worker's CUDA context is gone). While a request runs the worker may send
:class:`Tick` messages (progress, so a hang shows in seconds). The sanitizer's job file is :class:`SanitizeJob`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:  # annotations are not evaluated at run time (PEP 563), so Python 3.10 needs nothing more
    from typing_extensions import NotRequired

__all__ = [
    "ArgItem",
    "ArrayAlloc",
    "ArrayRequest",
    "BenchFill",
    "BenchShapeRequest",
    "CallRecord",
    "CallRequest",
    "CheckReply",
    "CheckRequest",
    "CompareItem",
    "CompareReply",
    "CompareRequest",
    "FloorsReply",
    "FloorsRequest",
    "Hello",
    "LoadRequest",
    "Mode",
    "ParkedItem",
    "ParkedOutputs",
    "ReferenceShape",
    "ReferenceShapeReply",
    "Regime",
    "Reply",
    "Role",
    "SanitizeArray",
    "SanitizeJob",
    "SanitizeShape",
    "SaveItem",
    "SaveParkedRequest",
    "Tick",
    "TimeReferenceReply",
    "TimeReferenceRequest",
    "TimeReply",
    "TimeRequest",
    "TimeTorchReply",
    "TimeTorchRequest",
    "TimedShape",
    "TorchShapeReply",
]

Regime = Literal["back-to-back", "idle-gaps"]
"""How a ``time`` request samples (the manifest's ``timing-regime``): ``back-to-back``, calls queued one after
another (a CUDA graph of many for a short call); ``idle-gaps``, one call per sample after the GPU sat idle for
``idle_gap_us`` and the L2 was flushed, as a serving engine calls a kernel now and then."""

Role = Literal["in", "out", "inout"]
"""What the call does with an array: reads it, writes it, or both."""

Mode = Literal["direct", "capture", "graph", "smem", "tweak", "moved", "replay", "aligned", "concurrent", "after"]
"""How the worker makes one checking call (see ``checks.py``); ``tweak``, ``moved``, ``aligned`` and ``after`` run
as ``direct``; ``replay`` replays the graph the last ``graph`` call captured; two ``concurrent`` calls in a row run
at once, on two streams."""


class ArgItem(TypedDict, total=False):
    """One argument of the entry point: the ``array``-th array argument's pointer, or a ``scalar`` value."""

    array: int
    scalar: int | float | bool


class Reply(TypedDict):
    """What every reply carries."""

    ok: bool
    error: NotRequired[str]
    fatal: NotRequired[bool]
    exiting: NotRequired[bool]


class Tick(TypedDict):
    """Progress inside a request (a shape or a batch of samples done)."""

    tick: int


class Hello(TypedDict):
    """The worker's first message: the device it has."""

    ok: bool
    device: str
    capability: list[int]
    sm_count: int
    l2_bytes: int
    memory: int
    smem_optin: int
    clock_khz: int
    driver: int
    runtime: int
    cupy: str
    pid: int


class LoadRequest(TypedDict):
    """dlopen one candidate library and bind its entry point."""

    op: Literal["load"]
    lib: str
    path: str
    entry: str
    argtypes: list[str]


# -- check: one shape's calls into the same buffers ------------------------------------------------------------
class ArrayAlloc(TypedDict):
    """One array's allocation: ``total`` bytes filled with ``guard_byte``, the array at ``start``."""

    total: int
    start: int
    nbytes: int
    guard_byte: int


class CallRequest(TypedDict):
    """One call of a ``check`` request: inputs (array index → buffer index), outputs' poison (hex), mode."""

    mode: Mode
    inputs: dict[str, int]
    poison: dict[str, str]
    smem_pattern: int | None
    buffers: int
    """Which allocations: 0, 1 (the same layout at addresses the library was never handed), 2 (each array at a
    256-byte-aligned address, as cudaMalloc and PyTorch give)."""


class CheckRequest(TypedDict):
    op: Literal["check"]
    lib: str
    args: list[ArgItem]
    calls: list[CallRequest]
    arrays: list[ArrayAlloc]


class CallRecord(TypedDict):
    """What one checking call did (every allocation's bytes follow as buffers)."""

    rc: int
    error: str | None
    capture_error: str | None
    launch_error: NotRequired[str | None]
    """A launch error the call left unread in its library's runtime (:meth:`~.worker.Worker.launch_error`)."""
    device_state: NotRequired[str | None]
    fatal: NotRequired[bool]
    seconds: NotRequired[float]
    """The call's wall time in the worker: uploads, the call, the device idle and every allocation read back
    (statistics only: the candidate shares the worker's process, so nothing is judged by it)."""


class CheckReply(Reply):
    calls: NotRequired[list[CallRecord]]


# -- time: samples at every benchmark shape, then the checks of what the timed calls left ---------------------
class ArrayRequest(TypedDict):
    """An array argument as the worker allocates it at one shape."""

    name: str
    dtype: str
    role: Role
    shape: list[int]
    count: int
    itemsize: int


class BenchFill(TypedDict):
    """One input set: per array, a file of its bytes (``in``/``inout``) or None and a poison (``out``)."""

    files: list[str | None]
    poison: list[str | None]


class BenchShapeRequest(TypedDict):
    arrays: list[ArrayRequest]
    args: list[ArgItem]
    sets: list[BenchFill]
    tweak: BenchFill
    out_dir: str


class TimeRequest(TypedDict):
    op: Literal["time"]
    lib: str
    budget_s: float
    min_samples: int
    max_samples: int
    graph_below_us: float
    shapes: list[BenchShapeRequest]
    stop_error: NotRequired[float]
    """Sampling a shape stops once its median's relative standard error is this small
    (:mod:`r1build.selection.noise`)."""
    park: NotRequired[bool]
    """Park what the timed calls left (:mod:`.gpu_compare`) instead of writing it to files."""
    regime: NotRequired[Regime]
    """How the samples are made (default ``back-to-back``); ``idle-gaps`` runs no checks after the samples (the
    back-to-back timing of the same library checked what its calls left)."""
    idle_gap_us: NotRequired[float]
    """With ``idle-gaps``: how long the GPU sits idle before each sample (the host sleeps; default 1000)."""


class TimedShape(TypedDict):
    """The samples of one benchmark shape and the checks of the outputs the timed calls left."""

    samples_us: list[float]
    mode: Literal["graph", "events"]
    regime: NotRequired[Regime]
    """The regime the samples were made in (absent: ``back-to-back``)."""
    calls_per_sample: int
    sets: int
    estimate_us: float
    launch_overhead_us: float
    empty_kernel_us: float
    big_sets: bool
    outputs: list[list[str | None]]
    seconds: dict[str, float]
    """Where the worker's time went: ``sets`` (uploading the input sets), ``samples`` (estimates, warm-up and the
    timed samples), ``checks`` (the calls after them, their outputs parked or written to files, the capture), and
    within ``checks``: ``check_outputs`` (the outputs each input set holds, kept), ``check_lazy`` (the lazy-output
    call), ``check_tweak``, ``check_capture`` and ``check_replays`` (one captured graph replayed)."""
    tweak_outputs: NotRequired[list[str | None]]
    judged: NotRequired[list[list[bool]]]
    """Per input set, per array: found clear on the GPU by the comparer (no file; set by the parent)."""
    tweak_judged: NotRequired[list[bool]]
    """The same for the call on the tweaked set."""
    guarded: NotRequired[bool]
    """Every array of the shape ended where unmapped memory begins (:mod:`.guarded`): a read past the end faults."""
    extra_outputs: NotRequired[list[list[str | None]]]
    """Per call of :data:`~.gpu_compare.EXTRA_CALLS` (the lazy-output call, the replays), what it left, as
    ``outputs``."""
    extra_judged: NotRequired[list[list[bool]]]
    """The same as ``judged`` for them."""
    extra_error: NotRequired[str]
    """Why the replays could not be made (the capture for them failed, or returned an error)."""
    check_error: NotRequired[str]
    capture_error: NotRequired[str | None]
    capture_rc: NotRequired[int]
    launch_error: NotRequired[str | None]
    """A launch error the captured call left unread in its library's runtime."""
    device_state: NotRequired[str | None]


class ParkedItem(TypedDict):
    """Where one output of the timed calls lies in the worker's parked allocation (:func:`.gpu_compare.park_layout`)."""

    shape: int
    set: int
    """The input set; the number of sets means the call on the tweaked set, and above it the calls of
    :data:`~.gpu_compare.EXTRA_CALLS`."""
    array: int
    """Index among the shape's arrays."""
    offset: int
    nbytes: int
    dtype: str


class ParkedOutputs(TypedDict):
    """The worker's parked allocation: a CUDA IPC handle (hex) and its size."""

    handle: str
    size: int


class TimeReply(Reply):
    shapes: NotRequired[list[TimedShape]]
    parked: NotRequired[ParkedOutputs]
    """With ``park``: where the outputs are (the ``outputs`` paths are then None)."""


# -- compare (sent to the comparer process only) and save_parked (to the worker) --------------------------------------
class CompareItem(TypedDict):
    offset: int
    nbytes: int
    dtype: str
    expected: str
    """The reference's output, a ``.npy`` file."""


class CompareRequest(TypedDict):
    op: Literal["compare"]
    handle: str
    size: int
    items: list[CompareItem]
    rtol: float
    atol: float


class CompareReply(Reply):
    clear: NotRequired[list[bool]]
    """Per item: passes the fast rule; False sends it to the CPU."""
    note: NotRequired[str]
    """Why nothing could be judged (the parked allocation cannot be mapped here)."""


class SaveItem(TypedDict):
    offset: int
    nbytes: int
    path: str


class SaveParkedRequest(TypedDict):
    op: Literal["save_parked"]
    items: list[SaveItem]


# -- time_reference: the numpy reference on cupy arrays ---------------------------------------------------------
class ReferenceShape(TypedDict):
    arrays: list[ArrayRequest]
    scalars: dict[str, int | float]


class TimeReferenceRequest(TypedDict):
    op: Literal["time_reference"]
    root: str
    reference: str
    shapes: list[ReferenceShape]
    rebind: NotRequired[bool]
    """False: ``reference`` is a gpu-reference, written for cupy, called as it is (default True: the numpy
    reference with its ``numpy`` rebound to cupy)."""
    warm: NotRequired[bool]
    """True: only call the reference at each shape, timing nothing, so the kernels cupy compiles for it at the first
    call are compiled before the GPU is taken alone to time it (each shape's reply then has no samples)."""


class ReferenceShapeReply(TypedDict, total=False):
    samples_us: list[float]
    error: str


class TimeReferenceReply(Reply):
    shapes: NotRequired[list[ReferenceShapeReply]]


# -- time_torch: the torch reference, eager and under torch.compile ---------------------------------------------
class TimeTorchRequest(TypedDict):
    op: Literal["time_torch"]
    root: str
    reference: str
    """``module:function`` on torch tensors (the kernel's ``torch-reference``)."""
    shapes: list[ReferenceShape]
    compile: bool
    """Whether to time ``torch.compile`` of it too (eager always)."""


class TorchShapeReply(TypedDict, total=False):
    eager_us: list[float]
    compile_us: list[float]
    eager_error: str
    compile_error: str


class TimeTorchReply(Reply):
    shapes: NotRequired[list[TorchShapeReply]]


# -- floors: the device's bandwidth and fp32 peak ---------------------------------------------------------------
class FloorsRequest(TypedDict):
    op: Literal["floors"]


class FloorsReply(Reply):
    bandwidth_bps: NotRequired[float]
    fp32_flops: NotRequired[float]
    sgemm_flops: NotRequired[float]
    fma_flops: NotRequired[float]


# -- the sanitizer harness's job file ----------------------------------------------------------------------------
class SanitizeArray(TypedDict):
    """One array of a sanitized shape: its size, and the file of its input bytes (``in``/``inout``)."""

    nbytes: int
    input: str | None


class SanitizeShape(TypedDict):
    key: str
    arrays: list[SanitizeArray]
    args: list[ArgItem]


class SanitizeJob(TypedDict):
    """One compute-sanitizer run: every library in ``libs`` called at every shape, one after another."""

    libs: list[str]
    """The candidates' shared libraries, in the order the harness calls them (empty when ``queue`` is given)."""
    queue: NotRequired[str]
    """A queue folder the harness takes libraries from instead, sharing it with other runs of the same tool (see
    :mod:`.harness`)."""
    limit: NotRequired[int]
    """With ``queue``: the most libraries this run takes (0 or missing: no limit)."""
    entry: str
    argtypes: list[str]
    shapes: list[SanitizeShape]
    token: str
    """A fresh random word the harness prints in its markers: output that lacks it was not the harness's."""
    parent: NotRequired[int]
    """The evaluator's process id: a harness held while it is gone ends (nobody would lift the hold)."""
    hold: NotRequired[str]
    """A file whose existence stops the harness before its next GPU work (the evaluator is timing); it holds the
    hold's generation, which the harness prints in its ``HELD`` marker."""
