"""Static device memory and the link at the gate (issue 27): a candidate with a 4 GiB ``__device__`` array passed
the gate (ptxas reports "0 bytes gmem" for it: its sizes wrap at 4 GiB) and then failed the GPU side's library
link with a relocation error. The gate reads the sizes from the symbol tables and links as the GPU side links,
with the real nvcc."""

from __future__ import annotations

from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.evaluate.library import LibraryFailure, build_library
from r1build.gate import StaticGate
from r1build.gate.device_memory import STATIC_MEMORY_LIMIT
from r1build.manifest import Manifest, load_manifest
from r1build.manifest.cdecl import declaration
from r1build.records import Candidate, Origin
from r1build.toolchain.nvcc import toolchain
from tests.gate.gate_support import NEEDS_NVCC, ROOT, TOOLCHAIN

pytestmark = NEEDS_NVCC

LAUNCHER = """
extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    run<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
"""


def candidate(state: str, use: str) -> Candidate:
    """A silu_mul candidate with ``state`` (a declaration) at namespace scope, ``use`` the first statement of its
    kernel."""
    source = f"""#include <cuda_runtime.h>
#include <cstdint>
namespace {{
{state}
__global__ void run(const float* gate, const float* up, float* out, int64_t n) {{
    const int64_t i = blockIdx.x * 256ll + threadIdx.x;
    if (i >= n) return;
    {use}
    const float g = gate[i];
    out[i] = g / (1.0f + __expf(-g)) * up[i];
}}
}}  // namespace
{LAUNCHER}"""
    return Candidate(source, Origin("generated", model="test"))


FOUR_GIB = candidate("__device__ float scratch[1ull << 30];", "scratch[i] = gate[i];")
TWO_GIB_IN_A_FUNCTION = candidate(
    "", "static __device__ float hidden[1ull << 29]; hidden[i] += gate[i]; if (hidden[i] == 1.5f) return;"
)
SMALL = candidate("__device__ float scratch[1024];", "scratch[i & 1023] = gate[i];")


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest(ROOT / "kernels.toml")


def test_static_arrays_over_the_limit_are_rejected_at_the_gate_naming_them(manifest: Manifest, tmp_path: Path) -> None:
    spec = manifest.kernel("silu_mul")
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache)
        four, two, small = gate.judge(manifest, spec, [("sm_90", c) for c in (FOUR_GIB, TWO_GIB_IN_A_FUNCTION, SMALL)])
    assert four.status == "rejected" and four.stage == "gate", four.detail
    assert (
        "static memory" in four.detail and "(anonymous namespace)::scratch is 4294967296 bytes (4 GiB)" in four.detail
    )
    assert "over the limit of 1073741824 bytes (1 GiB)" in four.detail
    assert four.gate is not None and four.gate.registers > 0  # the report that said nothing of it is kept
    # a function-scope static has no host shadow: it is read from the device code's symbols
    assert two.status == "rejected" and "::hidden is 2147483648 bytes (2 GiB)" in two.detail, two.detail
    assert small.status == "passed", small.detail


def test_the_gate_links_the_library_the_gpu_side_links(manifest: Manifest, tmp_path: Path) -> None:
    spec = manifest.kernel("silu_mul")
    with Cache(tmp_path / "cache") as cache:
        # past a limit that lets it through, the 4 GiB array's host shadow does not link into a shared library
        lenient = StaticGate(cache, static_memory_limit=8 << 30)
        (result,) = lenient.judge(manifest, spec, [("sm_90", FOUR_GIB)])
    assert result.status == "rejected" and result.stage == "gate", result.detail
    assert "does not link into a shared library" in result.detail and "relocation" in result.detail
    # the GPU side's library build takes the same step, and refuses the object for the same reason
    built = build_library(
        FOUR_GIB,
        spec.name,
        "sm_90",
        flags=list(manifest.settings.nvcc_flags),
        toolchain=TOOLCHAIN or toolchain(),
        workdir=tmp_path / "lib",
        declaration=declaration(spec),
    )
    assert isinstance(built, LibraryFailure) and built.status == "rejected"
    assert "4294967296 bytes" in built.detail and f"{STATIC_MEMORY_LIMIT} bytes" in built.detail
