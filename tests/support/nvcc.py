"""The real nvcc for the tests that compile: the toolchain, or the test skipped where none is installed."""

from __future__ import annotations

import pytest

from r1build.errors import ToolchainError
from r1build.toolchain.nvcc import Toolchain, toolchain

__all__ = ["toolchain_or_skip"]


def toolchain_or_skip() -> Toolchain:
    """This machine's CUDA toolchain; skips the calling test where nvcc is not found."""
    try:
        return toolchain()
    except ToolchainError:
        pytest.skip("nvcc not found")
