"""Fixtures for r1sample's tests: the array libraries present here, and a GPU to run on (else the test skips)."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


def _cuda_library(name: str) -> ModuleType | None:
    """cupy or torch when it imports and sees a CUDA device, else None."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    try:
        if name == "cupy":
            return module if module.cuda.runtime.getDeviceCount() > 0 else None
        return module if module.cuda.is_available() else None
    except Exception:  # no driver, no device: the library cannot be used here
        return None


@pytest.fixture(params=["cupy", "torch"])
def xp(request: pytest.FixtureRequest) -> ModuleType:
    """The array library under test (cupy, then torch); skips where it or a GPU is missing."""
    module = _cuda_library(request.param)
    if module is None:
        pytest.skip(f"{request.param} with a CUDA device is not available here")
    return module
