"""Fixtures of the report and dataset tests: the generate stage's chat server and project helpers, Chromium."""

from __future__ import annotations

import shutil
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


_SEARCH_ENV = ("R1BUILD_BASE_URL", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_OFFLINE")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _SEARCH_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def search_template(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The project and cache after a real search (:func:`searches.run_search`), once per test process; tests read
    copies of it (:func:`searched`), never this one."""
    base = tmp_path_factory.mktemp("search-template")
    template = Project(base / "proj", base / "cache")
    template.root.mkdir()
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in _SEARCH_ENV:
            monkeypatch.delenv(name, raising=False)
        run_search(template, monkeypatch)
    return template


@pytest.fixture
def searched(search_template: Project, tmp_path: Path, clean_env: None) -> Project:
    """The project after a real search: a copy of :func:`search_template`'s project and cache in the test's own
    folder (the search is the same for every test; the records are only read)."""
    copy = Project(tmp_path / "proj", tmp_path / "cache")
    shutil.copytree(search_template.root, copy.root)
    shutil.copytree(search_template.cache_dir, copy.cache_dir)
    return copy
