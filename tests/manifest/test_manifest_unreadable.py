"""Manifests that are not TOML r1build can read, or not where r1build looks: each is exit 2 naming the file (and
the line where there is one), never a traceback. tomllib lets some input escape as exceptions other than its own
(nesting past the recursion limit, integers of thousands of digits), and a pyproject.toml may hold a ``tool``
that is no table; these once ended ``r1build check`` with a traceback and exit 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from r1build.cli.main import main
from r1build.manifest.tomltext import TomlProblem, parse_toml

from .test_manifest_strict import BASE, run_check, write_project

_DEEP = "[" * 5000 + "]" * 5000
_NINES = "9" * 5000


def _pyproject(manifest: str) -> str:
    """BASE as a ``[tool.r1build]`` table of a pyproject.toml."""
    out = []
    for line in manifest.splitlines():
        if line.startswith("[[kernel]]"):
            line = "[[tool.r1build.kernel]]"
        elif line.startswith("[generation"):
            line = "[tool.r1build." + line[1:]
        out.append(line)
    return '[project]\nname = "x"\nversion = "0"\n\n[tool.r1build]\n' + "\n".join(out) + "\n"


# (id, the manifest's text, a fragment of the message, the line it names or None)
TEXTS: list[tuple[str, str, str, int | None]] = [
    ("nested-arrays", BASE.replace('target = "tiny::kernels"', f"x = {_DEEP}"), "nested too deeply", None),
    ("nested-tables", BASE + "x = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n", "nested too deeply", None),
    ("huge-integer", BASE.replace("top-p = 0.95", f"top-p = 0.95\nretries = {_NINES}"), "thousands of digits", 11),
    ("huge-size", BASE.replace("{ n = 97 }", f"{{ n = {_NINES} }}"), "thousands of digits", 27),
    ("byte-order-mark", "\ufeff" + BASE, "byte-order mark", 1),
    ("flops-too-long", BASE.replace("budget = {", f'flops = "{"+".join(["n"] * 20000)}"\nbudget = {{'), "too long", 33),
]


@pytest.mark.parametrize(("text", "fragment", "line"), [c[1:] for c in TEXTS], ids=[c[0] for c in TEXTS])
def test_unreadable_manifest_text_is_exit_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragment: str, line: int | None
) -> None:
    path = write_project(tmp_path / "p", text)
    code, output = run_check(capsys, path)
    assert code == 2, output
    assert "Traceback" not in output
    assert f"error: {path}{f':{line}:' if line else ':'}" in output, output
    assert fragment in output
    assert len(output) < 1000, "the message quotes a whole 40 KB expression"


@pytest.mark.parametrize(("text", "fragment", "line"), [c[1:] for c in TEXTS[:5]], ids=[c[0] for c in TEXTS[:5]])
def test_the_same_text_in_pyproject_is_exit_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragment: str, line: int | None
) -> None:
    project = tmp_path / "p"
    write_project(project).unlink()
    pyproject = project / "pyproject.toml"
    pyproject.write_text(("\ufeff" if text.startswith("\ufeff") else "") + _pyproject(text.lstrip("\ufeff")))
    for argv in (["check", "-m", str(pyproject)], ["check", "-m", str(project)]):
        assert main(argv) == 2
        output = capsys.readouterr().err
        assert f"error: {pyproject}" in output and fragment in output, (argv, output)


@pytest.mark.parametrize(
    ("tool", "fragment"),
    [("tool = 1\n", "no [tool.r1build] table"), ('tool = "r1build"\n', "no [tool.r1build] table")],
    ids=["integer", "string"],
)
def test_a_pyproject_whose_tool_is_no_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tool: str, fragment: str
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(tool, encoding="utf-8")
    assert main(["check", "-m", str(pyproject)]) == 2
    assert f"error: {pyproject}: {fragment}" in capsys.readouterr().err
    # looked for from the folder: not a manifest, so not found (and no crash on `"r1build" in 1`)
    assert main(["check", "-m", str(tmp_path)]) == 2
    assert "no kernels.toml (or pyproject.toml with [tool.r1build])" in capsys.readouterr().err


def test_a_broken_pyproject_that_names_tool_r1build_is_reported_not_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "p"
    write_project(project).unlink()
    pyproject = project / "pyproject.toml"
    pyproject.write_text(_pyproject(BASE).replace('name = "scale"', 'name = "scale'), encoding="utf-8")
    monkeypatch.chdir(project)
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert f"error: {pyproject}:" in err and "invalid TOML" in err, err
    # a broken pyproject.toml of some other tool is still no manifest
    pyproject.write_text('[tool.black]\nline-length = "\n', encoding="utf-8")
    assert main(["check"]) == 2
    assert "no kernels.toml (or pyproject.toml with [tool.r1build])" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["sm_\uff190", "sm_\u0669\u0660", "\uff19.0", "\uff19\uff10-real"])
def test_non_ascii_digits_are_no_arch(tmp_path: Path, capsys: pytest.CaptureFixture[str], arch: str) -> None:
    """int() reads fullwidth and Arabic-Indic digits; nvcc, CMake and the lock do not."""
    path = write_project(tmp_path / "p", BASE.replace('archs = ["sm_90"]', f'archs = ["{arch}"]'))
    code, output = run_check(capsys, path)
    assert code == 2, output
    assert f"{path}:1: archs[0]: {arch!r} is not a GPU architecture" in output


def test_a_manifest_path_too_long_for_the_file_system(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "-m", str(tmp_path / ("x" * 5000))]) == 2
    assert "argument -m/--manifest: " in (err := capsys.readouterr().err) and "a name in it is 5000 bytes" in err


@pytest.mark.parametrize("target", ["gone.toml", "kernels.toml"], ids=["dangling", "loop"])
def test_a_manifest_that_is_a_broken_symbolic_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    manifest = write_project(tmp_path / "p")
    manifest.unlink()
    manifest.symlink_to(tmp_path / "p" / target)
    assert main(["check", "-m", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert f"error: {manifest}: a symbolic link to {tmp_path / 'p' / target}, which does not exist" in err, err


def test_parse_toml_keeps_tomllib_lines() -> None:
    with pytest.raises(TomlProblem) as info:
        parse_toml('a = 1\nb = "x\n')
    assert info.value.line == 2 and info.value.message.startswith("invalid TOML: ")
    assert parse_toml("a = 1\n") == {"a": 1}


@pytest.mark.parametrize(
    ("key", "data", "fragment"),
    [
        ("baseline", "// caf\u00e9\n".encode("latin-1"), "file 'scale.cu' is not UTF-8 text (byte 6 is 0xe9)"),
        ("candidates", "// x\n".encode("utf-16"), "file 'other.cu' is not UTF-8 text (byte 0 is 0xff)"),
        ("candidates", None, "'other.cu' is a folder, not a .cu file"),
    ],
    ids=["latin-1-baseline", "utf-16-candidate", "folder-candidate"],
)
def test_hand_written_sources_must_be_utf8_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, data: bytes | None, fragment: str
) -> None:
    """Candidates are text: a baseline that is not UTF-8 once passed `check` and ended `lock` and builds with a
    UnicodeDecodeError traceback."""
    path = write_project(
        tmp_path / "p", BASE.replace('baseline = "scale.cu"', 'baseline = "scale.cu"\ncandidates = ["other.cu"]')
    )
    target = path.parent / ("scale.cu" if key == "baseline" else "other.cu")
    if data is None:
        target.mkdir()
    else:
        target.write_bytes(data)
    if key == "baseline":
        (path.parent / "other.cu").write_text("// fine\n", encoding="utf-8")
    for command in ("check", "status"):
        code, output = run_check(capsys, path, command)
        assert code == 2, output
        assert f"error: {path}:" in output and f": kernel[0].{key}: {fragment}" in output, output


@pytest.mark.parametrize(
    ("setting", "setup", "fragment"),
    [
        (
            'lock-file = "notes.txt/kernels.lock"',
            "file",
            "'notes.txt/kernels.lock' cannot be created: notes.txt is a file",
        ),
        ('vendor-dir = "notes.txt/vendored"', "file", "'notes.txt/vendored' cannot be created: notes.txt is a file"),
        ('lock-file = "k.lock"', "fifo", "'k.lock' is not a regular file or folder (a FIFO, a device or a socket)"),
        ('lock-file = "' + "a" * 300 + '"', None, "cannot be used: File name too long"),
        ('lock-file = "k.lock"', "loop:k.lock", "'k.lock' cannot be used: it is a loop of symbolic links"),
        ('vendor-dir = "links/vendored"', "loop:links", "'links/vendored' cannot be used: it is a loop of symbolic"),
    ],
    ids=[
        "lock-under-a-file",
        "vendor-under-a-file",
        "lock-is-a-fifo",
        "lock-name-too-long",
        "lock-loop",
        "vendor-loop",
    ],
)
def test_project_paths_r1build_cannot_write_are_refused_when_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, setup: str | None, fragment: str
) -> None:
    """Before: a lock-file or vendor-dir under a file ended `lock` / `vendor` with a NotADirectoryError traceback,
    a name too long for the file system every command, a lock that is a FIFO hung every command reading it, and
    a lock-file or vendor-dir that is (or lies in) a loop of symbolic links ended every command with a
    RuntimeError traceback (``Path.resolve``'s "Symlink loop", not an OSError, before Python 3.13)."""
    path = write_project(
        tmp_path / "p", BASE.replace('target = "tiny::kernels"', f'target = "tiny::kernels"\n{setting}')
    )
    if setup == "file":
        (path.parent / "notes.txt").write_text("mine\n", encoding="utf-8")
    elif setup == "fifo":
        os.mkfifo(path.parent / "k.lock")
    elif setup is not None and setup.startswith("loop:"):
        (path.parent / setup.removeprefix("loop:")).symlink_to(setup.removeprefix("loop:"))
    for command in ("check", "status"):
        code, output = run_check(capsys, path, command)
        assert code == 2, output
        assert f"error: {path}:3: " in output and fragment in output, output


@pytest.mark.parametrize("flag", ["-Iinc", "--include-path=include,inc"])
def test_an_include_folder_that_is_a_loop_of_links_is_refused_when_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    """The headers of a relative include folder are hashed into the gate's key: one that is a loop of symbolic
    links passed `check` and ended `lock` with a RuntimeError traceback."""
    path = write_project(tmp_path / "p", BASE.replace('nvcc-flags = ["-O3", "-std=c++17"]', f'nvcc-flags = ["{flag}"]'))
    (path.parent / "inc").symlink_to("inc")
    for command in ("check", "status", "lock"):
        code, output = run_check(capsys, path, command)
        assert code == 2, output
        assert f"error: {path}:3: nvcc-flags[0]: {flag}: the include folder 'inc' cannot be used: it is a" in output
        assert "Traceback" not in output


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        ('lock-file = "scale.cu"', "'scale.cu' is kernel[0] (scale)'s baseline file, which writing the lock"),
        ('lock-file = "./other.cu"', "'./other.cu' is kernel[0] (scale)'s candidates file, which writing the lock"),
        ('lock-file = "reference.py"', "'reference.py' is kernel[0] (scale)'s reference module, which writing the"),
    ],
    ids=["baseline", "candidate", "reference"],
)
def test_a_lock_file_that_is_a_kernel_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, fragment: str
) -> None:
    """``lock-file = "scale.cu"`` loaded, and ``r1build lock`` then overwrote the baseline with the lock (exit 0)."""
    manifest = BASE.replace('baseline = "scale.cu"', 'baseline = "scale.cu"\ncandidates = ["other.cu"]')
    path = write_project(
        tmp_path / "p", manifest.replace('target = "tiny::kernels"', f'target = "tiny::kernels"\n{setting}')
    )
    (path.parent / "other.cu").write_text("// another candidate\n", encoding="utf-8")
    before = {p.name: p.read_bytes() for p in path.parent.iterdir()}
    for command in ("check", "status", "lock"):
        code, output = run_check(capsys, path, command)
        assert code == 2, output
        assert f"error: {path}:3: lock-file: " in output and fragment in output, output
    # the files as they were (the reference module's __pycache__, where Python writes bytecode, aside)
    assert {p.name: p.read_bytes() for p in path.parent.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("folder", ["a,b", 'a"b', "it's"], ids=["comma", "double-quote", "single-quote"])
def test_a_project_path_nvcc_splits_is_refused_for_a_relative_include_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], folder: str
) -> None:
    """A relative include folder is given to nvcc rooted at the project's folder; nvcc splits ``-I`` values at
    commas and refuses or drops quotes, so a project under ``a,b`` locked with its headers not found (the gate's
    compile failed, a generated candidate was blamed). Refused when loaded, naming the key and the characters."""
    path = write_project(
        tmp_path / folder / "p", BASE.replace('nvcc-flags = ["-O3", "-std=c++17"]', 'nvcc-flags = ["-Iinc"]')
    )
    (path.parent / "inc").mkdir()
    code, output = run_check(capsys, path, "check")
    assert code == 2, output
    assert f"error: {path}:3: nvcc-flags[0]: -Iinc: the include folder 'inc' is given to nvcc under" in output
    assert "move the project to a path without them" in output


def test_a_project_path_with_a_comma_loads_without_relative_include_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_project(tmp_path / "a,b" / "p", BASE)
    assert run_check(capsys, path, "check")[0] == 0
