"""What the sandbox tests share: whether a real Bubblewrap runs here."""

from __future__ import annotations

import os

import pytest

from r1build.sandbox.bwrap import find_bwrap, probe

BWRAP = find_bwrap()
PROBLEM = "bubblewrap (bwrap) is not installed" if BWRAP is None else probe(BWRAP)

if PROBLEM is not None and os.environ.get("R1BUILD_TEST_REQUIRE_SANDBOX") == "1":  # pragma: no cover - CI's guard
    raise RuntimeError(f"R1BUILD_TEST_REQUIRE_SANDBOX=1 and no sandbox runs here: {PROBLEM}")

needs_sandbox = pytest.mark.skipif(PROBLEM is not None, reason=f"no working bubblewrap here: {PROBLEM}")
"""Skips a test that needs the real sandbox where none runs (never under R1BUILD_TEST_REQUIRE_SANDBOX=1)."""
