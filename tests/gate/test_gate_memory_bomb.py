"""A compile of model-written code may map only so much memory (``compile_memory``): an answer whose preprocessor
doubles a macro thirty times grew ``cc1plus`` to 22 GB, until the kernel's OOM killer picked a process of the
machine, in a search whose budget was 60 s. With the limit the compile ends in seconds, refused for what it is."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.gate import StaticGate
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin
from r1build.sandbox import compile_memory
from tests.gate.gate_support import NEEDS_NVCC, ROOT

pytestmark = [*NEEDS_NVCC, pytest.mark.heavy]  # a bomb run out of its memory: 30 s

DOUBLINGS = "\n".join(["#define A0 x", *(f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, 31))])

BOMB = f"""#include <cuda_runtime.h>
#include <cstdint>
{DOUBLINGS}
#define TEXT2(x) #x
#define TEXT(x) TEXT2(x)
__global__ void run(const float* gate, const float* up, float* out, int64_t n) {{
    const int64_t i = blockIdx.x * 256ll + threadIdx.x;
    if (i < n) out[i] = gate[i] * up[i] * (float)sizeof(TEXT(A30));
}}
extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {{
    run<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}}
"""


def test_a_preprocessor_bomb_runs_out_of_its_memory_in_seconds(tmp_path: Path) -> None:
    manifest = load_manifest(ROOT / "kernels.toml")
    start = time.monotonic()
    with Cache(tmp_path / "cache") as cache:
        (result,) = StaticGate(cache).judge(
            manifest, manifest.kernel("silu_mul"), [("sm_90", Candidate(BOMB, Origin("generated", model="test")))]
        )
    took = time.monotonic() - start
    assert result.status != "passed" and result.stage == "gate", result.detail
    assert "out of memory" in result.detail, result.detail
    assert took < 60, f"{took:.1f} s"
    assert 2 << 30 <= compile_memory() <= 8 << 30
