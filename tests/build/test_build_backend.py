"""The backend's own logic, in this process: options, the frontend boundary, sdist settings, hook settings."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from buildenv import PACKAGES, copy_project

from r1build.build import KERNELS_DEFINE, kernel_settings
from r1build.build.boundary import StderrRenderer, frontend_boundary
from r1build.build.options import BuildOptions, split_settings
from r1build.build.sdist import sdist_settings
from r1build.errors import CompileError, ConfigError, ManifestError
from r1build.events import Note, Progress, Stage, emit
from r1build.manifest import find_manifest, load_manifest


def test_options_default_to_unset() -> None:
    options, rest = split_settings(None, environ={})
    assert options == BuildOptions(locked=False, offline=None, cache_dir=None)
    assert rest == {}


def test_options_from_config_settings_are_taken_out_of_them() -> None:
    options, rest = split_settings(
        {"r1build.locked": "true", "r1build.offline": "0", "r1build.cache-dir": "/tmp/c", "cmake.build-type": "Debug"},
        environ={},
    )
    assert options == BuildOptions(locked=True, offline=False, cache_dir=Path("/tmp/c"))
    assert rest == {"cmake.build-type": "Debug"}


def test_options_from_the_environment() -> None:
    options, _ = split_settings({}, environ={"R1BUILD_LOCKED": "1", "R1BUILD_OFFLINE": "yes",
                                             "R1BUILD_CACHE_DIR": "/tmp/envcache"})
    assert options == BuildOptions(locked=True, offline=True, cache_dir=Path("/tmp/envcache"))


def test_config_setting_beats_the_environment() -> None:
    options, _ = split_settings({"r1build.locked": "0", "r1build.cache-dir": "/a"},
                                environ={"R1BUILD_LOCKED": "1", "R1BUILD_CACHE_DIR": "/b"})
    assert options.locked is False
    assert options.cache_dir == Path("/a")


def test_a_repeated_setting_with_one_value_is_accepted() -> None:
    options, _ = split_settings({"r1build.locked": ["1", "1"]}, environ={})
    assert options.locked is True


@pytest.mark.parametrize(
    ("settings", "environ", "message"),
    [
        ({"r1build.lockd": "1"}, {}, r"unknown config setting 'r1build.lockd' \(did you mean 'locked'\?\)"),
        ({"r1build.offline": "maybe"}, {}, r"r1build.offline must be one of 1/0, true/false"),
        ({}, {"R1BUILD_LOCKED": "2"}, r"R1BUILD_LOCKED must be one of"),
        ({"r1build.locked": ["1", "0"]}, {}, r"given 2 different values"),
    ],
)
def test_bad_options_are_config_errors(settings: dict[str, str | list[str]], environ: dict[str, str],
                                       message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        split_settings(settings, environ=environ)
    assert info.value.exit_code == 2


def test_renderer_writes_plain_lines() -> None:
    out = io.StringIO()
    render = StderrRenderer(out, progress_every_s=0.0)
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
        "extra.txt", "/kernels.toml", "/kernels.lock", "/kernels/_r1build/", "/scale.cu", "/reference.py",
    ]
    assert settings["sdist.exclude"] == ["/notes/", "/.r1build/"]


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
