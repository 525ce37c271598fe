"""A light build: r1build without its extras (no openai, no numpy, no cupy) builds a locked project offline, and
the commands that need an extra say which one to install.

The venv here holds the r1build wheel alone (its own requirements, no extra); the builds are real pip builds
of tests/packages/tiny, with and without build isolation.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.build.buildenv import PACKAGES, BuildEnv, copy_project, copy_venv
from tests.support.shared import once_per_run

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

_HEAVY = ("openai", "pydantic", "httpx", "numpy", "cupy")


@pytest.fixture(scope="module")
def light_env(tmp_path_factory: pytest.TempPathFactory, build_env: BuildEnv) -> Iterator[BuildEnv]:
    """A fresh venv with the bare r1build wheel: what a host build's environment holds (made once a test run, each
    worker's module its own copy)."""
    with once_per_run(tmp_path_factory, "light-env") as (shared, made):
        template = BuildEnv(root=shared / "venv", wheels=build_env.wheels, cache_dir=shared / "unused", isolated=True)
        if not made:
            shutil.rmtree(template.root, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(template.root)], check=True, timeout=300)
            (wheel,) = build_env.wheels.glob("r1build-*.whl")
            template.check([template.python, "-m", "pip", "install", "-q", wheel], cwd=shared)
    base = tmp_path_factory.mktemp("light-env")
    venv = copy_venv(template.root, base / "venv")
    yield BuildEnv(root=venv, wheels=build_env.wheels, cache_dir=base / "r1build-cache", isolated=True)


def _installed(env: BuildEnv) -> set[str]:
    out = env.run([env.python, "-m", "pip", "list", "--format=json"], cwd=env.root, env={"PIP_NO_COLOR": "1"})
    start = out.stdout.index("[")
    return {
        re.sub(r"[-_.]+", "-", d["name"]).lower() for d in json.loads(out.stdout[start : out.stdout.rindex("]") + 1])
    }


def _locked_tiny(env: BuildEnv, dest: Path) -> Path:
    project = copy_project(PACKAGES / "tiny", dest)
    env.check(["r1build", "lock", "--offline", "-m", project], cwd=project)
    assert (project / "kernels.lock").is_file()
    return project


def test_the_bare_install_holds_none_of_the_extras(light_env: BuildEnv) -> None:
    installed = _installed(light_env)
    assert "r1build" in installed and "scikit-build-core" in installed
    assert not {name for name in installed if name.startswith(_HEAVY)}, sorted(installed)


def test_a_locked_offline_build_needs_no_extra(light_env: BuildEnv, tmp_path: Path) -> None:
    project = _locked_tiny(light_env, tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    env = {"R1BUILD_LOCKED": "1"}

    # without build isolation: the light venv is the build environment
    proc = light_env.pip_wheel(project, out, env=env, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert list(out.glob("tiny-0.1.0-*.whl"))

    # isolated: pip installs what [build-system] requires (r1build, from the wheel folder) and nothing heavy
    for wheel in out.glob("*.whl"):
        wheel.unlink()
    proc = light_env.pip_wheel(project, out, env=env, isolated=True)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert list(out.glob("tiny-0.1.0-*.whl"))
    lines = [line for line in proc.stdout.splitlines() if "Successfully installed" in line]
    assert lines, proc.stdout[-6000:]
    build_deps = {name.lower() for line in lines for name in re.findall(r"(\S+)-\d\S*", line)}
    assert "r1build" in build_deps, lines
    assert not {name for name in build_deps if name.startswith(_HEAVY)}, lines


def test_commands_that_need_an_extra_name_it(light_env: BuildEnv, tmp_path: Path) -> None:
    project = _locked_tiny(light_env, tmp_path / "tiny")
    endpoint = {"R1BUILD_OFFLINE": "0", "R1BUILD_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-x"}

    proc = light_env.run(["r1build", "generate", "scale", "-m", project], cwd=project, env=endpoint)
    assert proc.returncode == 2, proc.stdout
    assert "pip install 'r1build[generate]'" in proc.stdout and "openai" in proc.stdout
    assert "Traceback" not in proc.stdout

    proc = light_env.run(["r1build", "replay", "scale", "-m", project], cwd=project)
    assert proc.returncode == 2, proc.stdout
    assert "pip install 'r1build[generate]'" in proc.stdout and "Traceback" not in proc.stdout

    # resolve with an endpoint configured and a miss (no lock, a fresh cache) would generate
    unlocked = copy_project(PACKAGES / "tiny", tmp_path / "unlocked")
    fresh = {**endpoint, "R1BUILD_CACHE_DIR": str(tmp_path / "fresh-cache")}
    proc = light_env.run(["r1build", "resolve", "--no-gpu", "-m", unlocked], cwd=unlocked, env=fresh)
    assert proc.returncode == 2, proc.stdout
    assert "pip install 'r1build[generate]'" in proc.stdout and "Traceback" not in proc.stdout

    proc = light_env.run(["r1build", "check", "-m", project], cwd=project)
    assert proc.returncode == 2, proc.stdout
    assert "pip install 'r1build[check]'" in proc.stdout and "Traceback" not in proc.stdout

    # the commands that need no extra work: the lock is current, status reads it
    light_env.check(["r1build", "lock", "--check", "-m", project], cwd=project)
    assert "locked" in light_env.check(["r1build", "status", "-m", project], cwd=project)


def test_a_build_that_opts_in_without_openai_warns_and_builds(light_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")  # no lock: a miss
    out = tmp_path / "out"
    out.mkdir()
    env = {
        "R1BUILD_OFFLINE": "0",
        "R1BUILD_GENERATE": "1",
        "R1BUILD_BASE_URL": "http://127.0.0.1:9/v1",
        "R1BUILD_CACHE_DIR": str(tmp_path / "fresh-cache"),
    }
    proc = light_env.pip_wheel(project, out, env=env, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "openai is not installed in the build environment" in proc.stdout
    assert "r1build[generate]" in proc.stdout
    assert list(out.glob("tiny-0.1.0-*.whl"))
