"""The comparer process's rule (:mod:`r1build.evaluate.child.gpu_compare`) run with numpy here (cupy on the GPU runs the
same code): it passes only what the CPU's full rules pass; the parked layout; and bench_verdict with outputs the
comparer found clear."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from r1build.evaluate.child.gpu_compare import (
    EXTRA_CALLS,
    NORM_MARGIN,
    PARK_ALIGN,
    clearly_matches,
    park_layout,
    parked_size,
)
from r1build.evaluate.correctness.bench import bench_verdict, plan_bench
from r1build.evaluate.correctness.compare import compare_output
from r1build.evaluate.correctness.inputs import ArrayLayout, poison_bytes
from r1build.manifest import Manifest, load_reference
from r1build.manifest.model import Tolerance


def _cases(rng: np.random.Generator, n: int = 60) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """Float32 outputs against float64 references: exact, one element near its tolerance, NaN, infinity, poison,
    a NaN in the reference, a whole array just inside the norm bound."""
    poison = np.frombuffer(poison_bytes("float32", 0), dtype=np.uint8)
    cases = []
    for k in range(n):
        want = rng.standard_normal(4096)
        got = want.astype(np.float32)
        i = int(rng.integers(0, want.size))
        kind = k % 6
        if kind == 1:
            got[i] = np.float32(want[i] + (1.0 + rng.uniform(-0.5, 0.5) * 1e-1) * (1e-6 + 1e-5 * abs(want[i])))
        elif kind == 2:
            got[i] = np.nan if k % 4 else np.inf
        elif kind == 3:
            got.view(np.uint8).reshape(-1, 4)[i] = poison
        elif kind == 4:
            want[i] = np.nan
        elif kind == 5:  # every element off by about the elementwise bound: the norm decides
            got = (want * (1 + rng.choice([-1, 1], want.size) * 0.99e-5 * rng.uniform(0.98, 1.0))).astype(np.float32)
        cases.append((got, want))
    return cases


def test_the_judge_passes_only_what_the_full_rules_pass() -> None:
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    poison = poison_bytes("float32", 0)
    passed = 0
    for chunk in (1 << 24, 1000):
        for got, want in _cases(np.random.default_rng(11)):
            data = got.tobytes()
            layout = ArrayLayout(
                name="y", role="out", dtype="float32", shape=want.shape, nbytes=len(data), front=0, offset=0, back=0
            )
            full = compare_output(layout, data, want, tol, poison)
            with np.errstate(invalid="ignore"):  # the poison is a signalling NaN (cupy casts it quietly)
                clear = clearly_matches(np, got, want, tol.rtol, tol.atol, chunk)
            if clear:
                assert full is None
                passed += 1
    assert passed >= 30  # the common case is decided on the GPU


def test_the_norm_needs_a_margin_and_other_dtypes_go_to_the_cpu() -> None:
    want = np.ones(10_000)
    # every element exactly at the norm bound: the CPU may pass it, the comparer leaves it to the CPU
    at_bound = want * (1 + 1e-5)
    assert not clearly_matches(np, at_bound, want, 1e-5, 0.0)
    inside = want * (1 + 1e-5 * (1 - 100 * NORM_MARGIN))
    assert clearly_matches(np, inside, want, 1e-5, 0.0)
    assert not clearly_matches(np, np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32), 0.0, 0.0)
    assert not clearly_matches(np, np.zeros(3, np.float32), np.zeros(4), 0.0, 0.0)  # sizes differ
    assert clearly_matches(np, np.zeros(0, np.float32), np.zeros(0), 0.0, 0.0)


def test_the_parked_layout_is_aligned_and_covers_each_output_once() -> None:
    arrays: list[Any] = [
        {"name": "x", "dtype": "float32", "role": "in", "shape": [5], "count": 5, "itemsize": 4},
        {"name": "y", "dtype": "float32", "role": "out", "shape": [5], "count": 5, "itemsize": 4},
        {"name": "z", "dtype": "float64", "role": "inout", "shape": [3], "count": 3, "itemsize": 8},
    ]
    fill: Any = {"files": [], "poison": []}
    shapes: Any = [
        {"arrays": arrays, "args": [], "sets": [fill, fill], "tweak": fill, "out_dir": "."},
        {"arrays": arrays[:2], "args": [], "sets": [fill], "tweak": fill, "out_dir": "."},
    ]
    layout = park_layout(shapes)
    extra = len(EXTRA_CALLS)  # the lazy-output call and the replays follow each shape's tweaked call
    assert [(i["shape"], i["set"], i["array"]) for i in layout] == [
        *((0, k, j) for k in range(3 + extra) for j in (1, 2)), *((1, k, 1) for k in range(2 + extra)),
    ]  # fmt: skip
    assert all(i["offset"] % PARK_ALIGN == 0 for i in layout)
    ends = [i["offset"] + i["nbytes"] for i in layout]
    assert all(end <= nxt["offset"] for end, nxt in zip(ends, layout[1:], strict=False))
    assert parked_size(layout) == len(layout) * PARK_ALIGN


def test_judge_bench_skips_what_the_judge_found_clear_and_nothing_else(root_manifest: Manifest, tmp_path: Path) -> None:
    spec = replace(root_manifest.kernel("silu_mul"), bench_shapes=[{"n": 4099}])
    plan = plan_bench(spec, load_reference(root_manifest.root, spec.reference), 50 << 20, tmp_path / "in")
    sets = len(plan.shapes[0].sets)
    wrong = tmp_path / "wrong.bin"
    np.zeros(4099, np.float32).tofile(wrong)

    def reply(**changed: Any) -> Any:
        return {
            "outputs": [[None, None, None] for _ in range(sets)],
            "tweak_outputs": [None, None, None],
            "judged": [[False, False, True] for _ in range(sets)],
            "tweak_judged": [False, False, True],
            "capture_error": None,
            "capture_rc": 0,
            "device_state": None,
            **changed,
        }

    assert bench_verdict(spec, plan, [reply()]) is None
    # one set neither judged nor written: no output came back, never a pass
    missing = reply(judged=[[False, False, True]] * (sets - 1) + [[False, False, False]])
    verdict = bench_verdict(spec, plan, [missing])
    assert verdict is not None and verdict.status == "incorrect" and "no output of out came back" in verdict.detail
    # one the comparer left to the CPU: written, read and judged there with the full message
    outputs: list[list[str | None]] = [[None, None, None] for _ in range(sets)]
    outputs[1] = [None, None, str(wrong)]
    judged = [[False, False, True] for _ in range(sets)]
    judged[1] = [False, False, False]
    found = bench_verdict(spec, plan, [reply(outputs=outputs, judged=judged)])
    assert found is not None and f"input set 2 of {sets}" in found.detail and "differ beyond" in found.detail


@pytest.mark.gpu
def test_the_judge_rule_on_cupy_and_in_its_kernel_is_the_rule_on_numpy() -> None:
    cp = pytest.importorskip("cupy")
    from r1build.evaluate.child.gpu_compare import GpuComparer

    comparer = GpuComparer(cp, 1 << 30)
    comparer.warm()
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    for got, want in _cases(np.random.default_rng(5)):
        with np.errstate(invalid="ignore"):
            on_cpu = clearly_matches(np, got, want, tol.rtol, tol.atol)
            wide = got.astype(np.float64)
            wide_on_cpu = clearly_matches(np, wide, want, tol.rtol, tol.atol)
        assert clearly_matches(cp, cp.asarray(got), cp.asarray(want), tol.rtol, tol.atol, 1000) == on_cpu
        # the one-pass kernel the comparer process runs, for float32 and float64 outputs
        assert comparer.clear(cp.asarray(got), cp.asarray(want), tol.rtol, tol.atol) == on_cpu
        assert comparer.clear(cp.asarray(wide), cp.asarray(want), tol.rtol, tol.atol) == wide_on_cpu


@pytest.mark.gpu
def test_the_judge_process_passes_the_honest_and_leaves_a_cheat_to_the_cpu(
    root_manifest: Manifest, tmp_path: Path
) -> None:
    """The baseline and a kernel that skips its work above 2^20 elements, with the comparer process and without it:
    the same verdicts and the same words; with it, the baseline's outputs never became files."""
    from r1build.cache import Cache
    from r1build.evaluate import EvaluatorOptions, GpuEvaluator, expand_variants
    from r1build.judge import Job
    from r1build.records import Candidate, Origin

    from .evaluate_support import ROOT

    spec = root_manifest.kernel("silu_mul")
    baseline = expand_variants(root_manifest, spec)[0]
    skip = ROOT / "tests" / "evaluate" / "cheats" / "size_threshold_skip.cu"
    cheat = Candidate(skip.read_text(), Origin("file", "cheats/size_threshold_skip.cu"))
    outcome: dict[bool, tuple[list[tuple[str, str]], dict[str, float]]] = {}
    for on_gpu in (True, False):
        with (
            Cache(tmp_path / f"cache-{on_gpu}") as cache,
            GpuEvaluator(
                cache, options=EvaluatorOptions(call_timeout_s=8.0, timing_timeout_s=10.0, compare_on_gpu=on_gpu)
            ) as ev,
        ):
            arch = min(a for a in ev.archs if not a.endswith("a"))
            results = ev.evaluate(Job(root_manifest, spec, arch, [baseline, cheat], baseline))
            outcome[on_gpu] = ([(r.status, r.detail) for r in results], ev.stats)
    (with_comparer, stats), (without, plain) = outcome[True], outcome[False]
    assert with_comparer[0][0] == "passed" and with_comparer[1][0] == "incorrect"
    assert "wrong outputs of the timed calls" in with_comparer[1][1]
    assert with_comparer == without
    # every output of the baseline (each input set and the tweaked call) judged on the GPU; the cheat's first
    # wrong one went to the CPU
    assert stats.get("outputs_judged_on_gpu", 0) >= 3 and stats.get("outputs_judged_on_cpu", 0) >= 1
    assert "outputs_judged_on_gpu" not in plain


def test_a_timing_the_judge_passed_whole_starts_no_judging_process(root_manifest: Manifest, tmp_path: Path) -> None:
    """Nothing to read from files: the judging runs on the caller's executor, and the pool of comparing processes
    (spawned interpreters, seconds to start and to close) is never made. One output written for the CPU starts it."""
    from r1build.evaluate.compare_pool import ComparePool

    spec = replace(root_manifest.kernel("silu_mul"), bench_shapes=[{"n": 4099}])
    plan = plan_bench(spec, load_reference(root_manifest.root, spec.reference), 50 << 20, tmp_path / "in")
    sets = len(plan.shapes[0].sets)
    reply: Any = {
        "outputs": [[None, None, None] for _ in range(sets)],
        "tweak_outputs": [None, None, None],
        "judged": [[False, False, True] for _ in range(sets)],
        "tweak_judged": [False, False, True],
        "extra_outputs": [[None, None, None] for _ in EXTRA_CALLS],
        "extra_judged": [[False, False, True] for _ in EXTRA_CALLS],
        "capture_rc": 0,
    }
    pool = ComparePool(1)
    try:
        assert pool.compare(spec, plan, [reply]) is None
        assert pool._pool is None
        wrong = tmp_path / "wrong.bin"
        np.zeros(4099, np.float32).tofile(wrong)
        reply["outputs"][0][2], reply["judged"][0][2] = str(wrong), False
        found = pool.compare(spec, plan, [reply])
        assert found is not None and "input set 1 of" in found.detail and pool._pool is not None
    finally:
        pool.close()


class _Slot:
    """The two requests Timer._compare_parked makes of a GPU's slot (the comparer's verdicts given, the worker's files
    written here): the parent's side of the parked outputs on the CPU."""

    def __init__(self, clear: list[bool] | None, wrong: bytes) -> None:
        from r1build.evaluate.devices import GpuInfo

        self.gpu = GpuInfo(name="Stand-in GPU", arch="sm_90", index=0, memory=1 << 30)
        self.comparer: object | None = object()
        self.comparer_failures = 0
        self.clear = clear
        self.wrong = wrong
        self.asked: list[Any] = []
        self.saved: list[Any] = []
        self.requests = 0

    def ask_comparer(self, header: Any, *, timeout_s: float) -> dict[str, Any] | None:
        self.asked.append(header)
        if self.clear is None:  # the comparer failed: closed after it
            self.comparer_failures, self.comparer = 2, None
            return None
        return {"ok": True, "clear": self.clear}

    def request(self, header: Any, *, timeout_s: float) -> tuple[dict[str, Any], list[bytes]]:
        assert header["op"] == "save_parked"
        self.requests += 1
        for item in header["items"]:
            Path(item["path"]).write_bytes(self.wrong[: item["nbytes"]])
            self.saved.append(item)
        return {"ok": True}, []


def test_the_parent_marks_what_the_judge_passed_and_has_the_rest_written_for_the_cpu(
    root_manifest: Manifest, tmp_path: Path
) -> None:
    from typing import cast

    from r1build.evaluate.compare_pool import ComparePool
    from r1build.evaluate.correctness.bench import shape_requests
    from r1build.evaluate.slots import Slot
    from r1build.evaluate.timing.measure import Timer

    spec = replace(root_manifest.kernel("silu_mul"), bench_shapes=[{"n": 4099}])
    plan = plan_bench(spec, load_reference(root_manifest.root, spec.reference), 50 << 20, tmp_path / "in")
    sets = len(plan.shapes[0].sets)
    notes: list[str] = []
    timer = Timer(
        cache=lambda: cast(Any, None), submit=lambda *a, **k: cast(Any, None), note=lambda m, *_: notes.append(m),
        count=lambda *_: None, root=tmp_path, seed=0, call_timeout_s=1.0, timeout_s=1.0, budget_s=0.1,
        compare_pool=ComparePool(0),
    )  # fmt: skip
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    requests = shape_requests(spec, plan, out_dir)
    layout = park_layout(requests)
    places = sets + 1 + len(EXTRA_CALLS)  # out, per set, the tweak and the extra calls
    assert [(i["set"], i["array"]) for i in layout] == [(k, 2) for k in range(places)]

    def reply() -> Any:
        shape = {
            "outputs": [[None, None, None] for _ in range(sets)],
            "tweak_outputs": [None, None, None],
            "extra_outputs": [[None, None, None] for _ in EXTRA_CALLS],
        }
        return {"ok": True, "shapes": [shape], "parked": {"handle": "ab", "size": parked_size(layout)}}

    wrong = np.zeros(4099, np.float32).tobytes()
    # the comparer passes all but input set 2's output: that one is written for the CPU, which says what is wrong
    slot = _Slot([k not in {1, places - 2} for k in range(places)], wrong)
    got = reply()
    assert timer._compare_parked(spec, cast(Slot, slot), plan, requests, got, out_dir) is None
    asked = slot.asked[0]
    assert [i["offset"] for i in asked["items"]] == [i["offset"] for i in layout]
    assert asked["items"][1]["expected"] == plan.shapes[0].sets[1].expected_files["out"]
    assert asked["items"][sets]["expected"] == plan.shapes[0].tweak.expected_files["out"]
    # the extra calls: the lazy-output call on set 0, then replays of sets 2, the tweak and 1
    assert [i["expected"] for i in asked["items"][sets + 1 :]] == [
        plan.shapes[0].sets[0].expected_files["out"],
        plan.shapes[0].sets[1].expected_files["out"],
        plan.shapes[0].tweak.expected_files["out"],
        plan.shapes[0].sets[0].expected_files["out"],
    ]
    assert [s["offset"] for s in slot.saved] == [layout[1]["offset"], layout[places - 2]["offset"]]
    shape = got["shapes"][0]
    assert shape["judged"][0] == [False, False, True] and shape["judged"][1] == [False, False, False]
    assert shape["outputs"][1][2] == slot.saved[0]["path"] and shape["tweak_judged"] == [False, False, True]
    assert shape["extra_outputs"][2][2] == slot.saved[1]["path"] and shape["extra_judged"][2] == [False] * 3
    assert shape["extra_judged"][3] == [False, False, True]
    found = bench_verdict(spec, plan, got["shapes"])
    assert found is not None and f"input set 2 of {sets}" in found.detail
    # all passed: nothing written, but the worker is told it may zero the parked outputs (save_parked of none)
    slot = _Slot([True] * places, wrong)
    assert timer._compare_parked(spec, cast(Slot, slot), plan, requests, reply(), out_dir) is None
    assert slot.requests == 1 and not slot.saved
    # an allocation smaller than the layout: nothing asked of the comparer, everything written for the CPU
    small = reply()
    small["parked"]["size"] = 256
    slot = _Slot([True] * places, wrong)
    assert timer._compare_parked(spec, cast(Slot, slot), plan, requests, small, out_dir) is None
    assert not slot.asked and len(slot.saved) == places
    # a comparer that failed for good: everything to the CPU, and said once
    slot = _Slot(None, wrong)
    assert timer._compare_parked(spec, cast(Slot, slot), plan, requests, reply(), out_dir) is None
    assert len(slot.saved) == places and len(notes) == 1 and "comparer process failed 2 times" in notes[0]


def test_a_judge_that_keeps_failing_is_closed_and_the_slot_goes_on_without_it(tmp_path: Path) -> None:
    """A comparer process that cannot start (here it exits at once) costs each timing a start: after two failures the
    slot has none, and its timings write their outputs for the CPU as without the comparer."""
    import sys

    from r1build.evaluate.devices import GpuInfo
    from r1build.evaluate.process import WorkerHandle
    from r1build.evaluate.slots import Slot

    work = tmp_path / "gpu0"
    work.mkdir()
    comparer = WorkerHandle(
        [sys.executable, "-c", "import sys; sys.exit(3)"], {}, work, name="comparer", start_timeout_s=10
    )
    slot = Slot(
        gpu=GpuInfo(name="Stand-in GPU", arch="sm_90", index=0, memory=1 << 30),
        worker=WorkerHandle(["true"], {}, work, name="unused"),
        sanitizer=None,
        workdir=work,
        comparer=comparer,
    )
    header: Any = {"op": "compare", "handle": "", "size": 0, "items": [], "rtol": 0.0, "atol": 0.0}
    assert slot.ask_comparer(header, timeout_s=5) is None and slot.comparer is comparer
    assert slot.ask_comparer(header, timeout_s=5) is None and slot.comparer is None
    assert slot.comparer_failures == 2 and not comparer.running
    assert slot.ask_comparer(header, timeout_s=5) is None  # none asked any more


def test_each_gpu_gets_one_judge_process_of_its_own_unless_turned_off(tmp_path: Path) -> None:
    """The timing slot of each GPU has a comparer (a worker process with a home of its own, so nothing a candidate's
    worker leaves in its home, cupy's kernel cache, reaches it); the check workers have none; compare_on_gpu=False
    gives none (the outputs go to files)."""
    from r1build.cache import Cache
    from r1build.evaluate import EvaluatorOptions, GpuEvaluator
    from r1build.evaluate.devices import GpuInfo

    gpu = GpuInfo(name="Stand-in GPU", arch="sm_90", index=0, memory=1 << 30)
    with Cache(tmp_path / "cache") as cache:
        for on in (True, False):
            with GpuEvaluator(
                cache,
                gpus=[gpu],
                workdir=tmp_path / f"w{on}",
                options=EvaluatorOptions(sanitize=False, compare_on_gpu=on),
            ) as ev:
                (slot,) = ev._slots
                assert all(c.comparer is None for c in ev._checkers[id(slot)])
                if not on:
                    assert slot.comparer is None
                    continue
                assert slot.comparer is not None and slot.comparer.name == "comparer"
                homes = {slot.worker.env["HOME"], slot.comparer.env["HOME"]}
                assert len(homes) == 2 and slot.comparer.env["CUPY_CACHE_DIR"].startswith(slot.comparer.env["HOME"])


def test_the_extra_calls_at_the_benchmark_shape_are_judged_and_named(root_manifest: Manifest, tmp_path: Path) -> None:
    """What the lazy-output call and the three replays of one captured graph left (child/extras.py): each wrong
    output is named for what it shows; a reply without them is never a pass."""
    from r1build.evaluate.correctness.bench_extra import extra_verdict, timed_verdict

    spec = replace(root_manifest.kernel("silu_mul"), bench_shapes=[{"n": 4099}])
    plan = plan_bench(spec, load_reference(root_manifest.root, spec.reference), 50 << 20, tmp_path / "in")
    sets = len(plan.shapes[0].sets)
    right = tmp_path / "right.bin"
    np.load(plan.shapes[0].sets[0].expected_files["out"]).astype(np.float32).tofile(right)
    changed = tmp_path / "changed.bin"
    decoy = np.load(plan.shapes[0].sets[0].expected_files["out"]).astype(np.float32)
    decoy[::64] = decoy[::64] * -2 + 1.5  # what the lazy call finds in its outputs, left as it was
    decoy.tofile(changed)
    unwritten = tmp_path / "unwritten.bin"
    np.frombuffer(poison_bytes("float32", 0) * 4099, np.float32).tofile(unwritten)

    def reply(e: int | None = None, path: Path = changed, **more: Any) -> Any:
        extras: list[list[str | None]] = [[None, None, None] for _ in EXTRA_CALLS]
        judged = [[False, False, True] for _ in EXTRA_CALLS]
        if e is not None:
            extras[e][2], judged[e][2] = str(path), False
        return {
            "outputs": [[None, None, None] for _ in range(sets)],
            "tweak_outputs": [None, None, None],
            "judged": [[False, False, True] for _ in range(sets)],
            "tweak_judged": [False, False, True],
            "extra_outputs": extras,
            "extra_judged": judged,
            "capture_rc": 0,
            **more,
        }

    assert timed_verdict(spec, plan, [reply()]) is None
    assert extra_verdict(spec, plan, [reply(0, right)]) is None  # the lazy call's expected: set 0's
    lazy = timed_verdict(spec, plan, [reply(0)])
    assert lazy is not None and "lazy output" in lazy.detail and "benchmark shape n=4099" in lazy.detail
    first = extra_verdict(spec, plan, [reply(1, unwritten)])
    assert first is not None and "outside the given stream" in first.detail and first.kind == "stream"
    later = extra_verdict(spec, plan, [reply(2, changed)])
    assert later is not None and "how often a captured graph is replayed" in later.detail and "replay 2" in later.detail
    failed = extra_verdict(spec, plan, [reply(extra_error="cudaErrorStreamCaptureInvalidated")])
    assert failed is not None and "outside the given stream" in failed.detail
    none = reply()
    del none["extra_outputs"]
    missing = timed_verdict(spec, plan, [none])
    assert missing is not None and missing.status == "crashed"


def test_the_lazy_call_finds_finite_outputs_with_one_element_in_64_changed() -> None:
    """change_outputs, on numpy arrays (the worker hands in cupy): finite values stay finite and differ."""
    import contextlib
    from types import SimpleNamespace
    from typing import cast

    from r1build.evaluate.child.extras import change_outputs
    from r1build.evaluate.child.gpu_compare import DECOY_STRIDE
    from r1build.evaluate.child.worker import Worker

    def arr(name: str, dtype: str, role: str) -> Any:
        return {"name": name, "dtype": dtype, "role": role, "shape": [200], "count": 200, "itemsize": 4}

    shape: Any = {
        "arrays": [arr("x", "float32", "in"), arr("y", "float32", "out"), arr("i", "int32", "out")],
        "args": [],
        "sets": [],
        "tweak": {},
        "out_dir": ".",
    }
    x = np.linspace(-3, 3, 200, dtype=np.float32)
    y, i = x.copy(), np.arange(200, dtype=np.int32)
    worker = cast(Worker, SimpleNamespace(cp=np, stream=contextlib.nullcontext()))
    change_outputs(worker, [x, y, i], shape)
    assert np.array_equal(x, np.linspace(-3, 3, 200, dtype=np.float32))  # inputs untouched
    moved = np.flatnonzero(y != x)
    assert list(moved) == list(range(0, 200, DECOY_STRIDE)) and np.isfinite(y).all()
    assert list(np.flatnonzero(i != np.arange(200))) == list(range(0, 200, DECOY_STRIDE))


def test_a_benchmark_plan_is_shared_until_its_last_job_is_done_then_its_files_go(
    root_manifest: Manifest, tmp_path: Path
) -> None:
    from concurrent.futures import Future
    from types import SimpleNamespace
    from typing import cast

    from r1build.evaluate.compare_pool import ComparePool
    from r1build.evaluate.slots import Slot
    from r1build.evaluate.timing.measure import Timer
    from r1build.judge import Job

    def now(fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(fn(*args, **kwargs))
        return done

    timer = Timer(
        cache=lambda: cast(Any, None), submit=now, note=lambda *_: None, count=lambda *_: None, root=tmp_path,
        seed=0, call_timeout_s=1.0, timeout_s=1.0, budget_s=0.1, compare_pool=ComparePool(0),
    )  # fmt: skip
    slot = cast(Slot, SimpleNamespace(gpu=SimpleNamespace(l2_bytes=1 << 20)))
    spec = replace(root_manifest.kernel("silu_mul"), bench_shapes=[{"n": 4099}])
    job = Job(root_manifest, spec, "sm_90", [])
    first = timer.bench_plan(job, "sm_90", slot)
    assert timer.bench_plan(job, "sm_90", slot) is first  # made once for both jobs
    files = [Path(f) for s in first.result().shapes[0].sets for f in [*s.files, *s.expected_files.values()] if f]
    assert files and all(f.is_file() for f in files)
    timer.release(job, "sm_90", slot)
    assert all(f.is_file() for f in files)  # the other job still times with them
    timer.release(job, "sm_90", slot)
    assert not any(f.exists() for f in files)
    assert not (tmp_path / "bench" / "silu_mul-0").exists() and not (tmp_path / "expected" / "silu_mul-0").exists()
    again = timer.bench_plan(job, "sm_90", slot).result()  # a later job of the kernel: made again, elsewhere
    assert again.directory != first.result().directory and again.directory.is_dir()
    assert [s.inputs.keys() for s in again.shapes[0].sets] == [s.inputs.keys() for s in first.result().shapes[0].sets]
    assert all(
        np.array_equal(a, b)
        for s, t in zip(again.shapes[0].sets, first.result().shapes[0].sets, strict=True)
        for a, b in zip(s.inputs.values(), t.inputs.values(), strict=True)
    )
