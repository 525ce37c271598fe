"""Small real projects built in a fresh venv: one that builds, and broken ones that must fail cleanly.

A broken project fails in the backend's process with the exit code of its error (2: bad input) and one clean
``r1build: error:`` line; pip, as the frontend, shows that line and no traceback.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from buildenv import PACKAGES, BuildEnv, copy_project, find_cuobjdump

pytestmark = pytest.mark.slow


def _elf_archs(env: BuildEnv, shared_object: Path) -> set[str]:
    cuobjdump = find_cuobjdump(env)
    assert cuobjdump is not None, "cuobjdump is neither installed nor in the venv"
    listing = env.check([cuobjdump, "--list-elf", shared_object], cwd=shared_object.parent)
    return set(re.findall(r"\.(sm_\d+a?)\.cubin", listing))


def test_bad_manifest_exits_2_with_the_place_of_the_mistake(build_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "bad_manifest", tmp_path / "bad_manifest")
    out = tmp_path / "out"
    out.mkdir()

    hook = build_env.hook(project, "build_wheel", out)
    assert hook.returncode == 2, hook.stdout
    assert "Traceback" not in hook.stdout
    assert re.search(r"^r1build: error: \S*kernels\.toml:9: kernel\[0\]\.args\[1\]\.dtyp: unknown key 'dtyp' "
                     r"\(did you mean 'dtype'\?\)$", hook.stdout, re.MULTILINE), hook.stdout

    frontend = build_env.pip_wheel(project, out, isolated=False)
    assert frontend.returncode != 0
    assert "unknown key 'dtyp' (did you mean 'dtype'?)" in frontend.stdout
    assert "Traceback" not in frontend.stdout
    assert not list(out.glob("*.whl"))


def test_stale_lock_with_r1build_locked_names_the_kernel(build_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project)
    assert (project / "kernels.lock").is_file()
    manifest = project / "kernels.toml"
    manifest.write_text(manifest.read_text().replace("y[i] = 2 * x[i]", "y[i] = x[i] * 2"))
    out = tmp_path / "out"
    out.mkdir()

    hook = build_env.hook(project, "build_wheel", out, env={"R1BUILD_LOCKED": "1"})
    assert hook.returncode == 2, hook.stdout
    assert "Traceback" not in hook.stdout
    lines = hook.stdout.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith("r1build: error:")]
    assert "kernels.lock is out of date" in lines[start]
    assert any(re.match(r"^\s+scale/sm_90: stale\b", line) for line in lines[start + 1:]), hook.stdout

    # the same through pip and the config setting
    pip_wheel = [build_env.python, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", out]
    locked = build_env.run([*pip_wheel, "--config-settings", "r1build.locked=1", project], cwd=tmp_path)
    assert locked.returncode != 0
    assert "Traceback" not in locked.stdout
    assert "scale" in locked.stdout


def test_tiny_project_builds_with_device_code_for_its_arch(build_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    proc = build_env.pip_wheel(project, out, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "scale/sm_90: GPU measuring is off" in proc.stdout
    assert "the baseline scale.cu is chosen by the static gate alone, unvalidated" in proc.stdout
    (wheel,) = out.glob("tiny-0.1.0-*.whl")

    with zipfile.ZipFile(wheel) as zf:
        (module,) = [n for n in zf.namelist() if re.fullmatch(r"tiny\..*\.so", n)]
        zf.extract(module, tmp_path / "unpacked")
    assert _elf_archs(build_env, tmp_path / "unpacked" / module) == {"sm_90"}

    generated = project / ".r1build" / "generated"
    assert (generated / "r1build_kernels.cmake").is_file()
    assert (generated / "r1build_kernels.h").is_file()

    build_env.check([build_env.python, "-m", "pip", "install", "--no-deps", "--force-reinstall", wheel], cwd=tmp_path)
    code = "import tiny; print('cudaError', tiny.scale_empty())"
    assert build_env.check([build_env.python, "-c", code], cwd=tmp_path).strip() == "cudaError 0"


def test_baseline_with_another_signature_fails_the_build_at_the_gate(build_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "bad_signature", tmp_path / "bad_signature")
    out = tmp_path / "out"
    out.mkdir()

    hook = build_env.hook(project, "build_wheel", out)
    assert hook.returncode == 1, hook.stdout
    assert "Traceback" not in hook.stdout
    assert ('the definition of scale does not match the declared signature extern "C" cudaError_t '
            "scale(const float* x, float* y, int64_t n, cudaStream_t stream)") in hook.stdout
    assert not list(out.glob("*.whl"))
