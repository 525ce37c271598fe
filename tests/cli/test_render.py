"""What the CLI prints never carries a terminal's control sequences: kernel names, GPU and model names and
compiler output may come from a teammate's cache, a bundle or a remote."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.cli.render import Console
from r1build.records import CandidateRef, Origin
from tests.support.decisions import measured_decision, measured_result

ESC = "\x1b"


def test_control_sequences_from_a_cache_are_shown_not_sent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Cache(tmp_path / "c") as cache:
        source = cache.put_text("// x\n")
        ref = CandidateRef(source, source, Origin("generated", model="m\x1b]0;owned\x07", round=0, sample=0))
        device = "H200\x1b]0;title\x07"
        result = measured_result(source, 1.0, device=device, samples=1, spread=0.0)
        evil = measured_decision(ref, key="e" * 64, kernel="evil\x1b[2J\x1b[31m", device=device, result=result)
        cache.put_decision(dataclasses.replace(evil, arch="sm_90\x9b1m"))
    capsys.readouterr()
    assert main(["cache", "ls", "--cache-dir", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and "\x9b" not in out and "\x07" not in out, out
    assert "evil\\x1b[2J\\x1b[31m" in out, out  # shown, so the odd name is still seen

    console = Console()
    console.warning("a line\nand its detail\twith a tab \x1b[1A\x1b[2K")
    console.table(["a"], [["x\x1b[31m"]])
    captured = capsys.readouterr()
    assert ESC not in captured.err + captured.out
    assert "a line\nand its detail\twith a tab \\x1b[1A" in captured.err  # line breaks and tabs stay
