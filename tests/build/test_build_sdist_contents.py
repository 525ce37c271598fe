"""What an sdist holds when the cache folder lies inside the project (``R1BUILD_CACHE_DIR=.r1cache`` in CI, or
the config setting ``r1build.cache-dir``): never the cache's database, blobs, transcripts or the build machine's
nvcc paths, while the manifest, lock and sources are still carried, and a wheel still builds from it. Nor the
private key ``r1build key generate`` writes into the folder it runs in."""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.build.buildenv import PACKAGES, BuildEnv, copy_project, sdist_names

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

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


def _openssh_key() -> bytes:
    """An Ed25519 private key in OpenSSH's format (``-----BEGIN OPENSSH PRIVATE KEY-----``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )


def test_private_keys_of_any_name_stay_out_of_the_sdist(build_env: BuildEnv, tmp_path: Path) -> None:
    """``r1build key generate --out team.pem`` in the project went into the sdist: only the default name was left
    out. Now any file holding a PEM private key is, told by its content, with a warning naming it: team.pem and
    an OpenSSH key under an odd name, while a file that only mentions keys is carried."""
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    cache = {"R1BUILD_CACHE_DIR": str(tmp_path / "cache")}
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project, env=cache)
    build_env.check(["r1build", "key", "generate", "--out", "team.pem"], cwd=project)
    (project / "deploy").mkdir()
    (project / "deploy" / "ci_identity.txt").write_bytes(b"# the CI's key\n" + _openssh_key())
    (project / "deploy" / "README").write_text("keys go in ~/.ssh, never here (-----BEGIN ... PRIVATE KEY-----)\n")

    dist = tmp_path / "dist"
    dist.mkdir()
    proc = build_env.hook(project, "build_sdist", dist, env=cache)
    assert proc.returncode == 0, proc.stdout[-6000:]
    (sdist,) = dist.glob("tiny-*.tar.gz")
    names = sdist_names(sdist, "tiny-0.1.0")
    assert "team.pem" not in names and "deploy/ci_identity.txt" not in names, sorted(names)
    assert names >= {*CARRIED, "deploy/README"}, sorted(names)
    assert not [n for n, data in _sdist_files(sdist).items() if b"PRIVATE KEY-----\n" in data], sorted(names)
    flat = " ".join(proc.stdout.split())
    for name in ("team.pem", "deploy/ci_identity.txt"):
        assert f"{name} holds a private key: left out of the sdist" in flat, proc.stdout


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (b"-----BEGIN PRIVATE KEY-----\nMC4C\n-----END PRIVATE KEY-----\n", True),
        (b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIF\n", True),
        (b"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n", True),
        (b"-----BEGIN EC PRIVATE KEY-----\nMHcC\n", True),
        (b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n", True),
        (b"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOY\n", True),
        (
            b"# a certificate, then its key\n-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
            b"-----BEGIN PRIVATE KEY-----\nMC4C\n",
            True,
        ),
        (b"-----BEGIN PUBLIC KEY-----\nMCow\n", False),
        (b"keys look like -----BEGIN PRIVATE KEY----- (never commit one)\n", False),
    ],
)
def test_a_private_key_is_told_by_its_content(text: bytes, key: bool) -> None:
    from r1build.build.keyfiles import holds_private_key

    assert holds_private_key("any/name.txt", text) is key
    assert holds_private_key("any/r1build-signing-key.pem", b"")


def test_a_private_key_in_a_wheel_package_stays_out_of_the_wheel(build_env: BuildEnv, tmp_path: Path) -> None:
    """scikit-build-core copies a package folder (``wheel.packages``) into the wheel whole: a key left in it
    went with it. The wheel leaves it out, says so, and its RECORD no longer names it."""
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("wheel.packages = []", 'wheel.packages = ["tinypkg"]'))
    (project / "tinypkg").mkdir()
    (project / "tinypkg" / "__init__.py").write_text("")
    (project / "tinypkg" / "deploy.key").write_bytes(_openssh_key())
    out = tmp_path / "out"
    out.mkdir()
    proc = build_env.pip_wheel(project, out, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    (wheel,) = out.glob("tiny-0.1.0-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
        assert "tinypkg/deploy.key" not in zf.read(record).decode()
    assert "tinypkg/__init__.py" in names and "tinypkg/deploy.key" not in names, names
    assert "tinypkg/deploy.key holds a private key: left out of the wheel" in " ".join(proc.stdout.split())
