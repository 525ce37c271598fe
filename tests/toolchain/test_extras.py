"""The optional dependencies: each names the extra that installs it, and a build that must measure on a GPU
without cupy stops naming it (tests/build/test_light_build.py covers generation in a venv without openai)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from r1build.errors import MissingExtraError
from r1build.records import ResolveOptions
from r1build.resolve import prepare_build
from r1build.toolchain.extras import CHECK, CUPY, GENERATE, installed

ROOT = Path(__file__).resolve().parents[2]


def test_each_extra_names_how_to_install_it() -> None:
    assert GENERATE.install_hint() == "pip install 'r1build[generate]'"
    assert CHECK.install_hint() == "pip install 'r1build[check]'"
    assert CUPY.install_hint() == "pip install 'r1build[cuda13]' or pip install 'r1build[cuda12]'"
    error = GENERATE.missing()
    assert isinstance(error, MissingExtraError) and error.exit_code == 2 and error.extra == "generate"
    assert "openai" in str(error)
    assert installed("json") and not installed("r1build_no_such_module")


@pytest.mark.skipif(CUPY.installed(), reason="cupy is installed here")
def test_a_build_that_must_measure_without_cupy_names_the_extra(tmp_path: Path) -> None:
    project = tmp_path / "tiny"
    shutil.copytree(ROOT / "tests" / "packages" / "tiny", project)
    with pytest.raises(MissingExtraError, match=r"pip install 'r1build\[cuda13\]'"):
        prepare_build(project, ResolveOptions(evaluate=True, cache_dir=tmp_path / "cache"))
    assert not (project / ".r1build" / "generated").exists()
