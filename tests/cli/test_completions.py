"""``r1build completions bash|zsh|fish``: scripts made from the parser, run in the real shells: bash, and bash
through bash-completion's loader; an interactive zsh whose compinit loads the script from $fpath and completes on
a TAB; fish (each skips, saying so, where its shell or bash-completion is not installed; .ci/run installs zsh,
bash-completion and fish)."""

from __future__ import annotations

import os
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


BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")


@pytest.mark.skipif(not BASH_COMPLETION.is_file(), reason="bash-completion is not installed")
def test_bash_completion_loads_the_installed_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Installed where the README says (``~/.local/share/bash-completion/completions/r1build``, here under
    ``XDG_DATA_HOME``), bash-completion's own loader finds the script on first use and registers it."""
    folder = tmp_path / "data" / "bash-completion" / "completions"
    folder.mkdir(parents=True)
    _script("bash", tmp_path, capsys).rename(folder / "r1build")

    def complete(words: list[str]) -> list[str]:
        line = " ".join(words)
        code = (
            f"source {BASH_COMPLETION}; complete -p r1build 2>/dev/null && echo 'registered before use'; "
            "_completion_loader r1build; spec=$(complete -p r1build) || exit 1; fn=${spec#* -F }; fn=${fn%% *}; "
            f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
            f"COMP_LINE={shlex.quote(line)}; COMP_POINT={len(line)}; "
            f'$fn r1build {shlex.quote(words[-1])} {shlex.quote(words[-2])}; printf "%s\\n" "$spec" "${{COMPREPLY[@]}}"'
        )
        env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
        env.pop("BASH_COMPLETION_USER_DIR", None)
        proc = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60, check=False, env=env)
        assert proc.returncode == 0, proc.stderr
        lines = [line for line in proc.stdout.splitlines() if line]
        assert lines[0] == "complete -o default -F _r1build r1build", lines
        return lines[1:]

    assert complete(["r1build", "cache", "pr"]) == ["prune"]
    assert complete(["r1build", "-v", "cache", "ls", "--kind", ""]) == ["blob", "decision", "gate", "json"]
    assert {"check", "resolve", "lock", "vendor", "cache", "doctor"} <= set(complete(["r1build", ""]))


# Drives a real interactive zsh in a pseudo-terminal (zsh/zpty): compinit finds the script in $fpath; once the
# shell has read its set-up it is sent the line and a TAB, which runs the completion system, and a compadd wrapper
# prints what the completion offers (then the shell exits). Past $TIMEOUT seconds it says what the shell wrote.
# compinit -D: no dump file (never -d FILE: that turns dumping back on, and compdump renames its temporary file
# onto FILE, which as root replaced /dev/null with a plain file); HOME and ZDOTDIR are the test's folder.
_ZSH_DRIVER = r"""
zmodload zsh/zpty || exit 3
zmodload zsh/datetime
zpty z zsh -f -i
zpty -w z "PS1='' PROMPT='' RPROMPT=''; unsetopt prompt_sp"
zpty -w z "fpath=($FPATH_DIR \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'print -r -- "DEF"":${_comps[r1build]}"'
zpty -w z 'compadd () { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return $?; fi;
  typeset -a hits; builtin compadd -A hits "$@"; local r=$? h; for h in $hits; do print -r -- "MATCH"":$h"; done;
  return $r }'
zpty -w z '_capture_end () { print "END""OF"; exit }; comppostfuncs=(_capture_end)'
zpty -w z 'print "READ""Y"'
float deadline=$(( EPOCHREALTIME + TIMEOUT ))
typeset -a raw
integer typed=0
while (( EPOCHREALTIME < deadline )); do
  if ! zpty -r -t z line; then sleep 0.02; continue; fi
  raw+=("$line")
  line=${line%%$'\n'}; line=${line%%$'\r'}
  if [[ $line == *READY* ]] && (( ! typed )); then
    typed=1
    zpty -n -w z "$LINE"$'\t'
  fi
  [[ $line == *DEF:* ]] && print -r -- "DEF:${line##*DEF:}"
  [[ $line == *MATCH:* ]] && print -r -- "${line##*MATCH:}"
  if [[ $line == *ENDOF* ]]; then zpty -d z; exit 0; fi
done
print -u2 -r -- "no completion within $TIMEOUT s; the shell wrote:" ${(q+)raw}
zpty -d z
exit 4
"""


@pytest.mark.slow  # six interactive zsh sessions, each running compinit
@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Installed as the README says (``r1build completions zsh > "${fpath[1]}/_r1build"``), compinit registers
    ``_r1build`` for r1build and the first TAB completes, in a real interactive zsh."""
    fpath = tmp_path / "functions"
    fpath.mkdir()
    script = _script("zsh", tmp_path, capsys).rename(fpath / "_r1build")
    _run(["zsh", "-n", str(script)])
    driver = tmp_path / "driver.zsh"
    driver.write_text(_ZSH_DRIVER)
    (tmp_path / "kernels.toml").write_text("")

    def complete(line: str) -> list[str]:
        env = {**os.environ, "FPATH_DIR": str(fpath), "LINE": line, "TIMEOUT": "120"}
        env.update(HOME=str(tmp_path), ZDOTDIR=str(tmp_path))
        proc = subprocess.run(
            ["zsh", "-f", str(driver)], capture_output=True, text=True, timeout=180, env=env, check=False
        )
        assert proc.returncode == 0, proc.stderr
        lines = [x for x in proc.stdout.splitlines() if x]
        assert lines[:1] == ["DEF:_r1build"], lines  # compinit found the script in $fpath
        return lines[1:]

    assert "prune" in complete("r1build cache ")
    assert complete("r1build ca") == ["cache"]
    assert complete("r1build -v cache ls --kind ") == ["blob", "decision", "gate", "json"]
    assert complete("r1build resolve --fro") == ["--frozen"]
    assert complete(f"r1build resolve -m {tmp_path}/kern") == ["kernels.toml"]
    assert "--frozen" in complete("r1build resolve --kernel cache --")


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
