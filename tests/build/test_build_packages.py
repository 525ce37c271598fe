"""Small real projects built in a fresh venv: one that builds, and broken ones that must fail cleanly.

A broken project fails in the backend's process with the exit code of its error (2: bad input) and one clean
``r1build: error:`` line; pip, as the frontend, shows that line and no traceback.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import pytest

from tests.build.buildenv import PACKAGES, BuildEnv, copy_project, find_cuobjdump

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


def _elf_archs(env: BuildEnv, shared_object: Path) -> set[str]:
    return _fatbin_archs(env, shared_object, "elf")


def _fatbin_archs(env: BuildEnv, shared_object: Path, kind: str) -> set[str]:
    """The archs of the machine code (``elf``) or PTX (``ptx``) cuobjdump lists in a binary."""
    cuobjdump = find_cuobjdump(env)
    assert cuobjdump is not None, "cuobjdump is neither installed nor in the venv"
    proc = env.run([cuobjdump, f"--list-{kind}", shared_object], cwd=shared_object.parent)
    assert proc.returncode == 0, proc.stdout  # "No PTX file found" (exit 0) where there is none
    return set(re.findall(rf"\.(sm_\d+[af]?)\.{'cubin' if kind == 'elf' else 'ptx'}", proc.stdout))


def _module_of(wheel: Path, dest: Path, name: str = "tiny") -> Path:
    """The extension module of a wheel, unpacked into ``dest``."""
    with zipfile.ZipFile(wheel) as zf:
        (module,) = [n for n in zf.namelist() if re.fullmatch(rf"{name}\..*\.so", n)]
        zf.extract(module, dest)
    return dest / module


def _tiny_wheel(env: BuildEnv, tmp_path: Path, archs: str) -> Path:
    """tests/packages/tiny with its ``archs = ["sm_90"]`` line replaced, built with pip; the wheel."""
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    manifest = project / "kernels.toml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('archs = ["sm_90"]', archs), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    proc = env.pip_wheel(project, out, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    (wheel,) = out.glob("tiny-0.1.0-*.whl")
    return wheel


def test_bad_manifest_exits_2_with_the_place_of_the_mistake(build_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "bad_manifest", tmp_path / "bad_manifest")
    out = tmp_path / "out"
    out.mkdir()

    hook = build_env.hook(project, "build_wheel", out)
    assert hook.returncode == 2, hook.stdout
    assert "Traceback" not in hook.stdout
    assert not (project / ".r1build").exists()  # the failed build leaves no empty folder of its own behind
    assert re.search(
        r"^r1build: error: \S*kernels\.toml:9: kernel\[0\]\.args\[1\]\.dtyp: unknown key 'dtyp' "
        r"\(did you mean 'dtype'\?\)$",
        hook.stdout,
        re.MULTILINE,
    ), hook.stdout

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
    assert any(re.match(r"^\s+scale/sm_90: stale\b", line) for line in lines[start + 1 :]), hook.stdout

    # the same through pip and the config setting
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
    locked = build_env.run([*pip_wheel, "--config-settings", "r1build.locked=1", project], cwd=tmp_path)
    assert locked.returncode != 0
    assert "Traceback" not in locked.stdout
    assert "scale" in locked.stdout

    # told both, the build refuses; frozen, it builds what the stale lock names, as it is
    both = ["--config-settings", "r1build.locked=1", "--config-settings", "r1build.frozen=1"]
    refused = build_env.run([*pip_wheel, *both, project], cwd=tmp_path)
    assert refused.returncode != 0 and "Traceback" not in refused.stdout
    assert "r1build.locked checks the lock and r1build.frozen uses it without checking: choose one" in refused.stdout
    assert not list(out.glob("*.whl"))
    frozen = build_env.run([*pip_wheel, "--config-settings", "r1build.frozen=1", project], cwd=tmp_path)
    assert frozen.returncode == 0, frozen.stdout[-6000:]
    assert len(list(out.glob("tiny-0.1.0-*.whl"))) == 1


def test_tiny_project_builds_with_device_code_for_its_arch(build_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    proc = build_env.pip_wheel(project, out, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "scale/sm_90: GPU measuring is off" in proc.stdout
    assert "the baseline scale.cu is chosen by the static gate alone, unvalidated" in proc.stdout
    (wheel,) = out.glob("tiny-0.1.0-*.whl")

    module = _module_of(wheel, tmp_path / "unpacked")
    assert _elf_archs(build_env, module) == {"sm_90"}
    assert _fatbin_archs(build_env, module, "ptx") == {"sm_90"}  # PTX of the highest arch, for newer GPUs

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
    assert (
        'the definition of scale does not match the declared signature extern "C" cudaError_t '
        "scale(const float* x, float* y, int64_t n, cudaStream_t stream)"
    ) in hook.stdout
    assert not list(out.glob("*.whl"))


@pytest.mark.parametrize(
    ("archs", "elf", "ptx"),
    [
        ('archs = ["sm_80", "sm_90"]\nptx = false', {"sm_80", "sm_90"}, set()),
        ('archs = ["compute_80", "90-real"]', {"sm_90"}, {"sm_80"}),
    ],
)
def test_manifest_archs_choose_the_machine_code_and_ptx_in_the_wheel(
    build_env: BuildEnv, tmp_path: Path, archs: str, elf: set[str], ptx: set[str]
) -> None:
    module = _module_of(_tiny_wheel(build_env, tmp_path, archs), tmp_path / "unpacked")
    assert (_fatbin_archs(build_env, module, "elf"), _fatbin_archs(build_env, module, "ptx")) == (elf, ptx)


def test_family_archs_lock_vendor_and_build_into_the_fatbin(build_env: BuildEnv, tmp_path: Path) -> None:
    """sm_100f and sm_120f, on this GPU-less machine: resolved by the gate alone, locked, vendored and built; the
    extension's fatbin holds family machine code of both (cuobjdump lists a family cubin under its plain arch and
    says ``arch = sm_100f`` in its header), and no PTX (a family arch's runs on no later major)."""
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    manifest = project / "kernels.toml"
    text = manifest.read_text(encoding="utf-8").replace('archs = ["sm_90"]', 'archs = ["sm_100f", "120f-real"]')
    manifest.write_text(text, encoding="utf-8")
    env = {"R1BUILD_CACHE_DIR": str(tmp_path / "cache")}
    build_env.check(["r1build", "lock", "--offline", "--no-gpu", "-m", manifest], cwd=project, env=env)
    locked = (project / "kernels.lock").read_text(encoding="utf-8")
    assert 'arch = "sm_100f"' in locked and 'arch = "sm_120f"' in locked
    build_env.check(["r1build", "vendor", "-m", manifest], cwd=project, env=env)
    assert list((project / "kernels" / "_r1build").glob("scale__*.cu"))

    out = tmp_path / "out"
    out.mkdir()
    empty = {"R1BUILD_CACHE_DIR": str(tmp_path / "empty-cache"), "R1BUILD_LOCKED": "1"}
    proc = build_env.pip_wheel(project, out, env=empty, isolated=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    (wheel,) = out.glob("tiny-0.1.0-*.whl")
    module = _module_of(wheel, tmp_path / "unpacked")
    assert _elf_archs(build_env, module) == {"sm_100", "sm_120"}
    assert _fatbin_archs(build_env, module, "ptx") == set()
    cuobjdump = find_cuobjdump(build_env)
    assert cuobjdump is not None
    headers = build_env.check([cuobjdump, "-elf", module], cwd=module.parent)
    assert set(re.findall(r"^arch = (sm_\w+)$", headers, re.MULTILINE)) == {"sm_100f", "sm_120f"}


def test_a_build_over_max_wheel_mib_exits_2_naming_each_arch(build_env: BuildEnv, tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    manifest = project / "kernels.toml"
    capped = 'archs = ["sm_80", "sm_120f"]\nmax-wheel-mib = 0.001'
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('archs = ["sm_90"]', capped), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    hook = build_env.hook(project, "build_wheel", out)
    assert hook.returncode == 2, hook.stdout
    assert "Traceback" not in hook.stdout
    assert re.search(
        r"^r1build: error: \S*kernels\.toml:3: max-wheel-mib: the kernels' device code is \d+\.\d KiB, over "
        r"max-wheel-mib = 0\.001 \(1\.0 KiB\): sm_80 \d+\.\d KiB, sm_120f \d+\.\d KiB; drop archs",
        hook.stdout,
        re.MULTILINE,
    ), hook.stdout
    assert not list(out.glob("*.whl"))


@pytest.mark.gpu
@pytest.mark.parametrize(("ptx", "expected"), [(True, 0), (False, -209)])
def test_a_wheel_for_an_older_arch_runs_on_this_gpu_through_its_ptx(
    build_env: BuildEnv, tmp_path: Path, ptx: bool, expected: int
) -> None:
    """Built for sm_80 alone and run on the GPU here (sm_90 on an H200): the driver JIT-compiles the embedded
    PTX and the kernel computes the right values; without the PTX the same wheel has no code for this GPU
    (cudaErrorNoKernelImageForDevice, 209)."""
    import subprocess

    caps = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, check=True
    ).stdout.split()
    if not caps or caps[0].startswith("8."):
        pytest.skip(f"needs a GPU that sm_80 machine code does not run on (this one: {caps})")
    archs = 'archs = ["sm_80"]' + ("" if ptx else "\nptx = false")
    wheel = _tiny_wheel(build_env, tmp_path, archs)
    module = _module_of(wheel, tmp_path / "unpacked")
    assert _fatbin_archs(build_env, module, "elf") == {"sm_80"}
    assert _fatbin_archs(build_env, module, "ptx") == ({"sm_80"} if ptx else set())
    target = tmp_path / "site"
    build_env.check([build_env.python, "-m", "pip", "install", "--no-deps", "--target", target, wheel], cwd=tmp_path)
    code = "import tiny; print(tiny.scale_check(100003))"
    result = build_env.check([build_env.python, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target)})
    assert int(result.strip()) == expected, result


def _build_twin(env: BuildEnv, tmp_path: Path, name: str, visibility: str | None) -> Path:
    """tests/packages/twin built as the module ``name``; twin_b's ``scale`` returns cudaErrorNotSupported (801)
    for a negative n where twin_a's returns cudaErrorInvalidValue (1). Installed into its own folder."""
    project = copy_project(PACKAGES / "twin", tmp_path / name)
    if name == "twin_b":
        source = project / "scale.cu"
        source.write_text(source.read_text().replace("return cudaErrorInvalidValue;", "return cudaErrorNotSupported;"))
    if visibility is not None:
        manifest = project / "kernels.toml"
        manifest.write_text(f'visibility = "{visibility}"\n' + manifest.read_text())
    out = tmp_path / f"{name}-wheel"
    out.mkdir()
    env.check(
        [
            env.python,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            out,
            "--config-settings",
            f"cmake.define.TWIN={name}",
            project,
        ],
        cwd=tmp_path,
    )
    (wheel,) = out.glob("twin-0.1.0-*.whl")
    target = tmp_path / f"{name}-site"
    env.check([env.python, "-m", "pip", "install", "--no-deps", "--target", target, wheel], cwd=tmp_path)
    (module,) = target.glob(f"{name}.*.so")
    return module


@pytest.mark.parametrize(("visibility", "calls"), [(None, "1 801"), ("default", "1 1")])
def test_two_extensions_with_one_kernel_name_each_call_their_own(
    build_env: BuildEnv, tmp_path: Path, visibility: str | None, calls: str
) -> None:
    """Loaded into one process with RTLD_GLOBAL (as frameworks that share symbols between extensions load
    theirs), two extensions that both define ``scale`` each call their own: r1build's entry points are hidden,
    so the extension's call is bound inside it and nothing is exported for another to interpose. The control:
    with ``visibility = "default"`` the second extension's call lands in the first one's ``scale``."""
    modules = [_build_twin(build_env, tmp_path, name, visibility) for name in ("twin_a", "twin_b")]
    for module in modules:
        exported = build_env.check(["nm", "-D", "--defined-only", module], cwd=tmp_path).split()
        assert ("scale" in exported) == (visibility == "default"), exported
        assert f"PyInit_{module.name.split('.')[0]}" in exported
    code = (
        "import os, sys; sys.setdlopenflags(os.RTLD_NOW | os.RTLD_GLOBAL); import twin_a, twin_b; "
        "print(twin_a.negative(), twin_b.negative())"
    )
    path = os.pathsep.join(str(m.parent) for m in modules)
    assert build_env.check([build_env.python, "-c", code], cwd=tmp_path, env={"PYTHONPATH": path}).strip() == calls


def test_wheels_are_byte_identical_from_any_checkout_path_without_source_date_epoch(
    build_env: BuildEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without SOURCE_DATE_EPOCH the wheel took each file's modification time (scikit-build-core's
    ``wheel.reproducible`` is off by default), so two checkouts built at different times differed. r1build's
    fixed date, 1980-01-01, stands in for it."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    wheels = []
    for i, where in enumerate(("a", "a-much-longer-checkout-path/of/the/same/project")):
        project = copy_project(PACKAGES / "tiny", tmp_path / where / "tiny")
        for path in project.iterdir():  # checked out at different times
            os.utime(path, (1_600_000_000 + i * 86_400,) * 2)
        out = tmp_path / where / "out"
        out.mkdir()
        proc = build_env.pip_wheel(project, out, isolated=False)
        assert proc.returncode == 0, proc.stdout[-6000:]
        (wheel,) = out.glob("tiny-0.1.0-*.whl")
        wheels.append(wheel.read_bytes())
    import io

    with zipfile.ZipFile(io.BytesIO(wheels[0])) as zf:
        assert {info.date_time for info in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert wheels[0] == wheels[1]


def test_wheels_are_byte_identical_from_any_checkout_path(build_env: BuildEnv, tmp_path: Path) -> None:
    """The same project built from two checkouts at different paths gives the same wheel, byte for byte, and
    the wheel's timestamps are SOURCE_DATE_EPOCH's."""
    epoch = 1_700_000_000
    wheels = []
    for where in ("a", "a-much-longer-checkout-path/of/the/same/project"):
        project = copy_project(PACKAGES / "tiny", tmp_path / where / "tiny")
        out = tmp_path / where / "out"
        out.mkdir()
        proc = build_env.pip_wheel(project, out, isolated=False, env={"SOURCE_DATE_EPOCH": str(epoch)})
        assert proc.returncode == 0, proc.stdout[-6000:]
        (wheel,) = out.glob("tiny-0.1.0-*.whl")
        wheels.append(wheel.read_bytes())
    assert wheels[0] == wheels[1]
    import datetime
    import io

    stamp = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).timetuple()[:6]
    with zipfile.ZipFile(io.BytesIO(wheels[0])) as zf:
        assert {info.date_time for info in zf.infolist()} == {stamp}
