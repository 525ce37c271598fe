"""What the gate's tests share: the installed nvcc (None where there is none) and the marks of a test that needs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from r1build.errors import ToolchainError
from r1build.toolchain.nvcc import Toolchain, toolchain

ROOT = Path(__file__).resolve().parents[2]

try:
    TOOLCHAIN: Toolchain | None = toolchain()
except ToolchainError:  # pragma: no cover - every development and CI machine has nvcc
    TOOLCHAIN = None

NEEDS_NVCC = [pytest.mark.slow, pytest.mark.skipif(TOOLCHAIN is None, reason="nvcc not found")]
"""The ``pytestmark`` of a module whose tests compile: seconds each, skipped where no nvcc is found."""
