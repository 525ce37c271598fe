"""A project whose hand-written kernel includes a header of its own through ``nvcc-flags = ["-Iinc"]`` (the
README: "your own sources are trusted and may include project headers through -I flags"): the gate, which
compiles in a scratch folder, and CMake, which compiles in its build folder, both find the header under the
manifest's folder; the lock made from it stays checkout-independent; the sdist carries the header folder even
where ``sdist.exclude`` would leave it out, and a locked wheel builds from that sdist with an empty cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from r1build.emit import CMAKE_NAME, Winner, render_files
from r1build.manifest import load_manifest
from r1build.manifest.flags import rooted_flags
from r1build.records import Candidate, Origin
from tests.build.buildenv import PACKAGES, BuildEnv, copy_project, sdist_names

HEADER = "#pragma once\n#define TINY_FACTOR 2.0f\n"


def _with_header(dest: Path) -> Path:
    """tests/packages/tiny whose baseline takes its factor from ``inc/tiny_factor.cuh`` (``-Iinc``), with the
    header folder excluded from the sdist by the project's own settings."""
    project = copy_project(PACKAGES / "tiny", dest)
    (project / "inc").mkdir()
    (project / "inc" / "tiny_factor.cuh").write_text(HEADER, encoding="utf-8")
    source = project / "scale.cu"
    text = source.read_text(encoding="utf-8")
    assert "2.0f * x[i]" in text
    source.write_text('#include "tiny_factor.cuh"\n' + text.replace("2.0f * x[i]", "TINY_FACTOR * x[i]"))
    manifest = project / "kernels.toml"
    text = manifest.read_text(encoding="utf-8")
    assert 'archs = ["sm_90"]\n' in text
    manifest.write_text(text.replace('archs = ["sm_90"]\n', 'archs = ["sm_90"]\nnvcc-flags = ["-O3", "-Iinc"]\n'))
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8") + 'sdist.exclude = ["inc/"]\n', encoding="utf-8")
    return project


def test_relative_include_folders_are_rooted_at_the_manifest(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    flags = ["-O3", "-Iinc", "--include-path=a,/abs/b", "-isystem=third", "-I/usr/include/x", "-DX=1"]
    assert rooted_flags(flags, root) == [
        "-O3",
        f"-I{root / 'inc'}",
        f"--include-path={root / 'a'},/abs/b",
        f"-isystem={root / 'third'}",
        "-I/usr/include/x",
        "-DX=1",
    ]


def test_the_cmake_file_names_include_folders_relative_to_itself(tmp_path: Path) -> None:
    project = _with_header(tmp_path / "tiny")
    manifest = load_manifest(project / "kernels.toml")
    spec = manifest.kernel("scale")
    winner = Winner(spec, "sm_90", Candidate((project / "scale.cu").read_text(), Origin("baseline", "scale.cu")))
    here = render_files(manifest, [winner], project / ".r1build" / "generated")[CMAKE_NAME]
    elsewhere = render_files(manifest, [winner], tmp_path / "out")[CMAKE_NAME]
    assert 'target_include_directories(r1build_kernels PRIVATE "${_r1build_dir}/../../inc")' in here
    assert 'target_include_directories(r1build_kernels PRIVATE "${_r1build_dir}/../tiny/inc")' in elsewhere
    assert "-Iinc" not in here and str(tmp_path) not in here  # no flag CMake would resolve in its build folder


@pytest.mark.slow
@pytest.mark.heavy  # a whole-package build
def test_a_kernel_including_a_project_header_locks_ships_and_builds(build_env: BuildEnv, tmp_path: Path) -> None:
    project = _with_header(tmp_path / "tiny")
    cache = {"R1BUILD_CACHE_DIR": str(tmp_path / "cache")}
    # the gate compiles the baseline in a scratch folder: -Iinc must still find the header
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project, env=cache)
    lock = (project / "kernels.lock").read_text(encoding="utf-8")
    assert 'name = "scale"' in lock and str(tmp_path) not in lock

    dist = tmp_path / "dist"
    dist.mkdir()
    hook = build_env.hook(project, "build_sdist", dist)
    assert hook.returncode == 0, hook.stdout[-6000:]
    (sdist,) = dist.glob("tiny-*.tar.gz")
    names = sdist_names(sdist, "tiny-0.1.0")
    assert "inc/tiny_factor.cuh" in names, sorted(names)

    wheel, proc = build_env.locked_wheel(sdist, tmp_path, isolated=False)
    assert "Traceback" not in proc.stdout
    assert wheel.name.startswith("tiny-0.1.0-")


@pytest.mark.slow
@pytest.mark.heavy  # its build environment (the r1build wheel): 30 s
def test_a_gate_verdict_is_keyed_on_the_headers_it_compiled_with(build_env: BuildEnv, tmp_path: Path) -> None:
    """Two checkouts sharing one cache: the verdict of a checkout missing the header (a compile error) is not
    the verdict of one that has it, and a header edited into an error is compiled again, not passed from the
    cache."""
    cache = {"R1BUILD_CACHE_DIR": str(tmp_path / "shared-cache")}
    broken = _with_header(tmp_path / "a" / "tiny")
    (broken / "inc" / "tiny_factor.cuh").unlink()
    missing = build_env.run(["r1build", "lock", "--offline", "-m", broken], cwd=broken, env=cache)
    assert missing.returncode == 1 and "tiny_factor.cuh: No such file or directory" in missing.stdout, missing.stdout

    project = _with_header(tmp_path / "b" / "tiny")
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project, env=cache)

    (project / "inc" / "tiny_factor.cuh").write_text(HEADER + "#error edited into an error\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    proc = build_env.pip_wheel(project, out, env={**cache, "R1BUILD_LOCKED": "1"}, isolated=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stdout
    assert "r1build: error:" in proc.stdout and "edited into an error" in proc.stdout, proc.stdout[-4000:]
