"""Checks at the benchmark shapes, where candidates are timed (the correctness plan of :mod:`.checks` runs at the
test shapes only).

A kernel can be right at the small test shapes and skip its work above some size, memoize results between the
timed calls, or behave only while its stream is captured. So every benchmark shape gets, per candidate:

1. input sets made here (not random bytes on the GPU), one reference result per set, computed once per kernel and
   shared by its candidates; the timed calls rotate over these sets, and the outputs they leave in every set are
   checked against the reference (``inout`` arrays: one more call on fresh inputs);
2. one call on the first set with one input element changed and the same pointers (a memo comes back stale);
3. a capture of the call into a CUDA graph on its stream (no legacy stream, synchronization or allocation at any
   size);
4. the device state (limits, the default memory pool) unchanged;
5. a time that the hardware allows: a median of zero (or negative, or not finite) is no time, and one below the
   memory floor (the bytes the call must move over the measured bandwidth) by more than the floor's uncertainty
   and the median's error (:func:`floor_margin`; :data:`IMPLAUSIBLE_WARM` times for calls timed warm, as a graph
   of back-to-back calls) is rejected, naming the ratio.

Inputs travel to the worker as files in a directory of the job. The reference's outputs are saved there too. What
the timed calls left is judged on the GPU by the comparer process where there is one (:mod:`.child.gpu_compare`: only a
pass is taken from it); everything else comes back as files too, judged in another process
(:meth:`BenchPlan.for_comparing`: the plan without its arrays), which maps the reference's outputs and copies the
worker's, read only from beneath the worker's folder (:func:`_mapped`).
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from ...convert import field, record, replace
from ...manifest.model import Arg, KernelSpec
from ...sandbox.files import open_beneath
from ...selection.noise import median_error
from ..child.messages import BenchFill, BenchShapeRequest, TimedShape
from ..child.protocol import CAPTURE_ERRORS
from ..timing.floors import DeviceFloors, bytes_moved, shape_key
from ..timing.stats import SampleStats, array_requests
from .compare import CHUNK, Mismatch, check_unchanged, compare_output
from .inputs import ArrayLayout, array_shape, generate_inputs, numpy_dtype, poison_bytes
from .plan import Verdict, arg_items, run_reference, tweak_one

__all__ = [
    "BANDWIDTH_ERROR",
    "IMPLAUSIBLE_WARM",
    "BenchPlan",
    "BenchShape",
    "bench_verdict",
    "floor_margin",
    "implausible",
    "plan_bench",
    "rotation_for",
]

BANDWIDTH_ERROR = 0.03
"""The uncertainty of the measured bandwidth as a floor: it is a device-to-device copy's, and a kernel that only
reads (or reads more than it writes) streams a few percent faster."""
IMPLAUSIBLE_WARM = 4.0
"""A median more than this many times faster than the memory floor is not a measurement of the work, for a call
timed as a CUDA graph of back-to-back calls (under 10 us), whose inputs may be read from L2, which is a few times
faster than device memory."""


@record(frozen=True)
class BenchSet:
    """One input set of a benchmark shape and the reference's outputs for it."""

    inputs: dict[str, NDArray[Any]]
    expected: dict[str, NDArray[Any]]
    files: list[str | None]
    """Per array argument: the file holding its input bytes (None for ``out`` arrays, which are poisoned)."""
    poison: int
    """Poison index of the ``out`` arrays."""
    expected_files: dict[str, str] = field(default_factory=dict)
    """Per ``out``/``inout`` array: the reference's output saved as a ``.npy`` file (read where ``expected`` is
    left out)."""


@record(frozen=True)
class BenchShape:
    """Everything checked at one benchmark shape."""

    sizes: dict[str, int]
    key: str
    sets: list[BenchSet]
    """The input sets the timed calls rotate over."""
    tweak: BenchSet
    """The first set with one element changed."""


@record(frozen=True)
class BenchPlan:
    """The benchmark-shape checks of one kernel on GPUs of one L2 size."""

    shapes: list[BenchShape]
    directory: Path

    def for_comparing(self) -> BenchPlan:
        """This plan without its arrays (the files stay): small to send to a comparing process, which reads the
        reference's outputs from their files."""

        def light(bench_set: BenchSet) -> BenchSet:
            return replace(bench_set, inputs={}, expected={})

        return replace(
            self,
            shapes=[replace(s, sets=[light(b) for b in s.sets], tweak=light(s.tweak)) for s in self.shapes],
        )


def rotation_for(set_bytes: int, l2_bytes: int) -> int:
    """How many input sets the timed calls rotate over: two when one set is at least twice the L2 (each launch
    then starts cold), else enough to cover three times the L2, at most four."""
    set_bytes = max(1, set_bytes)
    if set_bytes >= 2 * l2_bytes:
        return 2
    return max(1, min(4, math.ceil(3 * l2_bytes / set_bytes)))


def _write_set(spec: KernelSpec, directory: Path, tag: str, inputs: Mapping[str, NDArray[Any]]) -> list[str | None]:
    files: list[str | None] = []
    for arg in spec.args:
        if not arg.is_array:
            continue
        if arg.role == "out":
            files.append(None)
            continue
        path = directory / f"{tag}-{arg.name}.bin"
        np.ascontiguousarray(inputs[arg.name]).tofile(path)
        files.append(str(path))
    return files


def _write_expected(
    spec: KernelSpec, directory: Path, tag: str, expected: Mapping[str, NDArray[Any]]
) -> dict[str, str]:
    files = {}
    for arg in spec.args:
        if arg.is_array and arg.role != "in":
            path = directory / f"{tag}-expected-{arg.name}.npy"
            np.save(path, np.ascontiguousarray(expected[arg.name]))
            files[arg.name] = str(path)
    return files


def plan_bench(
    spec: KernelSpec,
    reference: Callable[..., Any],
    l2_bytes: int,
    directory: Path,
    *,
    seed: int = 0,
    expected_directory: Path | None = None,
) -> BenchPlan:
    """Input sets, reference outputs and input files of every benchmark shape (the reference runs here): the inputs
    in ``directory``, which the workers read, the reference's outputs in ``expected_directory`` (``directory`` where
    None), which the evaluator keeps from confined workers (a candidate that read them could copy the answers)."""
    directory.mkdir(parents=True, exist_ok=True)
    kept = expected_directory or directory
    kept.mkdir(parents=True, exist_ok=True)
    shapes = []
    for si, sizes in enumerate(spec.bench_shapes):
        set_bytes = sum(a["count"] * a["itemsize"] for a in array_requests(spec, sizes))
        sets = []
        for k in range(rotation_for(set_bytes, l2_bytes)):
            inputs = generate_inputs(spec, sizes, "signed", seed * 7919 + 1000 * si + k + 1)
            expected = run_reference(reference, spec, sizes, inputs)
            tag = f"s{si}-set{k}"
            files = _write_set(spec, directory, tag, inputs)
            sets.append(BenchSet(inputs, expected, files, 0, _write_expected(spec, kept, tag, expected)))
        tweaked = tweak_one(sets[0].inputs, seed * 7919 + 1000 * si + 999)
        tweak_expected = run_reference(reference, spec, sizes, tweaked)
        tweak = BenchSet(
            tweaked,
            tweak_expected,
            _write_set(spec, directory, f"s{si}-tweak", tweaked),
            1,
            _write_expected(spec, kept, f"s{si}-tweak", tweak_expected),
        )
        shapes.append(BenchShape(dict(sizes), shape_key(spec, sizes), sets, tweak))
    return BenchPlan(shapes, directory)


def _fill(spec: KernelSpec, bench_set: BenchSet) -> BenchFill:
    outs = [a for a in spec.args if a.is_array]
    return {
        "files": bench_set.files,
        "poison": [
            poison_bytes(a.dtype, bench_set.poison).hex() if f is None else None
            for a, f in zip(outs, bench_set.files, strict=True)
        ],
    }


def shape_requests(spec: KernelSpec, plan: BenchPlan, out_dir: Path) -> list[BenchShapeRequest]:
    """The ``shapes`` of a worker ``time`` request: arrays, arguments, input sets, the tweaked set; the worker leaves
    what the calls left in ``out_dir``, which the caller made (beneath the worker's folder: through no link the worker
    planted, :func:`~r1build.sandbox.files.make_beneath`)."""
    return [
        {
            "arrays": array_requests(spec, shape.sizes),
            "args": arg_items(spec, shape.sizes),
            "sets": [_fill(spec, s) for s in shape.sets],
            "tweak": _fill(spec, shape.tweak),
            "out_dir": str(out_dir),
        }
        for shape in plan.shapes
    ]


def _mapped(path: str, within: Path | None, limit: int) -> memoryview:
    """At most ``limit`` bytes of a file the worker left, copied into memory of this process's own (anonymous pages,
    no interpreter object of hundreds of MB). The worker names the file and writes its folder, and goes on running:
    the file is taken only as a regular file beneath ``within`` (the worker's folder) reached through no link
    (:func:`~r1build.sandbox.files.open_beneath`), never a file of this process's user that a planted link or a path
    in the reply names, nor a FIFO to block on (without ``within``, a reply a test made: the file itself is still no
    link or FIFO); and it is copied, not mapped, since a worker that cut the file short under a mapping would kill
    this process (SIGBUS)."""
    where = Path(path)
    fd = open_beneath(within, where) if within is not None else open_beneath(where.parent, where.name)
    with os.fdopen(fd, "rb", buffering=0) as f:
        size = min(os.fstat(f.fileno()).st_size, limit)
        if size == 0:
            return memoryview(b"")
        copy = memoryview(mmap.mmap(-1, size))
        got = 0
        while got < size:
            n = f.readinto(copy[got:])
            if not n:
                break
            got += n
        return copy[:got]


def _input_changed(
    arg: Arg, bench_set: BenchSet, paths: Sequence[str | None], j: int, within: Path | None
) -> Mismatch | None:
    """Whether the ``in`` array ``arg`` (the ``j``-th array) no longer holds the set's input after the calls, where
    the worker sent its bytes (``paths[j]``; None: it did not)."""
    path = paths[j] if j < len(paths) else None
    uploaded_file = bench_set.files[j] if j < len(bench_set.files) else None
    if path is None or uploaded_file is None:
        return None
    dtype = numpy_dtype(arg.dtype)
    uploaded = bench_set.inputs.get(arg.name)
    if uploaded is None:
        uploaded = np.fromfile(uploaded_file, dtype=dtype)
    try:
        data = _mapped(path, within, np.asarray(uploaded).nbytes + 1)
    except OSError as exc:
        return Mismatch("unwritten", f"the bytes of {arg.name} could not be read where the worker left them: {exc}")
    shape = tuple(np.shape(uploaded))
    layout = ArrayLayout(
        name=arg.name, role="in", dtype=arg.dtype, shape=shape, nbytes=len(data), front=0, offset=0, back=0
    )
    if len(data) != np.asarray(uploaded).nbytes:
        return Mismatch("input", f"{arg.name} (role in) came back with {len(data)} bytes, not its {uploaded.nbytes}")
    return check_unchanged(layout, bytes(data), np.asarray(uploaded))


def _compare(
    spec: KernelSpec,
    bench_set: BenchSet,
    paths: Sequence[str | None],
    judged: Sequence[bool] = (),
    chunk: int = CHUNK,
    within: Path | None = None,
) -> Mismatch | None:
    """The first output of one call that the rules find wrong; those the comparer process found clear on the GPU
    (``judged``) are not read again. An output that came back neither way is a mismatch."""
    arrays = [a for a in spec.args if a.is_array]
    for j, arg in enumerate(arrays):  # an input the calls wrote into is named before the outputs it spoils
        changed = _input_changed(arg, bench_set, paths, j, within) if arg.role == "in" else None
        if changed is not None:
            return changed
    for j, arg in enumerate(arrays):
        if arg.role == "in" or (j < len(judged) and judged[j]):
            continue
        path = paths[j] if j < len(paths) else None
        if path is None:
            return Mismatch("unwritten", f"no output of {arg.name} came back from the worker")
        expected = bench_set.expected.get(arg.name)
        if expected is None:
            expected = np.load(bench_set.expected_files[arg.name], mmap_mode="r")
        shape = tuple(np.shape(expected))
        want = math.prod(shape) * numpy_dtype(arg.dtype).itemsize
        try:
            data = _mapped(path, within, want + 1)
        except OSError as exc:
            return Mismatch("unwritten", f"the output of {arg.name} could not be read where the worker left it: {exc}")
        if len(data) != want:
            return Mismatch("unwritten", f"{arg.name} came back with {len(data)} bytes, not its {want}")
        layout = ArrayLayout(
            name=arg.name, role=str(arg.role), dtype=arg.dtype, shape=shape, nbytes=len(data), front=0, offset=0, back=0
        )
        poison = poison_bytes(arg.dtype, bench_set.poison) if arg.role == "out" else b""
        found = compare_output(layout, data, expected, spec.tolerance, poison, chunk=chunk)
        if found is not None:
            return found
    return None


CUDA_ERRORS = {
    1: "cudaErrorInvalidValue",
    2: "cudaErrorMemoryAllocation",
    9: "cudaErrorInvalidConfiguration",
    98: "cudaErrorInvalidDeviceFunction",
    209: "cudaErrorNoKernelImageForDevice",
    400: "cudaErrorInvalidResourceHandle",
    700: "cudaErrorIllegalAddress",
    701: "cudaErrorLaunchOutOfResources",
    719: "cudaErrorLaunchFailure",
    720: "cudaErrorCooperativeLaunchTooLarge",
}
"""Names of the CUDA runtime errors a launch returns most often (``cudaError_t``), for the codes the worker sends
bare."""


def _launch_failed(reply: TimedShape, where: str) -> Verdict | None:
    """The call's own failure at the capture probe: what the worker read from ``cudaGetLastError`` after it
    (``launch_error``; a launch that fails, an invalid configuration say, also invalidates the capture, which
    then says only that), or the call's return code where it is not a capture error."""
    said = cast(Mapping[str, Any], reply).get("launch_error")
    if said:
        return Verdict("incorrect", f"the call's launch failed {where}: {said}", kind="returned")
    rc = int(reply.get("capture_rc") or 0)
    if rc and rc not in CAPTURE_ERRORS:
        name = CUDA_ERRORS.get(rc, "a CUDA error")
        return Verdict(
            "incorrect",
            f"the call failed {where}: returned {name} ({rc}) when captured on its stream (a launch error, not "
            "work outside the stream)",
            kind="returned",
        )
    return None


def bench_verdict(
    spec: KernelSpec, plan: BenchPlan, replies: Sequence[TimedShape], *, chunk: int = CHUNK, within: Path | None = None
) -> Verdict | None:
    """The first failure among the checks of every benchmark shape (see the module docstring), or None; outputs are
    compared ``chunk`` elements at a time (:data:`~.compare.CACHED_CHUNK` in a process judging alone), read only
    from beneath ``within``, the worker's folder (:func:`_mapped`)."""
    for shape, reply in zip(plan.shapes, replies, strict=False):
        where = f"at the benchmark shape {shape.key}"
        if reply.get("device_state"):
            return Verdict("rejected", f"changed device state {where}: {reply['device_state']}", kind="state")
        failed = _launch_failed(reply, where)
        if failed is not None:
            return failed
        rc = int(reply.get("capture_rc") or 0)
        if reply.get("capture_error") or rc in CAPTURE_ERRORS:
            why = reply.get("capture_error") or f"returned {rc}"
            return Verdict(
                "incorrect",
                f"work outside the given stream: capturing the call into a CUDA graph on "
                f"its stream failed {where} ({why}), though it passed at the test shapes",
                kind="stream",
            )
        if reply.get("check_error"):
            return Verdict("incorrect", f"the call {reply['check_error']} {where}", kind="returned")
        outputs = reply.get("outputs") or []
        if len(outputs) < len(shape.sets):
            return Verdict("crashed", f"the worker returned no outputs {where}")
        judged = reply.get("judged") or []
        for k, (bench_set, paths) in enumerate(zip(shape.sets, outputs, strict=False)):
            found = _compare(spec, bench_set, paths, judged[k] if k < len(judged) else (), chunk, within)
            if found is not None and found.kind == "input":
                return Verdict(
                    "incorrect",
                    f"the timed calls {where} (input set {k + 1} of {len(shape.sets)}) {found.message}",
                    kind="input",
                )
            if found is not None:
                return Verdict(
                    "incorrect",
                    f"wrong outputs of the timed calls {where} (input set {k + 1} of "
                    f"{len(shape.sets)}): {found.message}",
                    kind=found.kind,
                )
        tweak = reply.get("tweak_outputs") or []
        found = _compare(spec, shape.tweak, tweak, reply.get("tweak_judged") or (), chunk, within)
        if found is not None and found.kind == "input":
            return Verdict("incorrect", f"a call on fresh inputs {where} {found.message}", kind="input")
        if found is not None:
            return Verdict(
                "incorrect",
                f"the result depends on earlier calls {where}: with one input element "
                f"changed and the same pointers the outputs are wrong ({found.message}); "
                "a memo of earlier results?",
                kind=found.kind,
            )
    return None


def floor_margin(spec: KernelSpec, sizes: Mapping[str, int], l2_bytes: int) -> float:
    """The memory floor's own relative uncertainty at ``sizes`` for a call timed cold (L2 flushed before it): the
    bandwidth's (:data:`BANDWIDTH_ERROR`), plus the written bytes the L2 may still hold when the call ends, which
    then reach memory after the timing (the L2's share of them: its size times their share of the traffic)."""
    moved = bytes_moved(spec, sizes)
    if moved <= 0:
        return BANDWIDTH_ERROR
    written = sum(
        int(np.prod(array_shape(a, sizes), dtype=np.int64)) * numpy_dtype(a.dtype).itemsize
        for a in spec.args
        if a.is_array and a.role != "in"
    )
    held = min(written, l2_bytes * written / moved)
    return BANDWIDTH_ERROR + held / moved


def _not_a_time(spec: KernelSpec, sizes: Mapping[str, int], median: float) -> Verdict:
    return Verdict(
        "rejected",
        f"timed at {median:.4g} us at the benchmark shape {shape_key(spec, sizes)}: that is not a time (a call "
        "that does its work on the given stream takes some); the timing saw none of its work",
        kind="implausible",
    )


def implausible(
    spec: KernelSpec,
    stats: Sequence[SampleStats],
    floors: DeviceFloors | None,
    warm: Sequence[bool] = (),
    *,
    l2_bytes: int = 0,
) -> Verdict | None:
    """A rejection when a benchmark shape's median is not a time (zero, negative, not finite: with or without
    ``floors``) or is below the memory floor by more than the floor's uncertainty (:func:`floor_margin`, for a
    GPU of ``l2_bytes`` of L2) and three standard errors of the median (:func:`~r1build.selection.noise.median_error`);
    a shape timed warm (``warm[i]``: a graph of back-to-back calls whose inputs may come from L2, which no
    measured floor covers) only below :data:`IMPLAUSIBLE_WARM` times faster than the floor. The arithmetic
    floor is left out: tensor cores and lower precisions can beat the fp32 peak."""
    for i, (sizes, s) in enumerate(zip(spec.bench_shapes, stats, strict=False)):
        median = s.median_us
        if not (math.isfinite(median) and median > 0):
            return _not_a_time(spec, sizes, median)
        if floors is None:
            continue
        moved = bytes_moved(spec, sizes)
        floor = moved / floors.bandwidth_bps * 1e6
        if i < len(warm) and warm[i]:
            lowest = 1.0 / IMPLAUSIBLE_WARM
            allowed = f"a call timed warm, its inputs in L2, may reach {lowest:.2g}x"
        else:
            margin = floor_margin(spec, sizes, l2_bytes) + 3.0 * median_error(s.spread, s.samples)
            lowest = 1.0 - margin
            allowed = f"the floor's uncertainty and the median's error allow down to {lowest:.2f}x"
        if median < floor * lowest:
            return Verdict(
                "rejected",
                f"timed at {median / floor:.2g}x the memory floor at the benchmark shape {shape_key(spec, sizes)} "
                f"({median:.4g} us against {floor:.4g} us): faster than the hardware allows, so the timing did not "
                f"see all of its work (the {moved} bytes the call must move take {floor:.4g} us at the measured "
                f"{floors.bandwidth_bps / 1e9:.0f} GB/s; {allowed})",
                kind="implausible",
            )
    return None
