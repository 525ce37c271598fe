"""An editable install (pip install -e, scikit-build-core's rebuild on import) builds edited kernels: a changed
baseline, manifest, lock or candidate is resolved and compiled again on the next import, and nothing is when
nothing changed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from r1build.build.editable import RECORD, _recorded
from r1build.errors import ConfigError
from tests.build.buildenv import PACKAGES, BuildEnv, copy_project, find_cuobjdump

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

REFRESH = "the kernels' inputs changed, resolving them again"
IMPORT = "import tiny; print('scale_empty', tiny.scale_empty()); print('module', tiny.__file__)"


def _install_editable(env: BuildEnv, project: Path, *options: str | Path, cwd: Path) -> None:
    """``pip install -e`` of the project into the venv, rebuilding on import, with a build folder that stays
    (scikit-build-core's editable.rebuild needs one)."""
    args: list[str | Path] = [env.python, "-m", "pip", "install", "--no-deps", *options, "-e", project]
    env.check([*args, "-Ceditable.rebuild=true", "-Cbuild-dir=build/{wheel_tag}"], cwd=cwd)


def _import(env: BuildEnv, cwd: Path) -> tuple[int, Path, str]:
    """Import the editable module in a fresh interpreter (which rebuilds first where something changed): what
    scale_empty() returns, the module's file, and everything printed, the rebuild's output included."""
    out = env.check([env.python, "-c", IMPORT], cwd=cwd, env={"SKBUILD_EDITABLE_VERBOSE": "1"})
    value = re.search(r"^scale_empty (-?\d+)$", out, re.MULTILINE)
    module = re.search(r"^module (.+)$", out, re.MULTILINE)
    assert value and module, out
    return int(value.group(1)), Path(module.group(1)), out


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_editable_install_rebuilds_edited_kernels_on_import(build_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    _install_editable(build_env, project, "--no-build-isolation", cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"  # import from outside the project, as a user of the package would
    elsewhere.mkdir()
    value, module, _ = _import(build_env, elsewhere)
    assert value == 0

    # nothing changed: the rebuild runs no r1build
    _, _, out = _import(build_env, elsewhere)
    assert REFRESH not in out, out

    # the baseline: its new behaviour is what the module calls
    _edit(project / "scale.cu", "if (n <= 0) return cudaSuccess;", "if (n <= 0) return cudaErrorInvalidValue;")
    value, _, out = _import(build_env, elsewhere)
    assert value == 1 and REFRESH in out, out

    # the manifest: another arch's machine code in the module
    _edit(project / "kernels.toml", 'archs = ["sm_90"]', 'archs = ["sm_80", "sm_90"]')
    value, module, out = _import(build_env, elsewhere)
    assert value == 1, out
    cuobjdump = find_cuobjdump(build_env)
    assert cuobjdump is not None
    listing = build_env.check([cuobjdump, "--list-elf", module], cwd=tmp_path)
    assert set(re.findall(r"\.(sm_\d+)\.cubin", listing)) == {"sm_80", "sm_90"}, listing

    # a lock appears (r1build lock), then a candidate is declared and edited: each import resolves again
    build_env.check(["r1build", "lock", "-m", project], cwd=tmp_path)
    _, _, out = _import(build_env, elsewhere)
    assert REFRESH in out, out
    (project / "other.cu").write_text((project / "scale.cu").read_text(encoding="utf-8"), encoding="utf-8")
    _edit(project / "kernels.toml", 'baseline = "scale.cu"', 'baseline = "scale.cu"\ncandidates = ["other.cu"]')
    _, _, out = _import(build_env, elsewhere)
    assert REFRESH in out, out
    _edit(project / "other.cu", "cudaErrorInvalidValue", "cudaErrorInvalidConfiguration")
    value, _, out = _import(build_env, elsewhere)
    assert REFRESH in out and value == 1, out  # the locked winner is still the baseline

    # a manifest broken by an edit: the import fails with r1build's message, and a fix builds again
    _edit(project / "kernels.toml", "test-shapes", "test-shapez")
    broken = build_env.run([build_env.python, "-c", IMPORT], cwd=elsewhere)
    assert broken.returncode != 0 and "unknown key 'test-shapez'" in broken.stdout, broken.stdout
    _edit(project / "kernels.toml", "test-shapez", "test-shapes")
    value, _, _ = _import(build_env, elsewhere)
    assert value == 1


def test_an_isolated_editable_install_says_how_to_rebuild_kernels(build_env: BuildEnv, tmp_path: Path) -> None:
    """Rebuilding kernels on import runs r1build with the Python that built the install; in an environment where
    r1build was only in the isolated build environment, an edited kernel fails the import with a message that
    names the fix instead of a bare CMake error."""
    if not build_env.isolated:
        pytest.skip("R1BUILD_TEST_SYSTEM_SITE=1: builds here are not isolated")
    bare = BuildEnv(root=tmp_path / "bare", wheels=build_env.wheels, cache_dir=build_env.cache_dir, isolated=True)
    subprocess.run([sys.executable, "-m", "venv", str(bare.root)], check=True, timeout=300)
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    _install_editable(bare, project, "--find-links", bare.wheels, cwd=tmp_path)
    assert bare.run([bare.python, "-c", "import r1build"], cwd=tmp_path).returncode != 0  # only the build had it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # (an isolated build's configure also depended on files of its environment, gone now, so the first import
    # after the install already configures again)
    _edit(project / "scale.cu", "if (n <= 0) return cudaSuccess;", "if (n <= 0) return cudaErrorInvalidValue;")
    broken = bare.run([bare.python, "-c", IMPORT], cwd=elsewhere)
    assert broken.returncode != 0, broken.stdout
    assert "install the build requirements beside the package and pip install --no-build-isolation -e" in (
        " ".join(broken.stdout.split())
    ), broken.stdout


def test_an_editable_refresh_that_r1build_refuses_shows_why_not_the_isolation_hint(
    build_env: BuildEnv, tmp_path: Path
) -> None:
    """An editable install made with r1build.locked, whose lock goes stale: the import fails with r1build's own
    error (which kernel is stale), and is not blamed on an isolated build's missing r1build (it is there)."""
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project)
    _install_editable(build_env, project, "--no-build-isolation", "-Cr1build.locked=1", cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _import(build_env, elsewhere)[0] == 0
    _edit(project / "scale.cu", "if (n <= 0) return cudaSuccess;", "if (n <= 0) return cudaErrorInvalidValue;")
    broken = build_env.run([build_env.python, "-c", IMPORT], cwd=elsewhere)
    assert broken.returncode != 0, broken.stdout
    flat = " ".join(broken.stdout.split())
    assert "kernels.lock is out of date" in flat and "scale/sm_90: stale" in flat, broken.stdout[-4000:]
    assert "r1build could not refresh the kernels (exit 2): see its error above" in flat, broken.stdout[-4000:]
    assert "isolated build's r1build is gone" not in flat


def test_an_editable_record_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    """``.r1build/editable.json`` is read on every rebuild on import: one of 100,000 nested arrays ended it with a
    RecursionError traceback instead of saying to install again."""
    (tmp_path / RECORD).parent.mkdir()
    (tmp_path / RECORD).write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(ConfigError, match="is not an editable build's record"):
        _recorded(tmp_path)
