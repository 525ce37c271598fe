"""A build folder kept across nvccs (``-Cbuild-dir``) still builds after the nvcc changes: CMake would drop the
definitions it was given (R1BUILD_KERNELS_CMAKE among them) when its CUDA compiler changed, so r1build asks for a
fresh configure (``cmake.fresh``) and says why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from r1build.build.fresh import RECORD_NAME, fresh_if_nvcc_changed
from tests.build.buildenv import PACKAGES, BuildEnv, copy_project

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


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


def test_a_record_of_the_last_nvcc_nested_too_deeply_is_no_record(tmp_path: Path) -> None:
    """``.r1build/last-nvcc.json`` is a file in the project (a checkout, a merge may damage it): one of 100,000
    nested arrays ended a build with a RecursionError traceback. It is no record: the build goes on and writes it
    anew."""
    record = tmp_path / ".r1build" / RECORD_NAME
    record.parent.mkdir()
    record.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    settings: dict[str, str | list[str]] = {}
    fresh_if_nvcc_changed(tmp_path, "/opt/cuda/bin/nvcc", settings)
    assert settings == {} and json.loads(record.read_text(encoding="utf-8")) == {"nvcc": "/opt/cuda/bin/nvcc"}
