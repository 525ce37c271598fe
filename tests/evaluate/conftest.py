"""Fixtures of the evaluate tests."""

from __future__ import annotations

import pytest

from r1build.manifest import Manifest, load_manifest
from tests.evaluate.evaluate_support import ROOT


@pytest.fixture(scope="session")
def root_manifest() -> Manifest:
    """The repository's own kernels.toml."""
    return load_manifest(ROOT / "kernels.toml")
