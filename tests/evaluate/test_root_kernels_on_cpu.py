"""bench/kernels_on_cpu.py: the root manifest's kernels run on the CPU stand-in for the CUDA runtime (g++ with ASan
and UBSan) against their numpy references. Each source's first variant matches, and the stand-in catches what it
is there for: a float4 access the pointers do not allow, a missing barrier, an element past the end."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from r1build.evaluate.variants import expand_variants
from r1build.manifest import Manifest, load_manifest
from r1build.records import Candidate, Origin

pytestmark = [
    pytest.mark.slow,  # a g++ compile with sanitizers and a run per variant: 1-2 s of CPU each
    pytest.mark.heavy,  # 5-42 s a kernel
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> Any:
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("kernels_on_cpu_bench", ROOT / "bench" / "kernels_on_cpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest(ROOT / "kernels.toml")


ROOT_KERNELS = [spec.name for spec in load_manifest(ROOT / "kernels.toml", check_references=False).kernels]


@pytest.mark.parametrize("kernel", ROOT_KERNELS)  # one test a kernel: the workers share the compiles
def test_each_root_source_matches_its_reference_on_the_cpu(manifest: Manifest, tmp_path: Path, kernel: str) -> None:
    bench = _bench()
    spec = manifest.kernel(kernel)
    checked = []
    seen: set[Origin] = set()
    for candidate in expand_variants(manifest, spec):
        if candidate.origin in seen:
            continue
        seen.add(candidate.origin)
        work = tmp_path / f"{spec.name}-{len(seen)}"
        why = bench.check_variant(manifest, spec, candidate, work, extra=False)  # the test shapes: quick
        assert why is None, f"{spec.name} {candidate.origin.path} {candidate.defines}: {why}"
        checked.append(candidate.origin.path)
    assert checked and len(checked) == len({*checked})


@pytest.mark.parametrize(
    ("kernel", "path", "old", "new", "expect"),
    [
        # the float4 path taken whenever the pointers are 4-byte aligned: UBSan names the misaligned access
        ("silu_mul", "kernels/silu_mul_vec4.cu", "& 15) == 0;", "& 3) == 0;", "misaligned address"),
        # no barrier between the tile's writes and reads: threads read elements no thread has written yet
        ("transpose", "kernels/transpose.cu", "    __syncthreads();\n", "", "inputs: y"),
        # one element past the end: AddressSanitizer
        ("silu_mul", "kernels/silu_mul.cu", "for (; i < n; i += stride)", "for (; i <= n; i += stride)", "overflow"),
    ],
    ids=["misaligned-float4", "missing-barrier", "past-the-end"],
)
def test_the_stand_in_catches_a_broken_kernel(
    manifest: Manifest, tmp_path: Path, kernel: str, path: str, old: str, new: str, expect: str
) -> None:
    source = (ROOT / path).read_text(encoding="utf-8")
    assert old in source
    broken = Candidate(source.replace(old, new, 1), Origin("file", path))
    why = _bench().check_variant(manifest, manifest.kernel(kernel), broken, tmp_path / "broken", extra=False)
    assert why is not None and expect in why, why
