"""sample_project end to end, built once per session the way a user gets it: sdist, then a wheel from the sdist
(with build isolation, r1build found through ``--find-links``), with the committed lock enforced
(``R1BUILD_LOCKED=1``) and an empty cache, so the wheel can only come from the lock and the vendored sources.
"""

from __future__ import annotations

import re
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.build.buildenv import SAMPLE, BuildEnv, copy_project, find_cuobjdump, sdist_names
from tests.support.shared import once_per_run

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


@dataclass(frozen=True)
class SampleBuild:
    """The sample's sdist and the wheel built from it."""

    sdist: Path
    wheel: Path
    log: str
    """The wheel build's output."""


@pytest.fixture(scope="module")
def sample_build(build_env: BuildEnv, tmp_path_factory: pytest.TempPathFactory) -> SampleBuild:
    """The sample's sdist, and the wheel pip builds from it as a user without a GPU, key or cache does; once a
    test run, whichever worker asks first."""
    with once_per_run(tmp_path_factory, "sample") as (base, made):
        if not made:
            for part in ("sample_project", "dist", "unpacked", "wheels", "empty-cache"):
                shutil.rmtree(base / part, ignore_errors=True)
            project = copy_project(SAMPLE, base / "sample_project")
            dist = base / "dist"
            dist.mkdir()
            hook = build_env.hook(project, "build_sdist", dist)
            assert hook.returncode == 0, hook.stdout[-6000:]
            (sdist,) = dist.glob("r1sample-*.tar.gz")
            wheel, proc = build_env.locked_wheel(sdist, base)
            (base / "pip.log").write_text(proc.stdout, encoding="utf-8")
    (sdist,) = (base / "dist").glob("r1sample-*.tar.gz")
    (wheel,) = (base / "wheels").glob("*.whl")
    assert wheel.name.startswith("r1sample-")
    return SampleBuild(sdist=sdist, wheel=wheel, log=(base / "pip.log").read_text(encoding="utf-8"))


def _lock_archs() -> set[str]:
    lock = tomllib.loads((SAMPLE / "kernels.lock").read_text(encoding="utf-8"))
    return {entry["arch"] for entry in lock["kernel"]}


def test_sdist_carries_manifest_lock_sources_and_vendored_winners(sample_build: SampleBuild) -> None:
    names = sdist_names(sample_build.sdist, "r1sample-0.1.0")
    vendored = {p.relative_to(SAMPLE).as_posix() for p in (SAMPLE / "kernels" / "_r1build").glob("*.cu")}
    assert vendored
    expected = {
        "kernels.toml",
        "kernels.lock",
        "references.py",
        "CMakeLists.txt",
        "src/ext.cpp",
        "kernels/gelu.cu",
        "kernels/softmax_rows.cu",
        "kernels/reduce_sum.cu",
        "kernels/matmul_tiled.cu",
    }
    assert expected | vendored <= names
    assert not [n for n in names if n.startswith(".r1build")]


def test_wheel_holds_the_emitted_bindings_and_their_stubs(sample_build: SampleBuild) -> None:
    with zipfile.ZipFile(sample_build.wheel) as zf:
        names = set(zf.namelist())
        stubs = zf.read("r1sample/_kernels.pyi").decode()
    assert {"r1sample/_kernels.py", "r1sample/_kernels.pyi", "r1sample/__init__.py"} <= names
    assert [n for n in names if re.fullmatch(r"r1sample/_kernels_ext\..*\.so", n)], sorted(names)
    assert "Numerically stable softmax" in stubs  # the manifest's description is the docstring


def test_wheel_from_sdist_used_the_lock_and_vendored_sources(sample_build: SampleBuild) -> None:
    assert "Traceback" not in sample_build.log
    assert "chosen by the static gate alone" not in sample_build.log  # every kernel came from the lock


def test_extension_holds_device_code_for_every_locked_arch(
    build_env: BuildEnv, sample_build: SampleBuild, tmp_path: Path
) -> None:
    with zipfile.ZipFile(sample_build.wheel) as zf:
        (module,) = [n for n in zf.namelist() if re.fullmatch(r"r1sample/_kernels_ext\..*\.so", n)]
        zf.extract(module, tmp_path)
    cuobjdump = find_cuobjdump(build_env)
    assert cuobjdump is not None
    listing = build_env.check([cuobjdump, "--list-elf", tmp_path / module], cwd=tmp_path)
    elf_archs = re.findall(r"\.(sm_\d+a?)\.cubin", listing)
    locked = _lock_archs()
    assert locked == {"sm_80", "sm_90"}
    assert set(elf_archs) == locked, listing
    # one cubin per kernel and arch: four kernels, each compiled for both archs
    assert all(elf_archs.count(arch) >= 4 for arch in locked), listing


def test_installed_sample_imports_and_refuses_host_arrays(
    build_env: BuildEnv, sample_build: SampleBuild, tmp_path: Path
) -> None:
    build_env.check(
        [build_env.python, "-m", "pip", "install", "--no-deps", "--force-reinstall", sample_build.wheel], cwd=tmp_path
    )
    code = (
        "import numpy as np, r1sample\n"
        "print('devices', r1sample.device_count())\n"
        "try:\n"
        "    r1sample.softmax_rows(np.ones((2, 3), np.float32))\n"
        "except TypeError as exc:\n"
        "    print('TypeError', exc)\n"
        "try:\n"
        "    r1sample.reduce_sum(np.ones(3, np.float32), out=np.ones(1, np.float32))\n"
        "except TypeError as exc:\n"
        "    print('TypeError', exc)\n"
    )
    out = build_env.check([build_env.python, "-c", code], cwd=tmp_path)
    assert re.search(r"^devices \d+$", out, re.MULTILINE), out
    assert "TypeError r1sample._kernels.softmax_rows: x must be an array on a CUDA device" in out, out
    assert "TypeError r1sample._kernels.reduce_sum: x must be an array on a CUDA device" in out, out


def test_sample_test_suite_runs_against_the_installed_wheel(
    build_env: BuildEnv, sample_build: SampleBuild, tmp_path: Path
) -> None:
    build_env.check(
        [build_env.python, "-m", "pip", "install", "--no-deps", "--force-reinstall", sample_build.wheel], cwd=tmp_path
    )
    build_env.check([build_env.python, "-m", "pip", "install", "-q", "pytest"], cwd=tmp_path)
    tests = copy_project(SAMPLE / "tests", tmp_path / "sample" / "tests")
    (tmp_path / "sample" / "pyproject.toml").write_text((SAMPLE / "pyproject.toml").read_text())
    proc = build_env.run([build_env.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests], cwd=tests.parent)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert re.search(r"\b\d+ passed\b", proc.stdout) and "failed" not in proc.stdout, proc.stdout
