"""What an sdist holds when the cache folder lies inside the project (``R1BUILD_CACHE_DIR=.r1cache`` in CI, or
the config setting ``r1build.cache-dir``): never the cache's database, blobs, transcripts or the build machine's
nvcc paths, while the manifest, lock and sources are still carried, and a wheel still builds from it. Nor the
private key ``r1build key generate`` writes into the folder it runs in."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from tests.build.buildenv import PACKAGES, BuildEnv, copy_project, sdist_names

pytestmark = pytest.mark.slow

CARRIED = {"kernels.toml", "kernels.lock", "reference.py", "scale.cu", "pyproject.toml", "CMakeLists.txt", "tiny.c"}


def _sdist_files(sdist: Path) -> dict[str, bytes]:
    """The regular files of an sdist and their bytes, by name."""
    files: dict[str, bytes] = {}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member) if member.isfile() else None
            if data is not None:
                files[member.name] = data.read()
    return files


def test_a_cache_inside_the_project_stays_out_of_the_sdist(build_env: BuildEnv, tmp_path: Path) -> None:
    """The cache named inside the project both ways, by the environment and by the config setting: each sdist,
    made from its own copy of the locked project, leaves the cache out and carries the rest; the two hold the
    same files, byte for byte, so the wheel built from one is the wheel of either."""
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    inside = {"R1BUILD_CACHE_DIR": str(project / ".r1cache")}
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project, env=inside)
    assert (project / ".r1cache" / "cache.db").is_file()  # the lock's decisions and gate results are in there

    sdists: dict[str, Path] = {}
    listed: dict[str, set[str]] = {}
    for how in ("environment", "config setting"):
        own = shutil.copytree(project, tmp_path / how / "tiny", symlinks=True)  # as the lock left it, cache and all
        dist = tmp_path / how / "dist"
        dist.mkdir()
        if how == "environment":  # relative, as a CI script sets it: the backend runs in the project
            proc = build_env.hook(own, "build_sdist", dist, env={"R1BUILD_CACHE_DIR": ".r1cache"})
        else:
            code = (
                "import r1build.build as backend; "
                f"print(backend.build_sdist({str(dist)!r}, {{'r1build.cache-dir': '.r1cache'}}))"
            )
            proc = build_env.run([build_env.python, "-c", code], cwd=own)
        assert proc.returncode == 0, (how, proc.stdout[-6000:])
        (sdist,) = dist.glob("tiny-*.tar.gz")
        names = sdist_names(sdist, "tiny-0.1.0")
        assert not [n for n in names if n.startswith(".r1cache")], (how, sorted(names))
        assert names >= CARRIED, (how, sorted(names))
        sdists[how], listed[how] = sdist, names
    assert listed["environment"] == listed["config setting"]
    assert _sdist_files(sdists["environment"]) == _sdist_files(sdists["config setting"])

    wheel, _ = build_env.locked_wheel(sdists["environment"], tmp_path, isolated=False)
    assert wheel.name.startswith("tiny-0.1.0-")


def test_a_source_linked_from_outside_the_project_is_carried_without_a_false_warning(
    build_env: BuildEnv, tmp_path: Path
) -> None:
    """A baseline that is a symbolic link to a file shared between projects: the sdist packs the file's bytes
    under the link's name (so a wheel from it finds it), and the build does not warn that it cannot."""
    shared = tmp_path / "shared"
    shared.mkdir()
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    (project / "scale.cu").rename(shared / "scale.cu")
    (project / "scale.cu").symlink_to(Path("..") / "shared" / "scale.cu")
    cache = {"R1BUILD_CACHE_DIR": str(tmp_path / "cache")}
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project, env=cache)

    dist = tmp_path / "dist"
    dist.mkdir()
    proc = build_env.hook(project, "build_sdist", dist, env=cache)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "outside the project folder" not in proc.stdout, proc.stdout
    (sdist,) = dist.glob("tiny-*.tar.gz")
    with tarfile.open(sdist) as tar:
        member = tar.getmember("tiny-0.1.0/scale.cu")
        assert member.isfile()

    wheel, _ = build_env.locked_wheel(sdist, tmp_path, isolated=False)
    assert wheel.name.startswith("tiny-0.1.0-")


def test_a_signing_key_generated_in_the_project_stays_out_of_the_sdist(build_env: BuildEnv, tmp_path: Path) -> None:
    """``r1build key generate`` run in the project (its default: ``./r1build-signing-key.pem``) and in a folder of
    it: the sdist carries neither private key and says so, and carries everything else as before."""
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    cache = {"R1BUILD_CACHE_DIR": str(tmp_path / "cache")}
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project, env=cache)
    (project / "keys").mkdir()
    (project / "keys" / "notes.txt").write_text("kept\n")
    for where in (project, project / "keys"):
        build_env.check(["r1build", "key", "generate"], cwd=where)
        assert (where / "r1build-signing-key.pem").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")

    dist = tmp_path / "dist"
    dist.mkdir()
    proc = build_env.hook(project, "build_sdist", dist, env=cache)
    assert proc.returncode == 0, proc.stdout[-6000:]
    (sdist,) = dist.glob("tiny-*.tar.gz")
    names = sdist_names(sdist, "tiny-0.1.0")
    assert not [n for n in names if n.endswith(".pem")], sorted(names)
    assert names >= {*CARRIED, "keys/notes.txt"}, sorted(names)
    assert not [data for data in _sdist_files(sdist).values() if b"PRIVATE KEY" in data]
    flat = " ".join(proc.stdout.split())
    assert "r1build-signing-key.pem is a private signing key: left out of the sdist" in flat, proc.stdout
