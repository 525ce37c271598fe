"""What a build trusts, through pip with the real nvcc and CMake: the lock is verified before CMake runs, and the
gate and the build compile with one and the same nvcc.
"""

from __future__ import annotations

import re
import shutil
import stat
from pathlib import Path

import pytest

from r1build.keys import variant_digest
from tests.build.buildenv import PACKAGES, BuildEnv, copy_project

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

FAKE_BUILD = "cuda_13.0.r13.0/fake.wrapper_0"


def _locked_tiny(env: BuildEnv, tmp_path: Path) -> Path:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    env.check(["r1build", "lock", "--offline", "-m", project], cwd=project)
    return project


def test_a_locked_build_refuses_cmake_code_in_a_lock_before_cmake_runs(build_env: BuildEnv, tmp_path: Path) -> None:
    project = _locked_tiny(build_env, tmp_path)
    lock = project / "kernels.lock"
    text = lock.read_text(encoding="utf-8")
    source = re.search(r'^source = "([0-9a-f]{64})"$', text, re.MULTILINE).group(1)  # type: ignore[union-attr]
    injected = "128\nmessage(WARNING PWNED-BY-LOCK)"
    text = text.replace('provenance = "baseline"', 'provenance = "tuned"')
    forged = (
        f'winner = "{variant_digest(source, {"BLOCK": injected})}"\n'
        'defines = { BLOCK = "128\\nmessage(WARNING PWNED-BY-LOCK)" }'
    )
    text = re.sub(r"^winner = .*$", lambda _: forged, text, flags=re.MULTILINE)
    lock.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()

    proc = build_env.pip_wheel(project, out, env={"R1BUILD_LOCKED": "1"}, isolated=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout
    assert re.search(
        r"r1build: error: \S*kernels\.lock:\d+: kernel\[0\] \(scale/sm_90\)\.defines: BLOCK: value "
        r"'128\\nmessage\(WARNING PWNED-BY-LOCK\)' is not an integer, a numeric literal or an "
        r"identifier",
        proc.stdout,
    ), proc.stdout[-4000:]
    assert "CMake Warning" not in proc.stdout and not (project / ".r1build" / "generated").exists()
    assert not list(out.glob("*.whl"))


def test_a_frozen_build_refuses_a_stale_entry_with_an_undeclared_define(build_env: BuildEnv, tmp_path: Path) -> None:
    """Frozen tolerates a stale key, never an entry the manifest contradicts: a `tanhf = "sinf"` define the kernel
    does not declare (winner digest recomputed, key stale) fails the build before CMake runs."""
    project = _locked_tiny(build_env, tmp_path)
    lock = project / "kernels.lock"
    text = lock.read_text(encoding="utf-8")
    source = re.search(r'^source = "([0-9a-f]{64})"$', text, re.MULTILINE).group(1)  # type: ignore[union-attr]
    text = text.replace('provenance = "baseline"', 'provenance = "tuned"')
    forged = f'winner = "{variant_digest(source, {"tanhf": "sinf"})}"\ndefines = {{ tanhf = "sinf" }}'
    text = re.sub(r"^winner = .*$", lambda _: forged, text, flags=re.MULTILINE)
    text = re.sub(r"^key = .*$", lambda _: f'key = "{"5" * 64}"', text, flags=re.MULTILINE)
    lock.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()

    proc = build_env.pip_wheel(project, out, env={"R1BUILD_FROZEN": "1"}, isolated=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stdout
    assert re.search(
        r"r1build: error: \S*kernels\.lock:\d+: kernel\[0\] \(scale/sm_90\)\.defines: tanhf is not a tunable "
        r"parameter of scale \(declared: none\)",
        proc.stdout,
    ), proc.stdout[-4000:]
    assert not (project / ".r1build" / "generated").exists() and not list(out.glob("*.whl"))


def _fake_nvcc(tmp_path: Path) -> tuple[Path, Path]:
    """A CUDA_HOME whose bin/nvcc reports another identity, logs every call and delegates to the real nvcc."""
    real = shutil.which("nvcc")
    assert real is not None
    home = tmp_path / "other-cuda"
    (home / "bin").mkdir(parents=True)
    log = tmp_path / "fake-nvcc.log"
    script = home / "bin" / "nvcc"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        'if [ "$1" = "--version" ]; then\n'
        '  echo "nvcc: NVIDIA (R) Cuda compiler driver (a second toolkit)"\n'
        '  echo "Cuda compilation tools, release 13.0, V13.0.88"\n'
        f'  echo "Build {FAKE_BUILD}"\n'
        "  exit 0\n"
        "fi\n"
        f'exec "{real}" "$@"\n',
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return home, log


def test_the_gate_and_cmake_use_the_same_nvcc_and_the_lock_says_which(build_env: BuildEnv, tmp_path: Path) -> None:
    """Locked with the nvcc on PATH; built with CUDA_HOME naming another: r1build gates with CUDA_HOME's nvcc
    (its rule) and hands exactly that one to CMake, and says the lock was made with another."""
    project = _locked_tiny(build_env, tmp_path)
    assert 'toolchain = "cuda_13.0.r13.0/compiler.' in (project / "kernels.lock").read_text(encoding="utf-8")
    home, log = _fake_nvcc(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    env = {"CUDA_HOME": str(home), "R1BUILD_CACHE_DIR": str(tmp_path / "cache")}

    proc = build_env.pip_wheel(project, out, env=env, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert list(out.glob("tiny-0.1.0-*.whl"))
    flat = " ".join(proc.stdout.split())
    assert f"gating and building with {FAKE_BUILD} ({home / 'bin' / 'nvcc'})" in flat, proc.stdout[-4000:]
    calls = log.read_text(encoding="utf-8").splitlines()
    gate = [c for c in calls if "-Xptxas -v" in c]
    cmake = [c for c in calls if "-Xptxas -v" not in c and "scale__" in c]
    assert gate, calls
    assert cmake, calls  # CMake compiled the kernel's generated source with the same nvcc

    # a CMAKE_CUDA_COMPILER of one's own that is not the nvcc the gate uses is refused before anything runs
    pip_wheel: list[str | Path] = [
        build_env.python,
        "-m",
        "pip",
        "wheel",
        "-v",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        out,
    ]
    other = build_env.run(
        [*pip_wheel, "--config-settings", f"cmake.define.CMAKE_CUDA_COMPILER={shutil.which('nvcc')}", project],
        cwd=tmp_path,
        env=env,
    )
    assert other.returncode != 0
    assert "is not the nvcc r1build gates with" in other.stdout and "Traceback" not in other.stdout
