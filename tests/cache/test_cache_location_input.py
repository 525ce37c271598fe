"""Cache locations that cannot hold a cache, given on the command line: a maintenance command says so with exit 2
(a name too long for the file system was exit 1, 'cannot create the cache directory'), and a project command
goes on with a scratch cache whose warning says why (a dangling link said only 'File exists')."""

from __future__ import annotations

from pathlib import Path

import pytest

from r1build.cache import open_usable
from r1build.cli.main import main
from r1build.events import Note


@pytest.mark.parametrize("command", [["cache", "stats"], ["cache", "ls"], ["cache", "gc"], ["cache", "clean"]])
def test_a_cache_dir_name_too_long_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    where = tmp_path / ("x" * 300)
    assert main([*command, "--cache-dir", str(where)]) == 2
    err = capsys.readouterr().err
    assert "argument --cache-dir: " in err and "a name in it is 300 bytes long" in err and "Traceback" not in err


def test_a_dangling_link_as_the_cache_dir_is_named_in_the_warning(tmp_path: Path, notes: list[Note]) -> None:
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "nowhere")
    with open_usable(link) as cache:
        assert cache.degraded is not None
    warnings = [n.message for n in notes if n.level == "warning"]
    assert any(f"it is a symbolic link to {tmp_path / 'nowhere'}, which does not exist" in w for w in warnings)
    assert not (tmp_path / "nowhere").exists()
