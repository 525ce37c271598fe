"""The correctness plan and the verdict on worker replies, from bytes built here (no GPU)."""

from __future__ import annotations

from typing import Any

import numpy as np

from r1build.evaluate.correctness.inputs import GUARD_BYTE, poison_bytes
from r1build.evaluate.correctness.plan import (
    ShapePlan,
    Verdict,
    arg_codes,
    arg_items,
    check_request,
    diagnose,
    diagnosis_plan,
    needs_diagnosis,
    part_of,
    plan_checks,
    run_reference,
    shape_verdict,
)
from r1build.manifest import KernelSpec, Manifest, load_reference


def _plan(manifest: Manifest, name: str) -> tuple[KernelSpec, list[ShapePlan]]:
    spec = manifest.kernel(name)
    return spec, plan_checks(spec, load_reference(manifest.root, spec.reference), seed=3)


def _allocs(plan: ShapePlan, call: int, outputs: dict[str, np.ndarray[Any, Any]] | None = None) -> list[bytes]:
    """What a correct kernel leaves in every allocation after ``call``."""
    c = plan.calls[call]
    out = []
    for lay in plan.layouts:
        data = bytearray([GUARD_BYTE]) * lay.total
        value = c.inputs[lay.name] if lay.role == "in" else (outputs or c.expected)[lay.name]
        raw = np.ascontiguousarray(value).tobytes()
        data[lay.start : lay.start + len(raw)] = raw
        out.append(bytes(data))
    return out


def _reply(plan: ShapePlan, calls: int | None = None, **first: Any) -> Any:
    """The part of a worker's check reply (:class:`~r1build.evaluate.child.messages.CheckReply`) the verdict reads."""
    n = len(plan.calls) if calls is None else calls
    records = [{"rc": 0, "error": None, "capture_error": None} for _ in range(n)]
    records[-1].update(first)
    return {"ok": True, "calls": records}


def test_plan_covers_every_shape_and_mode(root_manifest: Manifest) -> None:
    spec, plans = _plan(root_manifest, "softmax_rows")
    assert [p.key for p in plans] == ["rows=1,cols=1", "rows=3,cols=97", "rows=17,cols=1000", "rows=5,cols=4099"]
    modes = [c.mode for c in plans[0].calls]
    base = ["capture", "direct", "direct", "direct", "direct", "tweak", "moved", "graph"]
    assert modes == [*base, "aligned", "aligned", "aligned", "aligned", "smem", "smem", "direct"]
    assert [c.dist for c in plans[1].calls if c.mode == "direct"] == [
        "signed", "large", "ties", "denormal", "precision"
    ]  # fmt: skip
    first = plans[2].calls[0].inputs["x"]
    assert not any(np.array_equal(first, c.inputs["x"]) for c in plans[2].calls[1:])
    calls = plans[2].calls
    assert np.array_equal(calls[6].inputs["x"], calls[1].inputs["x"]) and calls[6].buffers == 1
    assert int((calls[5].inputs["x"] != calls[4].inputs["x"]).sum()) == 1  # one element changed, same buffers
    header, buffers = check_request(spec, plans[1], "lib")
    assert [c["buffers"] for c in header["calls"]] == [0, 0, 0, 0, 0, 0, 1, 0, 2, 2, 2, 2, 0, 0, 0]
    assert len({c["poison"]["1"] for c in header["calls"]}) == len(plans[1].calls)  # a poison per call
    assert header["args"] == [{"array": 0}, {"array": 1}, {"scalar": 3}, {"scalar": 97}]
    assert len(buffers) == len(plans[1].calls)  # one input array per call
    assert header["calls"][0]["poison"] == {"1": poison_bytes("float32", 0).hex()}
    assert arg_codes(spec) == ["ptr", "ptr", "i32", "i32"]
    assert arg_items(root_manifest.kernel("rmsnorm"), {"rows": 2, "cols": 3})[-1]["scalar"] == np.float32(1e-6)


def test_the_shared_memory_fills_run_apart_from_the_other_calls(root_manifest: Manifest) -> None:
    # a context switch between the fill and the call can clear shared memory, so the fills run with the GPU to
    # themselves (in the timing phase) and every other call beside other work
    spec, plans = _plan(root_manifest, "sum_all")
    for plan in plans:
        shared, alone = part_of(plan, "shared"), part_of(plan, "alone")
        assert [c.mode for c in alone.calls] == ["smem", "smem"]
        assert "smem" not in [c.mode for c in shared.calls]
        assert sorted(c.index for c in shared.calls + alone.calls) == [c.index for c in plan.calls]
        assert part_of(plan, "all") == plan
        header, _ = check_request(spec, alone, "lib")
        whole, _ = check_request(spec, plan, "lib")
        # the same poisons and fills as in the whole sequence
        assert [(c["poison"], c["smem_pattern"]) for c in header["calls"]] == [
            (c["poison"], c["smem_pattern"]) for c in whole["calls"] if c["mode"] == "smem"
        ]
        good = [b for i in range(len(alone.calls)) for b in _allocs(alone, i)]
        assert shape_verdict(spec, alone, _reply(alone), good) is None
        bad = list(good)
        bad[-1] = bytes(len(bad[-1]))  # the second fill's call left zeros everywhere
        verdict = shape_verdict(spec, alone, _reply(alone), bad)
        assert verdict is not None and verdict.call == 1 and "shared memory" in verdict.detail


def test_correct_bytes_pass_and_each_fault_is_named(root_manifest: Manifest) -> None:
    spec, plans = _plan(root_manifest, "silu_mul")
    plan = plans[1]  # n = 31
    good = [b for i in range(len(plan.calls)) for b in _allocs(plan, i)]
    assert shape_verdict(spec, plan, _reply(plan), good) is None

    # an out-of-bounds write into the back guard of `out` at call 3 (large inputs)
    bad = list(good)
    out_lay = plan.layouts[2]
    raw = bytearray(bad[2 * 3 + 2])
    raw[out_lay.start + out_lay.nbytes + 8] = 0
    bad[2 * 3 + 2] = bytes(raw)
    verdict = shape_verdict(spec, plan, _reply(plan), bad)
    assert verdict is not None and verdict.status == "incorrect" and "out-of-bounds write" in verdict.detail
    assert "call 3 of 15: large inputs" in verdict.detail

    # input modified
    bad = list(good)
    gate_lay = plan.layouts[0]
    raw = bytearray(bad[3])
    raw[gate_lay.start : gate_lay.start + 4] = np.float32(0.5).tobytes()
    bad[3] = bytes(raw)
    verdict = shape_verdict(spec, plan, _reply(plan), bad)
    assert verdict is not None and "modified its input gate" in verdict.detail

    # results skipped on a repeated call: call 4 leaves the poison
    bad = list(good)
    raw = bytearray(bad[3 * 3 + 2])
    raw[out_lay.start : out_lay.start + out_lay.nbytes] = poison_bytes("float32", plan.calls[3].index) * 31
    bad[3 * 3 + 2] = bytes(raw)
    verdict = shape_verdict(spec, plan, _reply(plan), bad)
    assert verdict is not None and "depends on earlier calls" in verdict.detail and verdict.call == 3

    # a NaN the kernel computed is a NaN, not an unwritten element (the poison is a signalling NaN)
    bad = list(good)
    raw = bytearray(bad[2 * 3 + 2])
    raw[out_lay.start : out_lay.start + 4] = bytes.fromhex("0000c07f")
    bad[2 * 3 + 2] = bytes(raw)
    verdict = shape_verdict(spec, plan, _reply(plan), bad)
    assert verdict is not None and verdict.kind == "nan" and "NaN" in verdict.detail

    # a memo: the call with one input element changed returns the earlier call's outputs
    bad = list(good)
    bad[5 * 3 + 2] = _allocs(plan, 4)[2]
    verdict = shape_verdict(spec, plan, _reply(plan), bad)
    assert verdict is not None and "depends on earlier calls" in verdict.detail and verdict.call == 5

    # whatever comes back from the capture probe is not judged: nothing ran on the stream
    probe = list(good)
    probe[0 * 3 + 2] = bytes(len(probe[0 * 3 + 2]))
    assert shape_verdict(spec, plan, _reply(plan), probe) is None
    assert needs_diagnosis(plan, verdict)


def test_stream_violations_and_crashes(root_manifest: Manifest) -> None:
    spec, plans = _plan(root_manifest, "silu_mul")
    plan = plans[0]
    good = [b for i in range(len(plan.calls)) for b in _allocs(plan, i)]
    for calls in (1, 8):  # the capture probe, and the capture before the replay
        capture = _reply(plan, calls, rc=906, capture_error="cudaErrorStreamCaptureInvalidated", error="returned 906")
        verdict = shape_verdict(spec, plan, capture, good[: calls * 3])
        assert verdict is not None and "outside the given stream" in verdict.detail
        assert f"call {calls} of 15" in verdict.detail
    # a call that breaks the capture by returning the capture error itself
    verdict = shape_verdict(spec, plan, _reply(plan, 1, rc=901, error="returned 901"), good[:3])
    assert verdict is not None and "outside the given stream" in verdict.detail

    replay_poisoned = list(good)
    out_lay = plan.layouts[2]
    raw = bytearray(replay_poisoned[7 * 3 + 2])
    raw[out_lay.start : out_lay.start + 4] = poison_bytes("float32", plan.calls[7].index)
    replay_poisoned[7 * 3 + 2] = bytes(raw)
    verdict = shape_verdict(spec, plan, _reply(plan), replay_poisoned)
    assert verdict is not None and "outside the given stream" in verdict.detail

    # an error returned while capturing (cudaErrorInvalidValue) is not the call's own: the next call names it
    both = _reply(plan, 2, rc=9, error="returned cudaErrorInvalidConfiguration: invalid configuration argument")
    both["calls"][0].update(
        rc=1,
        error="returned cudaErrorInvalidValue: invalid argument",
        capture_error="cudaErrorStreamCaptureInvalidated",
    )
    verdict = shape_verdict(spec, plan, both, good[:6])
    assert verdict is not None and "cudaErrorInvalidConfiguration" in verdict.detail and verdict.call == 1

    state = _reply(plan, 2, device_state="cudaLimitPersistingL2CacheSize from 0 to 1048576")
    verdict = shape_verdict(spec, plan, state, good[:6])
    assert verdict is not None and verdict.status == "rejected" and "device state" in verdict.detail

    fatal = _reply(plan, 1, error="after the call: cudaErrorIllegalAddress: an illegal memory access", fatal=True)
    verdict = shape_verdict(spec, plan, fatal, [])
    assert verdict is not None and verdict.status == "crashed" and "illegal memory access" in verdict.detail
    for calls in (1, 2):  # returned from the capture probe or a plain call: the error named, not a crash
        returned = _reply(plan, calls, rc=1, error="returned cudaErrorInvalidValue: invalid argument")
        verdict = shape_verdict(spec, plan, returned, good[: 3 * calls])
        assert verdict is not None and verdict.status == "incorrect"
        assert "returned cudaErrorInvalidValue" in verdict.detail
    short = shape_verdict(spec, plan, _reply(plan, 3), good[:9])
    assert short is not None and short.status == "crashed"


def test_diagnosis_tells_races_from_shared_memory_reads(root_manifest: Manifest) -> None:
    spec, plans = _plan(root_manifest, "sum_all")
    plan = plans[1]
    failing = Verdict("incorrect", "out differs", 3, "value")
    repeat = diagnosis_plan(plan, 3)
    assert [c.smem_pattern for c in repeat.calls] == [0xFFFFFFFF] * 6 + [0x4B4B4B4B] + [0xFFFFFFFF] * 3
    assert [c.buffers for c in repeat.calls] == [0] * 7 + [1, 0, 0]
    assert len({c.index for c in repeat.calls[:7]}) == 1  # one poison for the repeats
    a = _allocs(repeat, 0)
    b = _allocs(repeat, 0, {"out": np.array([1.5], np.float32)})
    c = _allocs(repeat, 0, {"out": np.array([2.5], np.float32)})
    moved_ok = _allocs(repeat, 7)
    first_ok = _allocs(repeat, 8)
    ok: Any = {"ok": True, "calls": [{"rc": 0, "error": None}] * 10}  # a check reply, as far as diagnose reads it

    def run(*runs: list[bytes]) -> Verdict:
        return diagnose(plan, 3, failing, repeat, ok, [x for r in runs for x in r], spec.tolerance)

    assert run(a, a, a, a, a, a, a, a, first_ok, first_ok) is failing  # deterministic: the original explanation
    assert "shared memory" in run(a, a, a, a, a, a, b, a, first_ok, first_ok).detail
    assert "nondeterministic" in run(a, a, a, a, b, c, a, a, first_ok, first_ok).detail
    # an accumulator never reset: outputs drift (not a race), and inputs that passed before now fail
    assert "depends on earlier calls" in run(a, b, c, a, b, c, a, b, c, a).detail
    # a memo of the pointers: the same inputs pass at other addresses
    memo = run(b, b, b, b, b, b, b, moved_ok, first_ok, first_ok)
    assert "depends on earlier calls" in memo.detail and "other addresses" in memo.detail
    # a memo of the pointers whose first repeat landed elsewhere (the allocator's choice): right once, then the
    # same wrong outputs every time: state kept, not a race (on the H200 this read "nondeterministic")
    once = run(moved_ok, b, b, b, b, b, b, moved_ok, first_ok, first_ok)
    assert "depends on earlier calls" in once.detail and "nondeterministic" not in once.detail
    # a diagnosis that could not run says why, keeping the first explanation
    cut = diagnose(plan, 3, failing, repeat, {"ok": False, "error": "worker died"}, [], spec.tolerance)
    assert cut.detail.startswith("out differs") and "worker died" in cut.detail


def test_reference_outputs_are_checked(root_manifest: Manifest) -> None:
    import pytest

    from r1build.errors import EvaluationError

    spec = root_manifest.kernel("silu_mul")
    x = {"gate": np.ones(4, np.float32), "up": np.ones(4, np.float32)}
    assert run_reference(lambda **kw: {"out": np.zeros(4)}, spec, {"n": 4}, x)["out"].shape == (4,)
    with pytest.raises(EvaluationError, match="shape"):
        run_reference(lambda **kw: np.zeros(5), spec, {"n": 4}, x)
    with pytest.raises(EvaluationError, match="raised ZeroDivisionError"):
        run_reference(lambda **kw: 1 / 0, spec, {"n": 4}, x)
    with pytest.raises(EvaluationError, match="dtype"):  # the same rule as `r1build check`
        run_reference(lambda **kw: np.zeros(4, np.int32), spec, {"n": 4}, x)


def test_the_last_shape_replays_one_graph_calls_concurrently_and_every_shape_runs_aligned(
    root_manifest: Manifest,
) -> None:
    spec, plans = _plan(root_manifest, "softmax_rows")
    last = plans[-1]
    modes = [c.mode for c in last.calls]
    assert modes[7:11] == ["graph", "replay", "replay", "replay"]  # one capture, four replays in all
    assert modes[11:15] == ["aligned"] * 4 and [c.dist for c in last.calls[11:15]] == [
        "signed",
        "large",
        "ties",
        "denormal",
    ]
    assert modes[15:] == ["concurrent"] * 6 + ["after", "smem", "smem", "direct"]  # the precision call last
    assert [c.buffers for c in last.calls[15:22]] == [0, 1, 0, 1, 0, 1, 0]  # each pair in two buffer sets
    pair = last.calls[15:17]
    assert not np.array_equal(pair[0].inputs["x"], pair[1].inputs["x"])  # different inputs, both verified
    assert all("replay" not in [c.mode for c in p.calls] for p in plans[:-1])
    # arrays that already sit at aligned addresses (a declared alignment) get no aligned calls
    _, aligned = _plan(root_manifest, "matmul")
    assert all("aligned" not in [c.mode for c in p.calls] for p in aligned)
    header, _ = check_request(spec, last, "lib")
    assert [c["buffers"] for c in header["calls"]][11:22] == [2, 2, 2, 2, 0, 1, 0, 1, 0, 1, 0]
    assert [c["mode"] for c in header["calls"]] == modes

    good = [b for i in range(len(last.calls)) for b in _allocs(last, i)]
    assert shape_verdict(spec, last, _reply(last), good) is None
    y = last.layouts[1]

    def broken(call: int) -> Verdict:
        bad = list(good)
        raw = bytearray(bad[call * 2 + 1])
        raw[y.start : y.start + 4] = bytes.fromhex("0000c07f")  # a NaN computed
        bad[call * 2 + 1] = bytes(raw)
        verdict = shape_verdict(spec, last, _reply(last), bad)
        assert verdict is not None and verdict.call == call and verdict.status == "incorrect"
        assert not needs_diagnosis(last, verdict)  # the mode names the cause; repeating the call cannot
        return verdict

    assert "how often a captured graph is replayed" in broken(9).detail
    assert "256-byte-aligned pointers" in broken(12).detail and "large inputs" in broken(12).detail
    concurrent = broken(16).detail
    assert "not reentrant" in concurrent and "concurrently on different streams" in concurrent
    assert "called alone" in broken(21).detail or "made alone" in broken(21).detail


def test_a_launch_error_the_call_left_unread_is_named(root_manifest: Manifest) -> None:
    """Issue 27: a launcher that returns cudaSuccess after a launch that failed (an invalid configuration) ran
    nothing; the worker reads the library's own last error (``launch_error``) and the reason names it, before the
    poisoned outputs or the spoilt capture it also leaves. Where the call returned the error itself, its return code
    is what is named."""
    spec, plans = _plan(root_manifest, "silu_mul")
    plan = plans[1]
    good = [b for i in range(len(plan.calls)) for b in _allocs(plan, i)]
    said = "cudaErrorInvalidConfiguration: invalid configuration argument (9)"
    verdict = shape_verdict(spec, plan, _reply(plan, calls=1, launch_error=said), good)
    assert verdict is not None and verdict.kind == "returned" and verdict.call == 0
    assert verdict.detail.startswith(f"the call's launch failed at {plan.key}") and said in verdict.detail, verdict
    assert "though the call returned cudaSuccess" in verdict.detail
    spoilt = _reply(plan, calls=1, launch_error=said, capture_error="cudaErrorStreamCaptureInvalidated")
    assert shape_verdict(spec, plan, spoilt, good) == verdict
    returned = shape_verdict(
        spec, plan, _reply(plan, calls=2, rc=9, error="returned cudaErrorInvalidConfiguration"), good
    )
    assert returned is not None and "returned cudaErrorInvalidConfiguration" in returned.detail
    assert "launch failed" not in returned.detail
