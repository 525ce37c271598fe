"""Vendoring touches only files it wrote; lock-file and vendor-dir stay inside the project.

Real projects (the ``locked`` fixture: the root manifest narrowed to silu_mul on sm_90 and locked with the real
nvcc), the real CLI. The first two tests are the issue's reproductions: ``vendor-dir = "."`` overwrote the
project's README.md, ``vendor-dir = "kernels"`` deleted a hand-written ``kernels/gelu__fast.cu``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from r1build.cli.main import main
from r1build.keys import digest_bytes
from r1build.lock.vendor import RECORD_NAME, vendor_file_name

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

README = "# my project\nhand-written, precious\n"
HAND = "// hand-written, not r1build's\n__global__ void gelu_fast() {}\n"


def _set_key(project: Path, key: str, value: str) -> None:
    toml = project / "kernels.toml"
    text = toml.read_text(encoding="utf-8")
    text, n = re.subn(rf"^{key} = .*$", f"{key} = {json.dumps(value)}", text, count=1, flags=re.MULTILINE)
    assert n == 1
    toml.write_text(text, encoding="utf-8")


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    return " ".join(capsys.readouterr().err.split())


def test_vendor_dir_at_the_project_root_is_refused_and_readme_survives(
    locked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (locked / "README.md").write_text(README, encoding="utf-8")
    _set_key(locked, "vendor-dir", ".")
    for command in (["check"], ["vendor"], ["status"]):
        assert main([*command, "-m", str(locked)]) == 2, command
        assert "vendor-dir: '.' is the project's root" in _err(capsys)
    assert (locked / "README.md").read_text(encoding="utf-8") == README
    assert not (locked / RECORD_NAME).exists()


def test_vendor_dir_holding_hand_written_files_is_refused_and_they_survive(
    locked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (locked / "kernels" / "gelu__fast.cu").write_text(HAND, encoding="utf-8")
    before = {p.name: p.read_bytes() for p in (locked / "kernels").iterdir() if p.is_file()}
    _set_key(locked, "vendor-dir", "kernels")
    assert main(["vendor", "-m", str(locked)]) == 2
    err = _err(capsys)
    assert "holds files r1build did not write" in err and "gelu__fast.cu" in err, err
    after = {p.name: p.read_bytes() for p in (locked / "kernels").iterdir() if p.is_file()}
    assert after == before  # nothing written, nothing removed


def test_vendor_dir_that_is_a_dangling_link_is_refused_and_the_link_kept(
    locked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kernels/_r1build`` a link to a folder that does not exist ended `vendor` with a FileExistsError traceback
    (the folder could not be made where the link is)."""
    vendor_dir = locked / "kernels" / "_r1build"
    vendor_dir.symlink_to("gone")
    assert main(["vendor", "-m", str(locked)]) == 2
    err = _err(capsys)
    assert f"vendor-dir {vendor_dir} is a symbolic link to gone, which does not exist" in err, err
    assert vendor_dir.is_symlink() and not (locked / "kernels" / "gone").exists()


def test_a_record_of_vendored_files_nested_too_deeply_is_refused(
    locked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The record is JSON in the project (committed, merged, edited): one of 100,000 nested arrays ended `vendor`
    with a RecursionError traceback."""
    vendor_dir = locked / "kernels" / "_r1build"
    vendor_dir.mkdir()
    (vendor_dir / RECORD_NAME).write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert main(["vendor", "-m", str(locked)]) == 2
    err = _err(capsys)
    assert f"{vendor_dir / RECORD_NAME}: unreadable record of vendored files (nested too deeply)" in err, err


def test_vendor_records_its_files_and_removes_only_those(locked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vendor = locked / "kernels" / "_r1build"
    assert main(["vendor", "-m", str(locked)]) == 0
    source = (locked / "kernels/silu_mul_vec4.cu").read_bytes()
    name = vendor_file_name("silu_mul", digest_bytes(source))
    record = json.loads((vendor / RECORD_NAME).read_text(encoding="utf-8"))["files"]
    assert record == {name: digest_bytes(source), "README.md": digest_bytes((vendor / "README.md").read_bytes())}
    assert main(["vendor", "-m", str(locked)]) == 0  # again: nothing to do, nothing refused

    # a file of the user's in the folder: refused, nothing touched
    (vendor / "notes.txt").write_text("mine\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["vendor", "-m", str(locked)]) == 2
    assert "notes.txt" in _err(capsys)
    (vendor / "notes.txt").unlink()

    # a vendored file edited by hand is no longer r1build's to overwrite
    (vendor / name).write_bytes(source + b"// my fix\n")
    assert main(["vendor", "-m", str(locked)]) == 2
    assert f"{name} changed since r1build wrote it" in _err(capsys)
    assert (vendor / name).read_bytes() == source + b"// my fix\n"
    (vendor / name).write_bytes(source)

    # the winner changes (the baseline now): the old vendored file goes, because r1build wrote it
    (locked / "kernels.lock").unlink()
    assert main(["lock", "-m", str(locked), "--offline", "--no-gpu", "--cache-dir", str(locked / "fresh")]) == 0
    assert main(["vendor", "-m", str(locked), "--cache-dir", str(locked / "fresh")]) == 0
    baseline = vendor_file_name("silu_mul", digest_bytes((locked / "kernels/silu_mul.cu").read_bytes()))
    assert sorted(p.name for p in vendor.iterdir()) == sorted([baseline, "README.md", RECORD_NAME])


def test_a_folder_vendored_by_an_older_r1build_is_adopted(locked: Path) -> None:
    vendor = locked / "kernels" / "_r1build"
    vendor.mkdir(parents=True)
    stale = b"// an older winner\n"
    (vendor / vendor_file_name("silu_mul", digest_bytes(stale))).write_bytes(stale)
    (vendor / "README.md").write_text(
        "// r1build vendored winners: sources chosen by r1build and recorded in the lock. Generated by "
        "`r1build vendor`;\ndo not edit (an edited file no longer matches its digest and is ignored).\n",
        encoding="utf-8",
    )
    assert main(["vendor", "-m", str(locked)]) == 0
    source = (locked / "kernels/silu_mul_vec4.cu").read_bytes()
    assert sorted(p.name for p in vendor.iterdir()) == sorted(
        [vendor_file_name("silu_mul", digest_bytes(source)), "README.md", RECORD_NAME]
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("vendor-dir", "../elsewhere", "'..' is not allowed"),
        ("vendor-dir", "/tmp/r1build-vendor", "must be a relative path inside the project"),
        ("vendor-dir", "", "must be a relative path inside the project"),
        ("vendor-dir", "escape", "leads outside the project through a symbolic link"),
        ("vendor-dir", "kernels/silu_mul.cu", "is a file, not a folder"),
        ("lock-file", "../kernels.lock", "'..' is not allowed"),
        ("lock-file", "/etc/kernels.lock", "must be a relative path inside the project"),
        ("lock-file", "escape/kernels.lock", "leads outside the project through a symbolic link"),
        ("lock-file", "kernels.toml", "would overwrite the project's own file"),
        ("lock-file", "kernels", "is a folder, not a file"),
        ("lock-file", "kernels/_r1build/kernels.lock", "is inside vendor-dir"),
    ],
)
def test_lock_file_and_vendor_dir_stay_inside_the_project(
    root_copy: Path,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    key: str,
    value: str,
    message: str,
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    (root_copy / "escape").symlink_to(outside, target_is_directory=True)
    _set_key(root_copy, key, value)
    assert main(["check", "-m", str(root_copy)]) == 2
    err = _err(capsys)
    assert "kernels.toml:" in err and f"{key}: " in err and message in err, err
    assert list(outside.iterdir()) == []
