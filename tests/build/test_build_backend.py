"""The backend's own logic, in this process: options, the frontend boundary, sdist settings, hook settings."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from r1build.build import COMPILER_DEFINE, KERNELS_DEFINE, kernel_settings, stamp, warm_kernel_settings
from r1build.build.boundary import StderrRenderer, frontend_boundary
from r1build.build.options import split_settings
from r1build.build.sdist import sdist_settings
from r1build.build.stamp import STAMP_NAME
from r1build.errors import CompileError, ConfigError, ManifestError, StaleLockError
from r1build.events import Event, Note, Progress, Stage, emit, sink
from r1build.manifest import find_manifest, load_manifest
from r1build.records import ResolveOptions
from tests.build.buildenv import PACKAGES, copy_project
from tests.gate_seed import seed_gate_verdicts

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers


def test_options_default_to_unset() -> None:
    options, rest = split_settings(None, environ={})
    assert options == ResolveOptions(locked=False, generate=False, evaluate=False, cache_dir=None)
    assert rest == {}


def test_options_from_config_settings_are_taken_out_of_them() -> None:
    options, rest = split_settings(
        {
            "r1build.locked": "true",
            "r1build.generate": "1",
            "r1build.evaluate": "yes",
            "r1build.offline": "0",
            "r1build.cache-dir": "/tmp/c",
            "cmake.build-type": "Debug",
        },
        environ={},
    )
    assert options == ResolveOptions(locked=True, generate=True, evaluate=True, cache_dir=Path("/tmp/c"))
    assert rest == {"cmake.build-type": "Debug"}


def test_options_from_the_environment() -> None:
    options, _ = split_settings(
        {},
        environ={
            "R1BUILD_LOCKED": "1",
            "R1BUILD_GENERATE": "on",
            "R1BUILD_EVALUATE": "1",
            "R1BUILD_CACHE_DIR": "/tmp/envcache",
        },
    )
    assert options == ResolveOptions(locked=True, generate=True, evaluate=True, cache_dir=Path("/tmp/envcache"))


def test_a_build_never_generates_unless_the_person_building_opts_in() -> None:
    """An API key, a base URL or a manifest's [generation] table is not an opt-in: only R1BUILD_GENERATE or the
    config setting is."""
    keys = {"OPENAI_API_KEY": "sk-x", "DEEPSEEK_API_KEY": "sk-y", "R1BUILD_BASE_URL": "http://127.0.0.1:9/v1"}
    assert split_settings({}, environ=keys)[0].generate is False
    assert split_settings({}, environ={**keys, "R1BUILD_GENERATE": "0"})[0].generate is False
    assert split_settings({"r1build.generate": "0"}, environ={**keys, "R1BUILD_GENERATE": "1"})[0].generate is False
    assert split_settings({"r1build.generate": "1"}, environ=keys)[0].generate is True


def test_generate_and_offline_together_are_a_contradiction() -> None:
    with pytest.raises(ConfigError, match=r"R1BUILD_GENERATE asks .* R1BUILD_OFFLINE forbids it") as info:
        split_settings({}, environ={"R1BUILD_GENERATE": "1", "R1BUILD_OFFLINE": "1"})
    assert info.value.exit_code == 2
    with pytest.raises(ConfigError, match=r"r1build.generate asks .* R1BUILD_OFFLINE forbids"):
        split_settings({"r1build.generate": "1"}, environ={"R1BUILD_OFFLINE": "1"})
    # an explicit offline=0 lifts the environment's offline
    assert (
        split_settings({"r1build.generate": "1", "r1build.offline": "0"}, environ={"R1BUILD_OFFLINE": "1"})[0].generate
        is True
    )


def test_config_setting_beats_the_environment() -> None:
    options, _ = split_settings(
        {"r1build.locked": "0", "r1build.cache-dir": "/a"}, environ={"R1BUILD_LOCKED": "1", "R1BUILD_CACHE_DIR": "/b"}
    )
    assert options.locked is False
    assert options.cache_dir == Path("/a")


@pytest.mark.parametrize(
    ("settings", "environ", "mode"),
    [
        ({"r1build.frozen": "1"}, {}, (False, True)),
        ({}, {"R1BUILD_FROZEN": "1"}, (False, True)),
        ({}, {"R1BUILD_FROZEN": "1", "R1BUILD_LOCKED": "1"}, (False, True)),  # as the CLI: frozen over locked
        ({"r1build.locked": "1"}, {"R1BUILD_FROZEN": "1"}, (True, False)),  # what the build was told wins
        ({"r1build.frozen": "1"}, {"R1BUILD_LOCKED": "1"}, (False, True)),
        ({"r1build.frozen": "0"}, {"R1BUILD_FROZEN": "1", "R1BUILD_LOCKED": "1"}, (True, False)),
        ({"r1build.frozen": "0", "r1build.locked": "0"}, {"R1BUILD_FROZEN": "1", "R1BUILD_LOCKED": "1"}, (0, 0)),
    ],
)
def test_frozen_builds_as_the_cli_resolves(
    settings: dict[str, str | list[str]], environ: dict[str, str], mode: tuple[bool, bool]
) -> None:
    options, rest = split_settings(settings, environ=environ)
    assert (options.locked, options.frozen) == mode
    assert rest == {}


def test_locked_and_frozen_settings_together_are_a_contradiction() -> None:
    with pytest.raises(ConfigError, match=r"r1build.locked checks the lock and r1build.frozen uses it") as info:
        split_settings({"r1build.locked": "1", "r1build.frozen": "1"}, environ={})
    assert info.value.exit_code == 2


def test_a_repeated_setting_with_one_value_is_accepted() -> None:
    options, _ = split_settings({"r1build.locked": ["1", "1"]}, environ={})
    assert options.locked is True


@pytest.mark.parametrize(
    ("settings", "environ", "message"),
    [
        ({"r1build.lockd": "1"}, {}, r"unknown config setting 'r1build.lockd' \(did you mean 'locked'\?\)"),
        ({"r1build.offline": "maybe"}, {}, r"r1build.offline must be one of 1/0, true/false"),
        ({}, {"R1BUILD_LOCKED": "2"}, r"R1BUILD_LOCKED must be one of"),
        ({}, {"R1BUILD_GENERATE": "please"}, r"R1BUILD_GENERATE must be one of"),
        ({"r1build.locked": ["1", "0"]}, {}, r"given 2 different values"),
    ],
)
def test_bad_options_are_config_errors(
    settings: dict[str, str | list[str]], environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        split_settings(settings, environ=environ)
    assert info.value.exit_code == 2


def test_renderer_writes_plain_lines() -> None:
    out = io.StringIO()
    render = StderrRenderer(out, progress_every_s=0.0, verbose=True)
    render(Note("warning", "using the baseline", "gelu", "sm_90"))
    render(Note("info", "a note"))
    render(Stage("gate", "gelu", "sm_80"))  # a stage starting says nothing
    render(Stage("gate", "gelu", "sm_80", done=True, detail="32 registers"))
    render(Progress("generate", 3, 8, {"tokens": 100}))
    assert out.getvalue().splitlines() == [
        "r1build: warning: gelu/sm_90: using the baseline",
        "r1build: a note",
        "r1build: gate gelu/sm_80: 32 registers",
        "r1build: generate: 3/8 tokens=100",
    ]


def test_stage_lines_only_when_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.delenv("R1BUILD_VERBOSE", raising=False)
    StderrRenderer(out)(Stage("gate", "gelu", "sm_80", done=True, detail="32 registers"))
    assert out.getvalue() == ""
    monkeypatch.setenv("R1BUILD_VERBOSE", "1")
    StderrRenderer(out)(Stage("gate", "gelu", "sm_80", done=True, detail="32 registers"))
    assert out.getvalue() == "r1build: gate gelu/sm_80: 32 registers\n"


def test_quick_progress_is_not_shown() -> None:
    out = io.StringIO()
    render = StderrRenderer(out, progress_every_s=60.0)
    for done in range(5):
        render(Progress("gate", done, 5))
    assert out.getvalue() == ""


def test_boundary_routes_events_and_turns_user_errors_into_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info, frontend_boundary():
        emit(Note("warning", "careful", "k", "sm_90"))
        raise ManifestError("unknown key 'dtyp' (did you mean 'dtype'?)", file="kernels.toml", line=9, key="dtyp")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "r1build: warning: k/sm_90: careful",
        "r1build: error: kernels.toml:9: dtyp: unknown key 'dtyp' (did you mean 'dtype'?)",
    ]


def test_boundary_indents_multi_line_errors_and_keeps_their_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info, frontend_boundary():
        raise CompileError("gelu/sm_90: fails the gate\nptxas error: too many registers")
    assert info.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        "r1build: error: gelu/sm_90: fails the gate",
        "    ptxas error: too many registers",
    ]


def test_boundary_leaves_bugs_alone() -> None:
    with pytest.raises(ZeroDivisionError), frontend_boundary():
        _ = 1 / 0


def test_sdist_settings_force_in_the_manifest_inputs_and_keep_user_lists(tmp_path: Path) -> None:
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    (project / "kernels" / "_r1build").mkdir(parents=True)
    (project / "kernels.lock").write_text("# placeholder\n")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'sdist.exclude = ["/notes/"]\n')
    manifest = load_manifest(find_manifest(project))

    settings = sdist_settings(project, manifest, {"sdist.include": "extra.txt", "cmake.build-type": "Release"})
    assert settings["cmake.build-type"] == "Release"
    assert settings["sdist.include"] == [
        "extra.txt",
        "/kernels.toml",
        "/kernels.lock",
        "/kernels/_r1build/",
        "/scale.cu",
        "/reference.py",
    ]
    assert settings["sdist.exclude"] == ["/notes/", "/.r1build/", "r1build-signing-key.pem"]


def test_sdist_refuses_what_a_wheel_could_not_build_offline(tmp_path: Path) -> None:
    """No lock: a warning where hand-written sources exist (baseline or candidates), a refusal where none do."""
    from r1build.build.sdist import check_offline_buildable
    from r1build.errors import LockError

    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    toml = project / "kernels.toml"
    seen: list[Event] = []
    with sink(seen.append):
        check_offline_buildable(project, load_manifest(toml))
    assert any(isinstance(e, Note) and e.level == "warning" and "there is no kernels.lock" in e.message for e in seen)

    text = toml.read_text()
    toml.write_text(text.replace('baseline = "scale.cu"', 'candidates = ["scale.cu"]'))
    check_offline_buildable(project, load_manifest(toml))  # a candidates file is something to build from

    toml.write_text(text.replace('baseline = "scale.cu"\n', ""))
    with pytest.raises(LockError, match=r"no usable lock entry and no hand-written source .* scale/sm_90") as info:
        check_offline_buildable(project, load_manifest(toml))
    assert info.value.exit_code == 2


def test_kernel_settings_emit_and_define_the_cmake_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    monkeypatch.setenv("R1BUILD_OFFLINE", "1")
    settings = kernel_settings({"r1build.cache-dir": str(tmp_path / "cache"), "cmake.define.FOO": "1"}, project)
    cmake_file = Path(str(settings[KERNELS_DEFINE]))
    assert cmake_file == (project / ".r1build" / "generated" / "r1build_kernels.cmake").resolve()
    assert "r1build::kernels" in cmake_file.read_text()
    assert settings["cmake.define.FOO"] == "1"
    assert not any(key.startswith("r1build.") for key in settings)
    assert (tmp_path / "cache").is_dir()


@pytest.fixture
def locked_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny project with a current lock and vendored winner, and R1BUILD_CACHE_DIR set."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    from r1build.cli.main import main

    project = copy_project(PACKAGES / "tiny", tmp_path / "tiny")
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("R1BUILD_OFFLINE", "1")

    def lock(copy: Path, cache: Path) -> None:
        assert main(["lock", "--offline", "-m", str(copy), "--cache-dir", str(cache)]) == 0

    # the baseline's gate verdict, compiled once per process (tests/gate_seed.py): this lock finds it cached
    seed_gate_verdicts(tmp_path / "cache", project, lock)
    assert main(["lock", "--offline", "-m", str(project)]) == 0
    assert main(["vendor", "-m", str(project)]) == 0
    return project


def _build_events(project: Path, settings: Mapping[str, str | list[str]]) -> list[Event]:
    seen: list[Event] = []
    with sink(seen.append):
        kernel_settings(settings, project)
    return seen


def _reused(events: list[Event]) -> bool:
    return any(isinstance(e, Note) and "unchanged since the last locked build" in e.message for e in events)


def _gated(events: list[Event]) -> bool:
    return any(isinstance(e, Stage) and e.stage == "gate" for e in events)


def test_a_warm_locked_build_reuses_the_generated_files(locked_tiny: Path) -> None:
    locked = {"r1build.locked": "1"}
    first = _build_events(locked_tiny, locked)
    assert _gated(first) and not _reused(first)
    assert (locked_tiny / ".r1build" / STAMP_NAME).is_file()
    second = _build_events(locked_tiny, locked)
    assert _reused(second) and not _gated(second)
    # unlocked builds always resolve
    assert not _reused(_build_events(locked_tiny, {}))


def _warm(project: Path, settings: Mapping[str, str | list[str]], monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether ``build_wheel``'s warm path (config settings as given, nothing parsed) uses the stamp."""
    monkeypatch.chdir(project)
    return warm_kernel_settings(settings) is not None


@pytest.mark.parametrize(
    "change",
    [
        "generated file removed",
        "generated file edited",
        "vendored file edited",
        "vendored file added",
        "baseline edited",
        "manifest edited",
        "lock edited",
        "environment",
        "manifest removed",
    ],
)
def test_any_change_to_what_resolution_reads_means_resolving_again(
    locked_tiny: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = {"r1build.locked": "1"}
    _build_events(locked_tiny, locked)
    assert _warm(locked_tiny, locked, monkeypatch)
    generated = locked_tiny / ".r1build" / "generated"
    vendored = locked_tiny / "kernels" / "_r1build"
    (vendored_file,) = vendored.glob("scale__*.cu")
    (generated_file,) = generated.glob("scale__*.cu")
    if change == "generated file removed":
        generated_file.unlink()
    elif change == "generated file edited":
        generated_file.write_text(generated_file.read_text() + "// edited\n")
    elif change == "vendored file edited":
        vendored_file.write_text(vendored_file.read_text() + "// edited\n")
    elif change == "vendored file added":
        (vendored / "other.cu").write_text("// another file\n")
    elif change == "baseline edited":
        baseline = locked_tiny / "scale.cu"
        baseline.write_text(baseline.read_text() + "// edited\n")
    elif change == "manifest edited":  # a comment: flags, archs and tolerances live here too
        toml = locked_tiny / "kernels.toml"
        toml.write_text(toml.read_text() + "\n# edited\n")
    elif change == "lock edited":
        lock = locked_tiny / "kernels.lock"
        lock.write_text(lock.read_text() + "\n# edited\n")
    elif change == "environment":
        monkeypatch.setenv("R1BUILD_SOMETHING", "1")
    if change == "manifest removed":
        (locked_tiny / "kernels.toml").rename(locked_tiny / "manifest.toml")
        assert not _warm(locked_tiny, locked, monkeypatch)
        with pytest.raises(ManifestError):
            _build_events(locked_tiny, locked)
        return
    assert not _warm(locked_tiny, locked, monkeypatch)
    if change == "baseline edited":  # the lock no longer fits: resolving again says so
        with pytest.raises(StaleLockError, match="scale/sm_90"):
            _build_events(locked_tiny, locked)
        return
    again = _build_events(locked_tiny, locked)
    assert not _reused(again)
    assert _gated(again)
    assert generated_file.read_text() == (locked_tiny / ".r1build" / "generated" / generated_file.name).read_text()
    assert _reused(_build_events(locked_tiny, locked))
    assert _warm(locked_tiny, locked, monkeypatch)


def test_the_warm_path_needs_the_same_config_settings_and_compiler(
    locked_tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _build_events(locked_tiny, {"r1build.locked": "1"})
    assert _warm(locked_tiny, {"r1build.locked": "1", "cmake.build-type": "Release"}, monkeypatch)
    # other r1build settings, even ones that parse to the same options: the warm path does not parse them
    assert not _warm(locked_tiny, {"r1build.locked": "true"}, monkeypatch)
    assert _reused(_build_events(locked_tiny, {"r1build.locked": "true"}))  # the parsed options are the same
    assert not _warm(locked_tiny, {}, monkeypatch)
    # CMake told to use another compiler: the full path refuses it
    other = {"r1build.locked": "1", COMPILER_DEFINE: "/usr/bin/true"}
    assert not _warm(locked_tiny, other, monkeypatch)
    with pytest.raises(ConfigError, match="is not the nvcc r1build gates with"):
        _build_events(locked_tiny, other)


@pytest.mark.parametrize(
    "where",
    [
        "CMAKE_ARGS",
        "SKBUILD_CMAKE_ARGS",
        "SKBUILD_CMAKE_DEFINE",
        "config setting cmake.args",
        "pyproject.toml [tool.scikit-build] cmake.args",
        "pyproject.toml [tool.scikit-build] cmake.define.CMAKE_CUDA_COMPILER",
    ],
)
def test_a_cuda_compiler_named_anywhere_else_must_be_the_gates(
    locked_tiny: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """scikit-build-core puts cmake.args and CMAKE_ARGS on CMake's command line, where a -DCMAKE_CUDA_COMPILER
    wins over the one r1build hands over: another nvcc named there is refused (the warm path too), the gate's
    own is accepted."""
    from r1build.toolchain.nvcc import find_nvcc

    settings: dict[str, str | list[str]] = {"r1build.locked": "1"}
    _build_events(locked_tiny, settings)
    assert _warm(locked_tiny, settings, monkeypatch)
    pyproject = locked_tiny / "pyproject.toml"
    original = pyproject.read_text(encoding="utf-8")

    def name(compiler: str) -> dict[str, str | list[str]]:
        monkeypatch.delenv(where, raising=False)
        pyproject.write_text(original, encoding="utf-8")
        if where == "CMAKE_ARGS":  # conda-forge's way: shell words
            monkeypatch.setenv(where, f"-G Ninja -DCMAKE_CUDA_COMPILER:FILEPATH={compiler} -DFOO=1")
        elif where == "SKBUILD_CMAKE_ARGS":
            monkeypatch.setenv(where, f"-DFOO=1;-DCMAKE_CUDA_COMPILER={compiler}")
        elif where == "SKBUILD_CMAKE_DEFINE":
            monkeypatch.setenv(where, f"FOO=1;CMAKE_CUDA_COMPILER={compiler}")
        elif where == "config setting cmake.args":
            return {**settings, "cmake.args": ["-D", f"CMAKE_CUDA_COMPILER={compiler}"]}
        elif where.endswith("cmake.args"):
            pyproject.write_text(original + f'cmake.args = ["-DCMAKE_CUDA_COMPILER={compiler}"]\n', encoding="utf-8")
        else:
            pyproject.write_text(original + f'cmake.define.CMAKE_CUDA_COMPILER = "{compiler}"\n', encoding="utf-8")
        return settings

    other = name("/usr/bin/true")
    assert not _warm(locked_tiny, other, monkeypatch)
    with pytest.raises(ConfigError, match=f"^{re.escape(where)} names /usr/bin/true as CMake's CUDA compiler"):
        _build_events(locked_tiny, other)
    gates = str(Path(shutil.which(find_nvcc()) or find_nvcc()).absolute())
    same = name(gates)
    assert kernel_settings(same, locked_tiny)[COMPILER_DEFINE] == gates


def test_a_warm_build_imports_nothing_of_r1build_but_the_stamp(locked_tiny: Path) -> None:
    _build_events(locked_tiny, {"r1build.locked": "1"})
    code = (
        "import json, sys, r1build.build as b\n"
        "settings = b.warm_kernel_settings({'r1build.locked': '1'})\n"
        "print(json.dumps([settings, sorted(m for m in sys.modules if m.startswith('r1build'))]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=locked_tiny, capture_output=True, text=True, check=True, env=dict(os.environ)
    )
    settings, modules = json.loads(proc.stdout)
    assert settings[KERNELS_DEFINE].endswith("r1build_kernels.cmake") and settings[COMPILER_DEFINE]
    assert "kernels and lock unchanged since the last locked build" in proc.stderr
    light = {
        "r1build.build.warm",
        "r1build.build.stamp",
        "r1build.digests",
        "r1build.toolchain",
        "r1build.toolchain.lookup",
    }
    assert set(modules) == {"r1build", "r1build.build", *light}


def test_a_stamp_nested_too_deeply_is_no_stamp(tmp_path: Path) -> None:
    """The warm build's stamp is a file in the project (``.r1build/``): one of 100,000 nested arrays ended the
    warm path with a RecursionError traceback. It is no stamp: the build runs in full and stamps anew."""
    (tmp_path / ".r1build").mkdir()
    (tmp_path / ".r1build" / STAMP_NAME).write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert stamp._load(tmp_path) is None


def test_a_stamp_has_exactly_the_fields_of_its_typed_dict() -> None:
    # the TypedDict exists for type checkers only (no class built at a warm build's import): the keys a stamp
    # must have are spelled out beside it, and must stay its fields
    tree = ast.parse(Path(stamp.__file__).read_text(encoding="utf-8"))
    typed = next(node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == "Stamp")
    fields = {n.target.id for n in typed.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert fields == stamp._FIELDS


def test_a_new_nvcc_ahead_on_path_means_resolving_again(
    locked_tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.which("nvcc")
    assert real is not None
    for var in ("R1BUILD_NVCC", "CUDACXX", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    ahead = tmp_path / "ahead"
    ahead.mkdir()
    monkeypatch.setenv("PATH", f"{ahead}{os.pathsep}{os.environ['PATH']}")
    locked = {"r1build.locked": "1"}
    _build_events(locked_tiny, locked)
    assert _warm(locked_tiny, locked, monkeypatch)
    # the same environment, but PATH now finds another nvcc first: the gate would use it
    (ahead / "nvcc").write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    (ahead / "nvcc").chmod(0o755)
    assert not _warm(locked_tiny, locked, monkeypatch)
    again = _build_events(locked_tiny, locked)
    assert not _reused(again) and _gated(again)
    assert _warm(locked_tiny, locked, monkeypatch)


def test_a_different_toolchain_means_resolving_again(
    locked_tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.which("nvcc")
    assert real is not None
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("R1BUILD_NVCC", str(wrapper))
    locked = {"r1build.locked": "1"}
    _build_events(locked_tiny, locked)
    assert _reused(_build_events(locked_tiny, locked))
    # same path, same environment, another answer to --version: an updated toolkit behind the same nvcc
    wrapper.write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ {real} --version; echo patched; exit 0; }}\nexec {real} "$@"\n'
    )
    assert not _warm(locked_tiny, locked, monkeypatch)
    again = _build_events(locked_tiny, locked)
    assert not _reused(again) and _gated(again)


def test_a_locked_build_names_its_own_setting_not_the_cli_flag(locked_tiny: Path) -> None:
    # a build is locked by r1build.locked / R1BUILD_LOCKED, not by the CLI's --locked: its messages say so
    from r1build.errors import LockError, StaleLockError

    manifest = locked_tiny / "kernels.toml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace("{ n = 97 }", "{ n = 98 }"), encoding="utf-8")
    with pytest.raises(StaleLockError) as stale:
        kernel_settings({"r1build.locked": "1"}, locked_tiny)
    assert "(r1build.locked (R1BUILD_LOCKED))" in str(stale.value) and "--locked" not in str(stale.value)
    (locked_tiny / "kernels.lock").unlink()
    with pytest.raises(LockError) as frozen:
        kernel_settings({"r1build.frozen": "1"}, locked_tiny)
    assert str(frozen.value).startswith("r1build.frozen (R1BUILD_FROZEN) uses "), str(frozen.value)


def test_a_failed_resolution_removes_only_the_empty_folder_it_made(tmp_path: Path) -> None:
    """A manifest error before anything is generated: the ``.r1build/`` this build made goes with it; one that was
    there before, with files of an earlier build, stays as it was."""
    from r1build.build.kernels import _prepare

    fresh = copy_project(PACKAGES / "bad_manifest", tmp_path / "fresh")
    with pytest.raises(ManifestError):
        _prepare(fresh, ResolveOptions(), None)
    assert not (fresh / ".r1build").exists()

    earlier = copy_project(PACKAGES / "bad_manifest", tmp_path / "earlier")
    kept = earlier / ".r1build" / "generated" / "kernels.cmake"
    kept.parent.mkdir(parents=True)
    kept.write_text("# an earlier build's\n", encoding="utf-8")
    with pytest.raises(ManifestError):
        _prepare(earlier, ResolveOptions(), None)
    assert kept.read_text(encoding="utf-8") == "# an earlier build's\n"
