"""Floors arithmetic: bytes moved, the flops expression, the floor of a shape (no GPU)."""

from __future__ import annotations

import pytest

from r1build.errors import EvaluationError
from r1build.evaluate.timing.floors import DeviceFloors, bytes_moved, eval_flops, floor_us, shape_key
from r1build.manifest import Manifest


def test_flops_expression() -> None:
    assert eval_flops("2*m*n*k", {"m": 2, "n": 3, "k": 4}) == 48
    assert eval_flops("(n // 2) ** 2 - -1", {"n": 9}) == 17
    assert eval_flops("0", {}) == 0
    for bad in ("__import__('os')", "n.real", "f(n)", "[n]", "n if n else 1"):
        with pytest.raises(EvaluationError):
            eval_flops(bad, {"n": 1})
    with pytest.raises(EvaluationError, match="not a size"):
        eval_flops("2*q", {"n": 1})
    with pytest.raises(EvaluationError, match="not an arithmetic expression"):
        eval_flops("2*", {"n": 1})


def test_bytes_and_floor(root_manifest: Manifest) -> None:
    silu = root_manifest.kernel("silu_mul")
    assert bytes_moved(silu, {"n": 1000}) == 12000
    matmul = root_manifest.kernel("matmul")
    sizes = {"m": 4096, "n": 4096, "k": 4096}
    assert bytes_moved(matmul, sizes) == 3 * 4096 * 4096 * 4
    floors = DeviceFloors("GPU", bandwidth_bps=4e12, fp32_flops=5e13)
    assert floor_us(silu, {"n": 1000}, floors) == pytest.approx(12000 / 4e12 * 1e6)
    assert floor_us(matmul, sizes, floors) == pytest.approx(2 * 4096**3 / 5e13 * 1e6)  # arithmetic bound
    assert shape_key(matmul, sizes) == "m=4096,n=4096,k=4096"


def test_floors_json_round_trip() -> None:
    floors = DeviceFloors("NVIDIA H200", 4.3e12, 6.0e13)
    assert DeviceFloors.from_json(floors.to_json()) == floors
    assert DeviceFloors.from_json({"schema": 0, "bandwidth_bps": 1, "fp32_flops": 1}) is None
    assert DeviceFloors.from_json({"schema": 1, "bandwidth_bps": -1, "fp32_flops": 1}) is None
    assert DeviceFloors.from_json("junk") is None


def test_library_request_names_the_gpu_reference(root_manifest: Manifest) -> None:
    """The library is the kernel's gpu-reference, called as it is, where the manifest names one; else the numpy
    reference with its numpy rebound to cupy."""
    import dataclasses

    from r1build.evaluate.timing.stats import reference_request

    spec = root_manifest.kernel("rmsnorm")
    plain = reference_request(spec, "/p")
    assert plain["reference"] == spec.reference and plain.get("rebind", True)
    gpu = reference_request(dataclasses.replace(spec, gpu_reference="kernels.gpu_ref:rmsnorm"), "/p")
    assert gpu["reference"] == "kernels.gpu_ref:rmsnorm" and gpu["rebind"] is False
    assert gpu["shapes"] == plain["shapes"]


def test_library_failure_is_kept_with_its_reason(root_manifest: Manifest) -> None:
    """A reference that fails on cupy leaves no speedup, but the reason goes into the timing (it was dropped)."""
    import dataclasses

    from r1build.evaluate.timing.stats import SampleStats, build_timing, library_time

    spec = root_manifest.kernel("silu_mul")
    stats = [SampleStats(10.0, 0.01, 50) for _ in spec.bench_shapes]
    failed = library_time(spec, {"ok": True, "shapes": [{"error": "AttributeError: no attribute 'errstate'"}]})
    assert failed.median_us is None and failed.note is not None
    assert "errstate" in failed.note and "gpu-reference" in failed.note
    timing = build_timing(spec, stats, floors=None, baseline_us=None, library=failed)
    assert timing.speedup_vs_reference is None and timing.library_note == failed.note
    ran = library_time(spec, {"ok": True, "shapes": [{"samples_us": [20.0, 20.0, 20.0]}]})
    timing = build_timing(spec, stats, floors=None, baseline_us=None, library=ran)
    assert timing.speedup_vs_reference == 2.0 and timing.library_note is None
    own = dataclasses.replace(spec, gpu_reference="kernels.gpu_ref:silu_mul")
    assert "gpu-reference kernels.gpu_ref:silu_mul failed" in str(
        library_time(own, {"ok": False, "error": "boom"}).note
    )


def test_a_library_note_from_any_error_is_one_the_lock_accepts(root_manifest: Manifest) -> None:
    """The library's error is quoted into the winner's facts and the lock: a long one (a reference module not found,
    with its folder's path) or one with a backslash, a tab or non-ASCII text made a note the lock's verification
    refused, and the winner just measured was thrown away (seen on an H100)."""
    import dataclasses

    from r1build.evaluate.timing.stats import SampleStats, build_timing, library_time
    from r1build.lock import load_lock
    from r1build.lock.verify import entry_problem
    from r1build.records import NOTE_LIMIT

    spec = root_manifest.kernel("silu_mul")
    stats = [SampleStats(10.0, 0.01, 50) for _ in spec.bench_shapes]
    lock = load_lock(root_manifest)
    assert lock is not None
    entry = next(e for e in lock.kernel if e.name == "silu_mul")
    folder = "/tmp/pytest-of-root/pytest-1/" + "d" * 150 + "/caf\u00e9\\proj"
    errors = [
        f"ReferenceProblem: module 'ref' not found next to the manifest (looked for ref.py in {folder})",
        "Traceback:\n\tline 1\n" + "x" * 5000,
    ]
    for error in errors:
        for reply in ({"ok": True, "shapes": [{"error": error}]}, {"ok": False, "error": error}):
            note = library_time(spec, reply).note
            assert note is not None and len(note) <= NOTE_LIMIT and "\n" not in note and "\\" not in note
            timing = build_timing(spec, stats, floors=None, baseline_us=None, library=library_time(spec, reply))
            assert timing.library_note == note
            assert entry_problem(dataclasses.replace(entry, library_note=note)) is None
    assert entry_problem(dataclasses.replace(entry, library_note="x" * (NOTE_LIMIT + 1))) is not None
