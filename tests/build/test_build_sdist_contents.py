"""What an sdist holds when the cache folder lies inside the project (``R1BUILD_CACHE_DIR=.r1cache`` in CI, or
the config setting ``r1build.cache-dir``): never the cache's database, blobs, transcripts or the build machine's
nvcc paths, while the manifest, lock and sources are still carried, and a wheel still builds from it."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.build.buildenv import PACKAGES, BuildEnv, copy_project, unpack_sdist

pytestmark = pytest.mark.slow

CARRIED = {"kernels.toml", "kernels.lock", "reference.py", "scale.cu", "pyproject.toml", "CMakeLists.txt", "tiny.c"}


def _sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as tar:
        return {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}


@pytest.mark.parametrize("how", ["environment", "config setting"])
def test_a_cache_inside_the_project_stays_out_of_the_sdist(build_env: BuildEnv, tmp_path: Path, how: str) -> None:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    inside = {"R1BUILD_CACHE_DIR": str(project / ".r1cache")}
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project, env=inside)
    assert (project / ".r1cache" / "cache.db").is_file()  # the lock's decisions and gate results are in there

    dist = tmp_path / "dist"
    dist.mkdir()
    if how == "environment":  # relative, as a CI script sets it: the backend runs in the project
        proc = build_env.hook(project, "build_sdist", dist, env={"R1BUILD_CACHE_DIR": ".r1cache"})
    else:
        code = (
            "import r1build.build as backend; "
            f"print(backend.build_sdist({str(dist)!r}, {{'r1build.cache-dir': '.r1cache'}}))"
        )
        proc = build_env.run([build_env.python, "-c", code], cwd=project)
    assert proc.returncode == 0, proc.stdout[-6000:]
    (sdist,) = dist.glob("tiny-*.tar.gz")
    names = _sdist_names(sdist)
    assert not [n for n in names if n.startswith(".r1cache")], sorted(names)
    assert names >= CARRIED, sorted(names)

    unpacked = unpack_sdist(sdist, tmp_path / "unpacked")
    out = tmp_path / "out"
    out.mkdir()
    env = {"R1BUILD_LOCKED": "1", "R1BUILD_CACHE_DIR": str(tmp_path / "empty-cache")}
    wheel = build_env.pip_wheel(unpacked, out, env=env, isolated=False)
    assert wheel.returncode == 0, wheel.stdout[-6000:]
    assert list(out.glob("tiny-0.1.0-*.whl"))
