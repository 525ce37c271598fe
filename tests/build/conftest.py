"""Fixtures for build tests: a fresh virtual environment with r1build installed from this checkout.

One wheel of r1build is built per test run and installed, with nanobind, into one fresh ``python -m venv``, which
each worker copies (installing its dependencies took some 10 s of a worker, copying takes one); every build test runs
its frontend (pip) or the backend's hooks with its worker's venv's Python, in a copy of the project under a temp
folder, with ``R1BUILD_CACHE_DIR`` pointing at a per-session cache and ``R1BUILD_OFFLINE=1``. pip's own cache
is used, so only the first session on a machine downloads anything.

``R1BUILD_TEST_SYSTEM_SITE=1`` makes the venv with ``--system-site-packages``, installs r1build without its
dependencies and builds without build isolation: for a machine whose package index is out of reach but whose
Python already has r1build's dependencies, nanobind and, for the sample's GPU tests, cupy or torch
(``R1BUILD_TEST_SITE_PATH``, a PYTHONPATH, names where they are when that Python is itself a venv).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.build.buildenv import ROOT, BuildEnv, copy_venv, find_cuobjdump
from tests.support.shared import once_per_run


@pytest.fixture(scope="session")
def r1build_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of r1build built from this checkout, once a test run for every worker; the folder holding it."""
    with once_per_run(tmp_path_factory, "r1build-wheel") as (out, made):
        if not made:
            # without an index, the build backend (hatchling) comes from this Python, not an isolated environment
            offline = ["--no-build-isolation"] if os.environ.get("R1BUILD_TEST_SYSTEM_SITE") == "1" else []
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", *offline, "-q", "-w", str(out), str(ROOT)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=600,
                check=False,
            )
            assert proc.returncode == 0, proc.stdout[-4000:]
            assert list(out.glob("r1build-*.whl")), proc.stdout[-4000:]
    return out


@pytest.fixture(scope="session")
def build_env(tmp_path_factory: pytest.TempPathFactory, r1build_wheel: Path) -> Iterator[BuildEnv]:
    """A fresh venv with the r1build wheel installed (and cuobjdump where the machine has none): each worker's
    own copy of one made once a test run (tests install into it, so the workers never share one)."""
    system_site = os.environ.get("R1BUILD_TEST_SYSTEM_SITE") == "1"
    with once_per_run(tmp_path_factory, "build-env") as (shared, made):
        template = BuildEnv(root=shared / "venv", wheels=r1build_wheel, cache_dir=shared / "unused", isolated=False)
        if not made:
            shutil.rmtree(template.root, ignore_errors=True)
            args = [sys.executable, "-m", "venv", str(template.root)]
            subprocess.run(args + (["--system-site-packages"] if system_site else []), check=True, timeout=300)
            (wheel,) = r1build_wheel.glob("r1build-*.whl")
            # with the generate extra, so the builds that opt in to generating reach the endpoint
            # (test_light_build.py builds in a venv without it)
            requirements: list[str | Path] = [f"r1build[generate] @ {wheel.as_uri()}"]
            if not system_site:
                # the bindings' build requirement, for test_build_bindings.py's build without isolation (with
                # R1BUILD_TEST_SYSTEM_SITE=1 the machine's Python has it)
                requirements.append("nanobind>=2")
            if find_cuobjdump(template) is None:
                requirements.append("nvidia-cuda-cuobjdump")
            offline = ["--no-deps"] if system_site else []  # the machine's Python has them (see the docstring)
            template.check([template.python, "-m", "pip", "install", "-q", *offline, *requirements], cwd=shared)
    base = tmp_path_factory.mktemp("build-env")
    venv = copy_venv(template.root, base / "venv")
    yield BuildEnv(root=venv, wheels=r1build_wheel, cache_dir=base / "r1build-cache", isolated=not system_site)
