"""A build folder kept across nvccs (``-Cbuild-dir``) still builds after the nvcc changes: CMake would drop the
definitions it was given (R1BUILD_KERNELS_CMAKE among them) when its CUDA compiler changed, so r1build asks for a
fresh configure (``cmake.fresh``) and says why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.build.buildenv import PACKAGES, BuildEnv, copy_project

pytestmark = pytest.mark.slow


def test_a_kept_build_folder_builds_after_the_nvcc_changes(build_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    real = shutil.which("nvcc")
    assert real is not None
    other = tmp_path / "other-cuda" / "nvcc"  # another nvcc path, as a second CUDA install would be
    other.parent.mkdir()
    other.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    other.chmod(0o755)
    options = ["-Cbuild-dir=build"]
    logs = []
    for n, nvcc in enumerate([None, str(other)]):
        out = tmp_path / f"wheels{n}"
        out.mkdir()
        env = {"R1BUILD_NVCC": nvcc} if nvcc else {}
        proc = build_env.pip_wheel(project, out, env=env, options=options, isolated=False)
        assert proc.returncode == 0, proc.stdout[-6000:]  # the second failed: "include called with wrong number"
        assert list(out.glob("tiny-*.whl"))
        logs.append(proc.stdout)
    assert "nvcc changed" not in logs[0]
    assert "the nvcc changed since this project's last build" in logs[1] and str(other) in logs[1]
    assert "cmake.fresh" in logs[1]
