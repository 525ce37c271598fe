"""What the sandbox tests share: whether a real Bubblewrap runs here; for the confined compiles, nvcc and a
kernel to compile."""

from __future__ import annotations

import os

import pytest

from r1build.errors import ToolchainError
from r1build.sandbox.bwrap import find_bwrap, probe
from r1build.toolchain.nvcc import Toolchain, toolchain

BWRAP = find_bwrap()
PROBLEM = "bubblewrap (bwrap) is not installed" if BWRAP is None else probe(BWRAP)

if PROBLEM is not None and os.environ.get("R1BUILD_TEST_REQUIRE_SANDBOX") == "1":  # pragma: no cover - CI's guard
    raise RuntimeError(f"R1BUILD_TEST_REQUIRE_SANDBOX=1 and no sandbox runs here: {PROBLEM}")

needs_sandbox = pytest.mark.skipif(PROBLEM is not None, reason=f"no working bubblewrap here: {PROBLEM}")
"""Skips a test that needs the real sandbox where none runs (never under R1BUILD_TEST_REQUIRE_SANDBOX=1)."""

try:
    TOOLCHAIN: Toolchain | None = toolchain()
except ToolchainError:  # pragma: no cover - every development and CI machine has nvcc
    TOOLCHAIN = None
COMPILES = [pytest.mark.slow, needs_sandbox, pytest.mark.skipif(TOOLCHAIN is None, reason="nvcc not found")]
"""The marks of a module of confined compiles: slow, the real sandbox, nvcc."""

KERNEL = """
#include <cuda_runtime.h>
namespace { __global__ void fill(float* x) { x[threadIdx.x] = 1.0f; } }
extern "C" cudaError_t run(float* x, cudaStream_t s) { fill<<<1, 32, 0, s>>>(x); return cudaGetLastError(); }
"""
"""A small valid candidate exporting ``run``, which an attack is put in front of."""
