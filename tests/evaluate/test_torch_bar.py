"""The torch bar on the parent's side: the request the worker gets and what its reply says (pure functions; the
worker's timing runs on a GPU: ``test_the_torch_bar_is_measured_in_the_confined_worker`` in
tests/evaluate/test_evaluate_gpu.py)."""

from __future__ import annotations

import dataclasses

import pytest

from r1build.evaluate.timing.stats import reference_request
from r1build.evaluate.timing.torch_bar import TorchTime, torch_request, torch_time, with_torch
from r1build.manifest import Manifest
from r1build.records import Timing


def test_request_times_the_torch_reference_on_the_library_shapes(root_manifest: Manifest) -> None:
    spec = dataclasses.replace(root_manifest.kernel("rmsnorm"), torch_reference="kernels.torch_ref:rmsnorm")
    library = reference_request(spec, "/p")
    request = torch_request(spec, "/p", library["shapes"])
    assert request == {
        "op": "time_torch",
        "root": "/p",
        "reference": "kernels.torch_ref:rmsnorm",
        "shapes": library["shapes"],
        "compile": True,
    }
    assert torch_request(spec, "/p", [], compile=False)["compile"] is False
    with pytest.raises(ValueError, match="names no torch-reference"):
        torch_request(root_manifest.kernel("rmsnorm"), "/p", [])


def test_the_faster_of_eager_and_compile_is_the_bar(root_manifest: Manifest) -> None:
    spec = dataclasses.replace(root_manifest.kernel("rmsnorm"), torch_reference="kernels.torch_ref:rmsnorm")
    both = torch_time(spec, {"ok": True, "shapes": [{"eager_us": [30.0, 31.0, 29.0], "compile_us": [12.0, 12.0]}]})
    assert (both.median_us, both.mode, both.eager_us, both.compile_us) == (12.0, "compile", 30.0, 12.0)
    eager = torch_time(spec, {"ok": True, "shapes": [{"eager_us": [8.0], "compile_error": "BackendCompilerFailed"}]})
    assert (eager.median_us, eager.mode, eager.compile_us, eager.note) == (8.0, "eager", None, None)
    failed = torch_time(
        spec,
        {"ok": True, "shapes": [{"eager_error": "TypeError: bad\nline", "compile_error": "TypeError: bad \\ \u00e9"}]},
    )
    assert failed.median_us is None and failed.note is not None and "\n" not in failed.note
    assert "kernels.torch_ref:rmsnorm could not be timed (eager: TypeError: bad line; compile:" in failed.note
    assert failed.note.endswith("compile: TypeError: bad ? ?)")  # one printable line, as the lock's torch-note
    missing = torch_time(spec, {"ok": False, "error": "torch is not installed in the GPU worker's environment"})
    assert missing.note is not None and "torch is not installed" in missing.note


def test_timing_gains_the_speedup_over_torch_or_why_none() -> None:
    timing = Timing(median_us=10.0, spread=0.01, samples=50)
    assert with_torch(timing, None) == timing
    faster = with_torch(timing, TorchTime(12.0, "compile", 30.0, 12.0))
    assert (faster.speedup_vs_torch, faster.torch_mode, faster.torch_note) == (1.2, "compile", None)
    none = with_torch(timing, TorchTime(None, note="the torch-reference m:f could not be timed (x)"))
    assert none.speedup_vs_torch is None and none.torch_note == "the torch-reference m:f could not be timed (x)"
