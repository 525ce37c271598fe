"""Fixtures for the generate stage's tests (helpers live in gen_support.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.generate.gen_support import MarkerJudge, Project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    (tmp_path / "proj").mkdir()
    return Project(tmp_path / "proj", tmp_path / "cache")


@pytest.fixture
def judge() -> MarkerJudge:
    return MarkerJudge()


Clock = Callable[[], float]


@pytest.fixture
def stopwatch() -> Iterator[Clock]:
    start = time.monotonic()
    yield lambda: time.monotonic() - start
