"""``r1build completions bash|zsh|fish``: a shell completion script, generated from the argument parser.

The script is static: it lists, for every command path (``""``, ``cache``, ``cache prune`` ...), the words that may
follow (sub-commands and options), which options take a file, and the choices of options that have them; the
shell completes from that table without starting Python. It is made from the same parser that parses the
command line, so it cannot drift from it. Install it once::

    r1build completions bash > ~/.local/share/bash-completion/completions/r1build
    r1build completions zsh > "${fpath[1]}/_r1build"
    r1build completions fish > ~/.config/fish/completions/r1build.fish
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from ..convert import field, record
from .render import Console

__all__ = ["SHELLS", "register", "script"]

SHELLS = ("bash", "zsh", "fish")

_PATH_METAVARS = frozenset({"PATH", "FILE", "DIR"})


@record
class _Node:
    """What may follow one command path."""

    words: list[str] = field(default_factory=list)
    """Sub-commands and options."""
    files: list[str] = field(default_factory=list)
    """Options whose value is a file or folder."""
    choices: dict[str, list[str]] = field(default_factory=dict)
    """Options with a fixed set of values, to those values."""


def register(sub: Any) -> None:
    """Add ``completions``."""
    p = sub.add_parser("completions", help="print a shell completion script (bash, zsh or fish)")
    p.add_argument("shell", choices=SHELLS, help="the shell")
    p.set_defaults(func=cmd_completions)


def cmd_completions(args: argparse.Namespace, console: Console) -> int:
    from .main import build_parser

    console.raw(script(build_parser(), args.shell))
    return 0


def _tree(parser: argparse.ArgumentParser, path: str = "", out: dict[str, _Node] | None = None) -> dict[str, _Node]:
    out = {} if out is None else out
    node = out.setdefault(path, _Node())
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                node.words.append(name)
                _tree(child, f"{path} {name}".strip(), out)
            continue
        if not action.option_strings:
            node.words += [str(c) for c in action.choices or ()]  # a positional's fixed values
            continue
        if action.help == argparse.SUPPRESS:
            continue
        node.words += action.option_strings
        if action.nargs == 0:
            continue
        if action.choices is not None:
            for option in action.option_strings:
                node.choices[option] = [str(c) for c in action.choices]
        elif action.type is Path or str(action.metavar) in _PATH_METAVARS:
            node.files += action.option_strings
    return out


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell``."""
    tree = _tree(parser)
    if shell == "bash":
        return _bash(tree)
    if shell == "zsh":
        return _zsh(tree)
    if shell == "fish":
        return _fish(tree)
    raise ValueError(f"no completion for {shell!r} (one of {', '.join(SHELLS)})")


def _q(words: list[str]) -> str:
    return shlex.quote(" ".join(words))


def _cases(tree: dict[str, _Node], indent: str, fmt: str) -> str:
    """One ``case`` arm per (path, kind) with ``fmt`` giving the arm for the quoted path and words."""
    lines = []
    for path, node in sorted(tree.items()):
        lines.append(indent + fmt.format(path=shlex.quote(path), words=_q(node.words)))
    return "\n".join(lines)


def _value_cases(tree: dict[str, _Node], indent: str, files: str, choice: str) -> str:
    lines = []
    for path, node in sorted(tree.items()):
        for option in node.files:
            lines.append(f"{indent}{shlex.quote(path + '|' + option)}) {files} ;;")
        for option, values in node.choices.items():
            arm = choice.format(words=_q(values), each=" ".join(shlex.quote(v) for v in values))
            lines.append(f"{indent}{shlex.quote(path + '|' + option)}) {arm} ;;")
    return "\n".join(lines)


_BASH_FILES = 'COMPREPLY=($(compgen -f -- "$cur")); return'
_BASH_CHOICE = 'COMPREPLY=($(compgen -W {words} -- "$cur")); return'


def _bash(tree: dict[str, _Node]) -> str:
    values = _value_cases(tree, "        ", _BASH_FILES, _BASH_CHOICE)
    return f"""# bash completion for r1build (r1build completions bash)
_r1build_words() {{
    case "$1" in
{_cases(tree, "        ", "{path}) echo {words} ;;")}
        *) return 1 ;;
    esac
}}
_r1build() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} cmdpath="" next w i
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        [[ $w == -* ]] && continue
        next=${{cmdpath:+$cmdpath }}$w
        _r1build_words "$next" >/dev/null && cmdpath=$next
    done
    case "$cmdpath|$prev" in
{values}
    esac
    COMPREPLY=($(compgen -W "$(_r1build_words "$cmdpath")" -- "$cur"))
}}
complete -o default -F _r1build r1build
"""


def _zsh(tree: dict[str, _Node]) -> str:
    return f"""#compdef r1build
# zsh completion for r1build (r1build completions zsh)
_r1build_words() {{
    case "$1" in
{_cases(tree, "        ", "{path}) print -r -- {words} ;;")}
        *) return 1 ;;
    esac
}}
_r1build() {{
    local cmdpath="" next w i
    for ((i = 2; i < CURRENT; i++)); do
        w=${{words[i]}}
        [[ $w == -* ]] && continue
        next=${{cmdpath:+$cmdpath }}$w
        _r1build_words "$next" >/dev/null && cmdpath=$next
    done
    case "$cmdpath|${{words[CURRENT-1]}}" in
{_value_cases(tree, "        ", "_files; return", "compadd -- {each}; return")}
    esac
    compadd -- ${{=$(_r1build_words "$cmdpath")}}
}}
# autoloaded from $fpath by compinit (this file is the body of _r1build): complete now; sourced: register
if [[ ${{zsh_eval_context[-1]}} == loadautofunc ]]; then
    _r1build "$@"
else
    compdef _r1build r1build
fi
"""


def _fish(tree: dict[str, _Node]) -> str:
    return f"""# fish completion for r1build (r1build completions fish)
function __r1build_words
    switch $argv[1]
{_cases(tree, "        ", "case {path}" + chr(10) + "            string split ' ' -- {words}")}
        case '*'
            return 1
    end
end
function __r1build_path
    set -l cmdpath ''
    for w in (commandline -opc)[2..-1]
        string match -q -- '-*' $w; and continue
        set -l next (string trim -- "$cmdpath $w")
        __r1build_words $next >/dev/null; and set cmdpath $next
    end
    echo $cmdpath
end
function __r1build_complete
    set -l cmdpath (__r1build_path)
    set -l prev (commandline -opc)[-1]
    switch "$cmdpath|$prev"
{_fish_values(tree)}
    end
    __r1build_words $cmdpath
end
complete -c r1build -f -a '(__r1build_complete)'
"""


def _fish_values(tree: dict[str, _Node]) -> str:
    lines = []
    for path, node in sorted(tree.items()):
        for option in node.files:
            lines += [
                f"        case {shlex.quote(path + '|' + option)}",
                "            __fish_complete_path (commandline -ct)",
                "            return",
            ]
        for option, values in node.choices.items():
            lines += [
                f"        case {shlex.quote(path + '|' + option)}",
                f"            string split ' ' -- {_q(values)}",
                "            return",
            ]
    return "\n".join(lines)
