"""``r1build completions bash|zsh|fish``: scripts made from the parser, run in the real shells (zsh and fish skip
where they are not installed)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from r1build.cli.main import main


def _script(shell: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    capsys.readouterr()
    assert main(["completions", shell]) == 0
    path = tmp_path / f"r1build.{shell}"
    path.write_text(capsys.readouterr().out)
    return path


def _run(argv: list[str]) -> list[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


def _bash(script: Path, words: list[str]) -> list[str]:
    code = (
        f"source {shlex.quote(str(script))}; COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); "
        f'COMP_CWORD={len(words) - 1}; _r1build; printf "%s\\n" "${{COMPREPLY[@]}}"'
    )
    return _run(["bash", "-c", code])


def test_bash_completes_commands_options_choices_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _script("bash", tmp_path, capsys)
    top = _bash(script, ["r1build", ""])
    assert {"check", "resolve", "lock", "vendor", "cache", "doctor", "completions", "--version"} <= set(top)
    assert _bash(script, ["r1build", "ca"]) == ["cache"]
    assert _bash(script, ["r1build", "cache", "pr"]) == ["prune"]
    assert _bash(script, ["r1build", "-v", "cache", "ls", "--kind", ""]) == ["blob", "decision", "gate", "json"]
    assert _bash(script, ["r1build", "resolve", "--fro"]) == ["--frozen"]
    assert _bash(script, ["r1build", "status", "-"]).count("--json") == 1
    assert {"bash", "zsh", "fish"} <= set(_bash(script, ["r1build", "completions", ""]))
    (tmp_path / "kernels.toml").write_text("")
    assert _bash(script, ["r1build", "resolve", "-m", str(tmp_path / "kern")]) == [str(tmp_path / "kernels.toml")]
    # an option's value that is also a command's name is not taken for the command
    assert "--frozen" in _bash(script, ["r1build", "resolve", "--kernel", "cache", "--fr"])


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _script("zsh", tmp_path, capsys)
    _run(["zsh", "-n", str(script)])
    # compsys' builtins stand in as functions that print what they are given
    stubs = 'compadd() { shift; print -l -- "$@" }; compdef() { : }; _files() { print -- FILES }'

    def complete(words: list[str]) -> list[str]:
        code = (
            f"{stubs}; source {shlex.quote(str(script))}; words=({' '.join(shlex.quote(w) for w in words)}); "
            f"CURRENT={len(words)}; _r1build"
        )
        return _run(["zsh", "-f", "-c", code])

    assert "prune" in complete(["r1build", "cache", ""])
    assert complete(["r1build", "-v", "cache", "ls", "--kind", ""]) == ["blob", "decision", "gate", "json"]
    assert complete(["r1build", "resolve", "-m", ""]) == ["FILES"]
    assert "--frozen" in complete(["r1build", "resolve", ""])


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _script("fish", tmp_path, capsys)
    _run(["fish", "-n", str(script)])

    def complete(line: str) -> list[str]:
        code = f"source {shlex.quote(str(script))}; complete -C {shlex.quote(line)}"
        return _run(["fish", "--no-config", "-c", code])

    assert complete("r1build cache pr") == ["prune"]
    assert complete("r1build -v cache ls --kind ") == ["blob", "decision", "gate", "json"]
    assert complete("r1build resolve --fro") == ["--frozen"]
    assert {"bash", "zsh", "fish"} <= set(complete("r1build completions "))
