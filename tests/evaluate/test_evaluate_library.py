"""Shared-library builds with the real nvcc, and the evaluator on a machine with no GPU."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.evaluate import GpuEvaluator, detect_gpus, expand_variants
from r1build.evaluate.devices import GpuInfo, archs_of, gpu_runs_arch, visible_devices_value
from r1build.evaluate.library import Library, LibraryFailure, build_library
from r1build.evaluate.sanitizer.runner import uses_shared_memory
from r1build.judge import Job
from r1build.manifest import Manifest
from r1build.records import Candidate, Origin
from r1build.toolchain.nvcc import toolchain
from tests.evaluate.evaluate_support import CORPUS

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="nvcc not installed"
)


@needs_nvcc
def test_builds_a_loadable_library_and_rejects_forbidden_symbols(root_manifest: Manifest, tmp_path: Path) -> None:
    spec = root_manifest.kernel("silu_mul")
    baseline = expand_variants(root_manifest, spec)[0]
    lib = build_library(
        baseline,
        spec.name,
        "sm_90",
        flags=root_manifest.settings.nvcc_flags,
        toolchain=toolchain(),
        workdir=tmp_path / "ok",
    )
    assert isinstance(lib, Library) and lib.path.suffix == ".so"
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib.path)], capture_output=True, text=True, check=True
    ).stdout
    assert " T silu_mul" in exported

    bad = Candidate((CORPUS / "forbidden_symbol.cu").read_text(), Origin("file", "forbidden_symbol.cu"))
    out = build_library(bad, spec.name, "sm_90", flags=[], toolchain=toolchain(), workdir=tmp_path / "bad")
    assert isinstance(out, LibraryFailure) and out.status == "rejected" and "system" in out.detail
    assert not list((tmp_path / "bad").glob("*.so"))  # never linked, never loadable

    broken = Candidate("this is not C++", Origin("file", "broken.cu"))
    out = build_library(broken, spec.name, "sm_90", flags=[], toolchain=toolchain(), workdir=tmp_path / "broken")
    assert isinstance(out, LibraryFailure) and out.status == "compile_error"


def test_devices_without_cupy_or_gpu() -> None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert detect_gpus() == []
    h200 = GpuInfo(
        name="NVIDIA H200", arch="sm_90", index=0, memory=141 << 30, capability=(9, 0), sm_count=132, l2_bytes=60 << 20
    )
    assert archs_of(h200) == ["sm_90", "sm_90a"]
    assert gpu_runs_arch(h200, "90-real") and gpu_runs_arch(h200, "sm_90a")
    assert not gpu_runs_arch(h200, "sm_80") and not gpu_runs_arch(h200, "nonsense")
    b200 = GpuInfo(name="NVIDIA B200", arch="sm_100", index=0, memory=180 << 30, capability=(10, 0))
    b300 = GpuInfo(name="NVIDIA B300", arch="sm_103", index=0, memory=270 << 30, capability=(10, 3))
    assert archs_of(b200) == ["sm_100", "sm_100a", "sm_100f"]
    assert archs_of(b300) == ["sm_103", "sm_103a", "sm_100f", "sm_103f"]
    # family code runs on every later member of its family; "a" code on its one capability only
    assert gpu_runs_arch(b300, "sm_100f") and gpu_runs_arch(b300, "100f-real") and gpu_runs_arch(b300, "sm_103a")
    assert not gpu_runs_arch(b200, "sm_103f") and not gpu_runs_arch(b200, "sm_103a")
    assert not gpu_runs_arch(b300, "sm_100a") and not gpu_runs_arch(h200, "sm_100f")
    rtx = GpuInfo(name="NVIDIA GeForce RTX 5090", arch="sm_120", index=0, memory=32 << 30, capability=(12, 0))
    assert gpu_runs_arch(rtx, "sm_120f") and gpu_runs_arch(rtx, "sm_120a") and not gpu_runs_arch(rtx, "sm_121f")
    assert visible_devices_value(1, {"CUDA_VISIBLE_DEVICES": "4,6"}) == "6"
    assert visible_devices_value(1, {}) == "1"


@pytest.mark.heavy  # the root's every variant through the static gate: 19 s
@needs_nvcc
def test_without_a_gpu_the_static_gate_judges(root_manifest: Manifest, tmp_path: Path) -> None:
    spec = root_manifest.kernel("transpose")
    candidates = expand_variants(root_manifest, spec)
    bad = Candidate((CORPUS / "exported_symbol.cu").read_text(), Origin("file", "exported_symbol.cu"))
    with Cache(tmp_path / "cache") as cache, GpuEvaluator(cache, gpus=[]) as evaluator:
        assert evaluator.archs == frozenset()
        results = evaluator.evaluate(Job(root_manifest, spec, "sm_90", [*candidates, bad], candidates[0]))
    assert [r.status for r in results] == ["passed"] * len(candidates) + ["rejected"]
    assert all(r.stage == "gate" and r.timing is None for r in results)


@needs_nvcc
def test_racecheck_is_only_needed_with_shared_memory(root_manifest: Manifest, tmp_path: Path, cuobjdump: str) -> None:
    found = {}
    for name in ("silu_mul", "rmsnorm"):
        spec = root_manifest.kernel(name)
        lib = build_library(
            expand_variants(root_manifest, spec)[0],
            name,
            "sm_90",
            flags=["-O3"],
            toolchain=toolchain(),
            workdir=tmp_path / name,
        )
        assert isinstance(lib, Library)
        sass = subprocess.run([cuobjdump, "-sass", str(lib.path)], capture_output=True, text=True, check=False)
        if "Function" not in sass.stdout:
            pytest.skip(f"this cuobjdump cannot disassemble (no nvdisasm beside it): {sass.stderr.strip()[:120]}")
        found[name] = uses_shared_memory(lib.path, cuobjdump)
    assert found == {"silu_mul": False, "rmsnorm": True}
    assert uses_shared_memory(tmp_path / "missing.so", cuobjdump)  # cannot tell: assume it does


@needs_nvcc
def test_a_library_links_the_gates_own_object_instead_of_compiling_again(
    root_manifest: Manifest, tmp_path: Path, cuobjdump: str
) -> None:
    from r1build.gate.static import StaticGate

    spec = root_manifest.kernel("silu_mul")
    variant = expand_variants(root_manifest, spec)[1]
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache, keep_objects=tmp_path / "objects")
        verdicts = gate.judge(root_manifest, spec, [("sm_80", variant), ("sm_90", variant)])
        assert [v.status for v in verdicts] == ["passed", "passed"] and gate.compiles == 1  # both archs, one nvcc
        kept = gate.object_for(variant.digest, "sm_90")
        assert kept is not None and kept == gate.object_for(variant.digest, "80-real")
        assert gate.object_for("0" * 64, "sm_90") is None
        # a gate without kept objects, or a verdict from the cache, has none to give
        again = StaticGate(cache, keep_objects=tmp_path / "objects2")
        again.judge(root_manifest, spec, [("sm_90", variant)])
        assert again.compiles == 0 and again.object_for(variant.digest, "sm_90") is None

    nvcc_runs = tmp_path / "nvcc.log"
    real = toolchain()
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {nvcc_runs}\nexec {real.nvcc} "$@"\n')
    wrapper.chmod(0o755)
    counted = dataclasses.replace(real, nvcc=str(wrapper))
    lib = build_library(
        variant,
        spec.name,
        "sm_90",
        flags=root_manifest.settings.nvcc_flags,
        toolchain=counted,
        workdir=tmp_path / "lib",
        compiled_object=kept,
    )
    assert isinstance(lib, Library)
    # linked, not compiled (beside the link step's own function, compiled once for this nvcc)
    runs = [run for run in nvcc_runs.read_text().splitlines() if not run.endswith("last_error.cpp")]
    assert len(runs) == 1 and runs[0].startswith("-shared")
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib.path)], capture_output=True, text=True, check=True
    ).stdout
    assert " T silu_mul" in exported
    elves = subprocess.run([cuobjdump, "-lelf", str(lib.path)], capture_output=True, text=True, check=True).stdout
    assert "sm_80" in elves and "sm_90" in elves  # the gate's compile carried code for both archs

    # the library the gate linked itself is taken as it is: no nvcc at all, the same exports
    gate_library = gate.library_for(variant.digest, "sm_80")
    assert gate_library is not None and gate_library == gate.library_for(variant.digest, "90-real")
    assert again.library_for(variant.digest, "sm_90") is None
    nvcc_runs.write_text("")
    taken = build_library(
        variant,
        spec.name,
        "sm_90",
        flags=root_manifest.settings.nvcc_flags,
        toolchain=counted,
        workdir=tmp_path / "taken",
        linked_library=gate_library,
    )
    assert isinstance(taken, Library) and nvcc_runs.read_text() == ""
    assert taken.path.read_bytes() == gate_library.read_bytes() and taken.path.parent == tmp_path / "taken"

    # the link is an nvcc like a compile: it waits for one of the process's compile slots (all held here)
    import contextlib
    import threading
    import time

    from r1build.gate import compile_slots

    linked: list[Library | LibraryFailure] = []
    with contextlib.ExitStack() as held:
        for _ in range(compile_slots.COMPILE_SLOTS):
            held.enter_context(compile_slots.compile_slot())
        workdir = tmp_path / "lib2"

        def build() -> None:
            done = build_library(
                variant, spec.name, "sm_90", flags=[], toolchain=real, workdir=workdir, compiled_object=kept
            )
            linked.append(done)

        link = threading.Thread(target=build)
        link.start()
        time.sleep(1.0)
        assert not linked and not (workdir / lib.path.name).exists()
    link.join(120)
    assert linked and isinstance(linked[0], Library)
