"""Output paths: a command replaces only a file it wrote (a report page, a dataset, a bundle, generated sources)
unless ``--force``; and a broken pyproject.toml beside the manifest never ends a command in a traceback."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main

from ..manifest.test_manifest_strict import write_project

BROKEN_PYPROJECT = "<!DOCTYPE html>\n<html><head><title>not TOML</title></head></html>\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The small valid project of the manifest tests, with a pyproject.toml and a cache of its own."""
    for var in ("R1BUILD_NVCC", "CUDACXX", "R1BUILD_REMOTE_CACHE", "R1BUILD_CLUSTER", "R1BUILD_LOCKED"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(tmp_path / "cache"))
    root = write_project(tmp_path / "p").parent
    (root / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "1"\n', encoding="utf-8")
    return root


@pytest.mark.parametrize("command", ["report", "export-dataset"])
@pytest.mark.parametrize("target", ["pyproject.toml", "notes.html", "data.jsonl"])
def test_an_output_replaces_no_file_it_did_not_write_without_force(
    project: Path, capsys: pytest.CaptureFixture[str], command: str, target: str
) -> None:
    """``report -o pyproject.toml`` replaced the project's pyproject.toml with the HTML page, exit 0."""
    path = project / target
    path.write_text('{"mine": true}\n', encoding="utf-8")
    assert main([command, "-m", str(project), "-o", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--output {path} exists and is not" in err, err
    assert "--force" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert path.read_text(encoding="utf-8") == '{"mine": true}\n'
    assert main([command, "-m", str(project), "-o", str(path), "--force"]) == 0
    assert path.read_text(encoding="utf-8") != '{"mine": true}\n'


def test_an_output_whose_first_line_is_json_nested_too_deeply_is_not_replaced(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """To tell a dataset r1build wrote, its first line is read as JSON: one of 100,000 nested arrays ended
    ``export-dataset -o`` with a RecursionError traceback."""
    path = project / "data.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    before = path.read_bytes()
    assert main(["export-dataset", "-m", str(project), "-o", str(path)]) == 2
    assert f"{path} exists and is not a dataset r1build wrote" in capsys.readouterr().err
    assert path.read_bytes() == before


@pytest.mark.parametrize(("command", "name"), [("report", "r.html"), ("export-dataset", "d.jsonl")])
def test_an_output_replaces_what_it_wrote_and_an_empty_file(
    project: Path, capsys: pytest.CaptureFixture[str], command: str, name: str
) -> None:
    path = project / name
    path.touch()  # mktemp's empty file
    assert main([command, "-m", str(project), "-o", str(path)]) == 0
    assert main([command, "-m", str(project), "-o", str(path)]) == 0, capsys.readouterr().err


def test_a_dataset_of_records_is_recognized_as_r1build_s() -> None:
    from r1build.filemode import written_by_r1build
    from r1build.report.dataset import SCHEMA

    assert SCHEMA.startswith("r1build.dataset/")
    line = b'{"arch": "sm_90", "messages": [], "schema": "' + SCHEMA.encode() + b'", "winner": true}\n'
    assert written_by_r1build(line, "dataset")
    assert not written_by_r1build(b'{"schema": "other"}\n' + line, "dataset")
    assert not written_by_r1build(b"[project]\nname = 'r1build.dataset/1'\n", "dataset")


def test_cache_export_replaces_another_file_only_with_force(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Cache(Path(os.environ["R1BUILD_CACHE_DIR"])) as cache:
        cache.put_text("an entry")
    path = project / "pyproject.toml"
    before = path.read_bytes()
    assert main(["cache", "export", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path} exists and is not an r1build bundle" in err and "--force" in err, err
    assert path.read_bytes() == before
    assert main(["cache", "export", str(path), "--force"]) == 0
    assert path.read_bytes() != before


def _cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``r1build ARGV`` in a fresh interpreter (nothing imported yet), run in ``cwd``."""
    code = "import sys; from r1build.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "export-dataset"])
def test_a_broken_pyproject_beside_the_manifest_is_no_traceback(project: Path, command: str) -> None:
    """After ``report -o pyproject.toml`` the next ``report`` and ``export-dataset`` ended in a TOMLDecodeError
    traceback: the CLI imported the build backend, whose scikit-build-core reads ./pyproject.toml on import. The
    manifest is kernels.toml, which the command reads alone."""
    (project / "pyproject.toml").write_text(BROKEN_PYPROJECT, encoding="utf-8")
    done = _cli(project, command, "-o", str(project / "out.file"))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "export-dataset"])
def test_a_broken_pyproject_that_is_the_manifest_is_exit_2_naming_it(tmp_path: Path, command: str) -> None:
    root = tmp_path / "q"
    root.mkdir()
    (root / "pyproject.toml").write_text("[tool.r1build]\n" + BROKEN_PYPROJECT, encoding="utf-8")
    done = _cli(root, command, "--cache-dir", str(tmp_path / "cache"))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert "pyproject.toml" in done.stderr, done.stderr


@pytest.mark.slow
def test_resolve_out_replaces_no_file_it_did_not_generate_without_force(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``resolve --out DIR`` wrote r1build_kernels.h (and the CMake file, the sources) over the files of those
    names in DIR, whatever they held."""
    out = project / "gen"
    out.mkdir()
    mine = out / "r1build_kernels.h"
    mine.write_text("// my own header\n", encoding="utf-8")
    argv = ["resolve", "-m", str(project), "--offline", "--no-gpu", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{mine} exists and was not generated by r1build" in err and "--force" in err, err
    assert mine.read_text(encoding="utf-8") == "// my own header\n"
    assert sorted(p.name for p in out.iterdir()) == ["r1build_kernels.h"]
    assert main([*argv, "--force"]) == 0, capsys.readouterr().err
    assert "Generated by r1build" in mine.read_text(encoding="utf-8")
    assert main(argv) == 0, capsys.readouterr().err  # what it generated, it replaces


class _FailingStdout(io.StringIO):
    """A standard output whose writes fail as a closed pipe's or a full disk's do."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error


@pytest.mark.parametrize(
    ("error", "said"),
    [(BrokenPipeError(errno.EPIPE, "Broken pipe"), ""), (OSError(errno.ENOSPC, "No space left on device"), "x")],
    ids=["reader-gone", "disk-full"],
)
@pytest.mark.parametrize("argv", [["cache", "dir"], ["status"], ["cache", "ls"], ["completions", "bash"]])
def test_a_standard_output_that_fails_is_exit_1_without_a_traceback(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    error: OSError,
    said: str,
) -> None:
    """``r1build cache ls | head -1`` ended in a BrokenPipeError traceback, ``r1build status > /dev/full`` in an
    OSError one. A reader that went away is said nothing of (as a filter says nothing then); a full disk is."""
    with Cache(Path(os.environ["R1BUILD_CACHE_DIR"])) as cache:
        cache.put_text("// an entry for `cache ls` to list\n")
    monkeypatch.setattr(sys, "stdout", _FailingStdout(error))
    assert main([*argv, *(["-m", str(project)] if argv == ["status"] else [])]) == 1
    err = capsys.readouterr().err
    expected = "error: cannot write the output: No space left on device\n" if said else ""
    assert err.endswith(expected) and "Traceback" not in err, err
    if not said:
        assert "error:" not in err, err


@pytest.mark.slow
def test_the_program_with_its_reader_gone_says_nothing(project: Path) -> None:
    """The program itself, its stdout a pipe no one reads: exit 1, nothing on stderr (no traceback, no "Exception
    ignored" from the flush at exit), also when it answers from the record of an earlier run."""
    argv = [sys.executable, "-m", "r1build.cli.main", "status", "-m", str(project)]
    assert subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False).returncode == 0
    for _ in range(2):
        read, write = os.pipe()
        os.close(read)
        try:
            done = subprocess.run(
                argv,
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
                check=False,
            )
        finally:
            os.close(write)
        assert (done.returncode, done.stderr) == (1, ""), done.stderr
