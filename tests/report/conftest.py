"""Fixtures of the report and dataset tests: the generate stage's chat server and project helpers, Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.generate.gen_support import Project
from tests.report.chromium import chromium
from tests.report.searches import run_search


@pytest.fixture
def project(tmp_path: Path) -> Project:
    (tmp_path / "proj").mkdir()
    return Project(tmp_path / "proj", tmp_path / "cache")


@pytest.fixture
def browser() -> str:
    found = chromium()
    if found is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    return found


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("R1BUILD_BASE_URL", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def searched(project: Project, clean_env: None, monkeypatch: pytest.MonkeyPatch) -> Project:
    """The project after a real search (:func:`searches.run_search`)."""
    run_search(project, monkeypatch)
    return project
