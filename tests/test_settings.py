"""r1build's environment variables: one module reads them, one parser reads every flag."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

import r1build
from r1build.build.boundary import frontend_boundary
from r1build.errors import ConfigError
from r1build.settings import env_settings
from r1build.toolchain.nvcc import find_nvcc

FLAGS = {
    "R1BUILD_OFFLINE": "offline",
    "R1BUILD_GENERATE": "generate",
    "R1BUILD_LOCKED": "locked",
    "R1BUILD_FROZEN": "frozen",
    "R1BUILD_EVALUATE": "evaluate",
    "R1BUILD_VERBOSE": "verbose",
    "R1BUILD_REMOTE_WRITE": "remote_write",
}


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_every_flag_takes_the_same_words(name: str) -> None:
    for word, value in (
        ("1", True),
        ("Yes", True),
        ("on", True),
        ("TRUE", True),
        ("0", False),
        ("off", False),
        ("no", False),
        ("false", False),
    ):
        assert getattr(env_settings({name: word}), FLAGS[name]) is value, word
    with pytest.raises(ConfigError, match=name):
        env_settings({name: "maybe"})


def test_unset_flags_are_not_said() -> None:
    settings = env_settings({})
    assert (settings.offline, settings.generate, settings.locked, settings.evaluate) == (None, None, None, None)
    assert settings.verbose is False
    assert env_settings({"R1BUILD_OFFLINE": " "}).offline is None


def test_paths_and_urls_as_given() -> None:
    settings = env_settings(
        {
            "R1BUILD_BASE_URL": "http://127.0.0.1:9/v1",
            "R1BUILD_NVCC": "/opt/cuda/bin/nvcc",
            "R1BUILD_COMPUTE_SANITIZER": "/opt/cuda/bin/compute-sanitizer",
        }
    )
    assert settings.base_url == "http://127.0.0.1:9/v1"
    assert settings.nvcc == "/opt/cuda/bin/nvcc"
    assert settings.compute_sanitizer == "/opt/cuda/bin/compute-sanitizer"


def test_a_cache_dir_no_file_system_takes_is_a_config_error(tmp_path: Path) -> None:
    """A name in R1BUILD_CACHE_DIR over 255 bytes made pathlib's ``is_file`` raise ENAMETOOLONG: a traceback from
    `cache repair`, `doctor` and (through the warm path) `status`."""
    assert env_settings({"R1BUILD_CACHE_DIR": str(tmp_path / ("x" * 255))}).cache_dir == tmp_path / ("x" * 255)
    assert env_settings({"R1BUILD_CACHE_DIR": "~/c"}).cache_dir == Path("~/c").expanduser()
    with pytest.raises(ConfigError, match=r"^R1BUILD_CACHE_DIR: '.*\.\.\.' is not a usable path: a name in it is 256"):
        env_settings({"R1BUILD_CACHE_DIR": str(tmp_path / ("x" * 256) / "cache")})
    with pytest.raises(ConfigError, match=r"R1BUILD_CACHE_DIR: .* it is 5000 bytes long, over the 4095"):
        env_settings({"R1BUILD_CACHE_DIR": "/" + "x/" * 2500})


def test_r1build_nvcc_comes_before_cudacxx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDACXX", "/from/cudacxx/nvcc")
    monkeypatch.setenv("R1BUILD_NVCC", "/from/r1build/nvcc")
    assert find_nvcc() == "/from/r1build/nvcc"
    monkeypatch.delenv("R1BUILD_NVCC")
    assert find_nvcc() == "/from/cudacxx/nvcc"


def test_a_bad_verbose_flag_is_a_clean_build_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("R1BUILD_VERBOSE", "very")
    with pytest.raises(SystemExit) as info, frontend_boundary():
        pass
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "R1BUILD_VERBOSE must be one of" in err and "Traceback" not in err
    out = io.StringIO()
    monkeypatch.setenv("R1BUILD_VERBOSE", "on")
    from r1build.build.boundary import StderrRenderer

    assert StderrRenderer(out).verbose is True


_NOT_YET: set[str] = set()


def test_only_the_settings_module_reads_r1build_variables() -> None:
    package = Path(r1build.__file__).parent
    reads = re.compile(r"""(?:environ|env|getenv)(?:\.get)?[(\[]\s*["']R1BUILD_""")
    offenders = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if path.name != "settings.py" and reads.search(path.read_text())
    ]
    assert sorted(set(offenders) - _NOT_YET) == []


def test_every_variable_is_documented_in_settings_and_the_docs() -> None:
    """The variables the settings module reads are the ones its table and the documentation's environment
    reference (generated from that table) list."""
    from r1build import settings

    source = Path(settings.__file__).read_text(encoding="utf-8")
    doc = settings.__doc__ or ""
    body = source[source.index('"""', source.index('"""') + 3) + 3 :]  # the code after the module docstring
    read = set(re.findall(r'"(R1BUILD_[A-Z_]+)"', body)) | {settings.BASE_URL_ENV}
    in_table = set(re.findall(r"^``(R1BUILD_[A-Z_]+)", doc, re.MULTILINE))
    page = (Path(r1build.__file__).parent.parent / "docs" / "reference" / "environment.md").read_text(encoding="utf-8")
    in_page = set(re.findall(r"^\| `(R1BUILD_[A-Z_]+)(?:=1)?` \|", page, re.MULTILINE))
    assert len(read) >= 19
    assert in_table == read
    assert in_page == read


def test_an_r1build_variable_r1build_does_not_read_is_named_with_the_one_meant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from r1build.cli.main import main
    from r1build.settings import VARIABLES, unknown_variables

    assert "R1BUILD_OFFLINE" in VARIABLES and "R1BUILD_BASE_URL" in VARIABLES and len(VARIABLES) >= 19
    env = {"R1BUILD_OFLINE": "1", "R1BUILD_CACHE_DIR": "/x", "R1BUILD_TEST_SITE_PATH": "/y", "R1BUILD_Q\x1b[2J": "1"}
    found = unknown_variables(env)
    assert found[0].startswith("R1BUILD_OFLINE is set") and "did you mean R1BUILD_OFFLINE?" in found[0]
    assert len(found) == 2 and "\x1b" not in found[1] and "did you mean" not in found[1]  # shown escaped
    assert unknown_variables({"R1BUILD_OFFLINE": "1", "PATH": "/bin"}) == []
    # every command says so (a typo must not silently leave a build online, unlocked...)
    monkeypatch.setenv("R1BUILD_LOKCED", "1")
    manifest = tmp_path / "kernels.toml"
    manifest.write_text("")
    main(["status", "-m", str(tmp_path), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert "warning: R1BUILD_LOKCED is set but r1build reads no such variable (did you mean R1BUILD_LOCKED?)" in err
    # and every build (the PEP 517 boundary renders it before the build's own lines)
    with frontend_boundary():
        pass
    assert "warning: R1BUILD_LOKCED is set" in capsys.readouterr().err


def test_a_variable_the_manifest_names_draws_no_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``api-key-env = "R1BUILD_..."`` names a variable r1build reads for that project: no "no such variable"
    warning, with ``-m``, from the folder, and in a build (a typo of another still warns)."""
    from r1build.cli.main import main

    (tmp_path / "kernels.toml").write_text('[generation]\napi-key-env = "R1BUILD_DEEPSEEK_KEY"\n')
    monkeypatch.setenv("R1BUILD_DEEPSEEK_KEY", "sk-x")
    monkeypatch.setenv("R1BUILD_LOKCED", "1")
    main(["status", "-m", str(tmp_path), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert "R1BUILD_DEEPSEEK_KEY" not in err and "R1BUILD_LOKCED is set" in err
    monkeypatch.chdir(tmp_path)
    main(["status", "--cache-dir", str(tmp_path / "c")])
    assert "R1BUILD_DEEPSEEK_KEY" not in capsys.readouterr().err
    with frontend_boundary():
        pass
    err = capsys.readouterr().err
    assert "R1BUILD_DEEPSEEK_KEY" not in err and "R1BUILD_LOKCED is set" in err


@pytest.mark.parametrize(
    ("xdg", "home"),
    [(None, None), ("/x/state", None), ("relative/state", None), ("", "/h/u/"), (None, "/h/u"), (None, "rel")],
)
def test_the_user_state_folder_is_the_one_platformdirs_names(
    monkeypatch: pytest.MonkeyPatch, xdg: str | None, home: str | None
) -> None:
    """:func:`user_state_dir` (the fast path's key folder, named without importing platformdirs on Linux) is
    ``platformdirs.user_state_dir("r1build")`` whatever ``$XDG_STATE_HOME`` and ``$HOME`` hold, or None (a
    relative or no ``$HOME``: platformdirs asks the password database)."""
    import platformdirs

    from r1build.settings import user_state_dir

    for name, value in (("XDG_STATE_HOME", xdg), ("HOME", home)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    named = user_state_dir()
    expected = Path(platformdirs.user_state_dir("r1build", appauthor=False))
    assert named == expected or (named is None and home in (None, "rel"))
