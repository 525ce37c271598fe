"""The link step's own function in every candidate library (issue 27: a launch error the candidate left unread is
named by the GPU worker through it); real nvcc and nm."""

from __future__ import annotations

import subprocess
from pathlib import Path

from r1build.evaluate.child import worker
from r1build.evaluate.library import Library, build_library
from r1build.gate.link import LAST_ERROR_SYMBOL, check_and_link
from r1build.manifest import load_manifest
from r1build.manifest.cdecl import declaration
from r1build.records import Candidate, Origin
from r1build.sandbox import unconfined
from r1build.toolchain.nvcc import toolchain
from tests.gate.gate_support import NEEDS_NVCC, ROOT, TOOLCHAIN

pytestmark = NEEDS_NVCC

UNCHECKED = Candidate(
    """#include <cuda_runtime.h>
#include <cstdint>
namespace {
__global__ void run(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t i = blockIdx.x * 2048ll + threadIdx.x;
    if (i < n) out[i] = gate[i] / (1.0f + __expf(-gate[i])) * up[i];
}
}  // namespace
extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    run<<<static_cast<unsigned>((n + 2047) / 2048), 2048, 0, stream>>>(gate, up, out, n);
    return cudaSuccess;
}
""",
    Origin("generated", model="test"),
)


def test_every_library_exports_its_own_runtimes_last_error(tmp_path: Path) -> None:
    """The worker names a launch error a launcher did not read (2048 threads a block, cudaSuccess returned) by
    calling the library's ``r1build_last_error``: linked into every candidate library beside the entry point, the
    only two functions it exports; the worker looks it up by the same name."""
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = manifest.kernel("silu_mul")
    built = build_library(
        UNCHECKED,
        spec.name,
        "sm_90",
        flags=list(manifest.settings.nvcc_flags),
        toolchain=TOOLCHAIN or toolchain(),
        workdir=tmp_path / "lib",
        declaration=declaration(spec),
    )
    assert isinstance(built, Library), built
    nm = subprocess.run(["nm", "-D", "--defined-only", str(built.path)], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if line.split()[1:2] == ["T"]}
    assert {"silu_mul", LAST_ERROR_SYMBOL} <= exported, nm.stdout
    assert worker.LAST_ERROR_SYMBOL == LAST_ERROR_SYMBOL


def test_no_entry_point_may_take_the_link_steps_name(tmp_path: Path) -> None:
    obj = tmp_path / "v.o"
    obj.write_bytes(b"")
    linked = check_and_link(
        obj, LAST_ERROR_SYMBOL, toolchain=TOOLCHAIN or toolchain(), sandbox=unconfined(), timeout_s=60
    )
    assert linked.status == "rejected" and LAST_ERROR_SYMBOL in linked.detail
