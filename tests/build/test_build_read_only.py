"""A wheel built from a project folder that cannot be written (a read-only checkout or mount; scikit-build-core
itself builds from one, in a temporary build folder): the kernels are generated into a temporary folder for that
build, nothing is written into the project, and the wheel is the one a writable checkout gives, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.build.buildenv import PACKAGES, BuildEnv, copy_project
from tests.damage import read_only_tree

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

EPOCH = {"SOURCE_DATE_EPOCH": "1700000000"}


def test_a_read_only_project_builds_the_same_wheel(build_env: BuildEnv, tmp_path: Path) -> None:
    writable = copy_project(PACKAGES / "tiny", tmp_path / "writable" / "tiny")
    cache = {"R1BUILD_CACHE_DIR": str(tmp_path / "cache"), **EPOCH}
    build_env.check(["r1build", "lock", "--offline", "-m", writable], cwd=writable, env=cache)
    read_only = copy_project(writable, tmp_path / "read-only" / "tiny")

    out = tmp_path / "out-writable"
    out.mkdir()
    proc = build_env.pip_wheel(writable, out, env={**cache, "R1BUILD_LOCKED": "1"}, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    (expected,) = out.glob("tiny-0.1.0-*.whl")

    out = tmp_path / "out-read-only"
    out.mkdir()
    with read_only_tree(read_only):
        proc = build_env.pip_wheel(read_only, out, env={**cache, "R1BUILD_LOCKED": "1"}, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "Traceback" not in proc.stdout
    assert "cannot be written" in proc.stdout and "for this build only" in proc.stdout, proc.stdout[-4000:]
    assert not (read_only / ".r1build").exists()
    (wheel,) = out.glob("tiny-0.1.0-*.whl")
    assert wheel.read_bytes() == expected.read_bytes()


def test_a_generated_folder_left_read_only_by_an_earlier_build(build_env: BuildEnv, tmp_path: Path) -> None:
    """``.r1build/generated`` made by an earlier build that this one cannot write (another user's, say): the
    build generates elsewhere instead of failing to write there."""
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    cache = {"R1BUILD_CACHE_DIR": str(tmp_path / "cache")}
    first = build_env.pip_wheel(project, out, env=cache, isolated=False)
    assert first.returncode == 0, first.stdout[-6000:]
    generated = project / ".r1build" / "generated"
    before = {p.name: p.read_bytes() for p in generated.iterdir()}
    source = project / "scale.cu"
    source.write_text(source.read_text(encoding="utf-8") + "// edited\n", encoding="utf-8")
    for wheel in out.glob("*.whl"):
        wheel.unlink()
    with read_only_tree(generated):
        again = build_env.pip_wheel(project, out, env=cache, isolated=False)
    assert again.returncode == 0, again.stdout[-6000:]
    assert f"{generated} cannot be written" in again.stdout, again.stdout[-4000:]
    assert list(out.glob("tiny-0.1.0-*.whl"))
    assert {p.name: p.read_bytes() for p in generated.iterdir()} == before
