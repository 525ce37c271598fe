"""The README's example kernel declaration is a valid manifest, and its CLI table names what the parser has."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from r1build.cli.main import build_parser
from r1build.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_manifest_loads(root_copy: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"One kernel looks like this:\n\n```toml\n(.*?)```", readme, re.S)
    assert m, "the README's example manifest block is missing"
    (root_copy / "kernels.toml").write_text(m.group(1), encoding="utf-8")
    manifest = load_manifest(root_copy / "kernels.toml")
    assert [k.name for k in manifest.kernels] == ["softmax_rows"]
    assert manifest.archs_of(manifest.kernels[0]) == ["sm_80", "sm_90"]


def _commands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, set[str]]:
    """Every leaf command (``"status"``, ``"cache prune"``) → its option strings."""
    out: dict[str, set[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out.update(_commands(child, f"{path} {name}".strip()))
    if not out and path:
        out[path] = {o for a in parser._actions for o in a.option_strings}
    return out


def test_the_cli_table_names_every_command_and_only_options_they_take() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## The CLI") : readme.index("**Warm commands.**")]
    commands = _commands(build_parser())
    rows = re.findall(r"^\| `r1build ([^`]+)`((?: / `[^`]+`)*) \|", section, re.MULTILINE)
    assert rows
    shown: set[str] = set()
    for head, more in rows:
        cells = [head, *re.findall(r"`(?:r1build )?([^`]+)`", more)]
        for cell in cells:
            words = cell.replace("\\|", "|").split()
            # the command: its leading words that name commands (a|b|c lists siblings: `cache stats|ls|verify`)
            path: list[str] = []
            for word in words:
                trial = [" ".join([*path, alt]) for alt in word.split("|")]
                if not all(any(c == t or c.startswith(t + " ") for c in commands) for t in trial):
                    break
                path.append(word)
            assert path, f"README's CLI table row `r1build {cell}` names no command the parser has"
            names = [" ".join([*path[:-1], last]) for last in path[-1].split("|")]
            for name in names:
                assert name in commands, f"README's CLI table names `r1build {name}`, which the parser does not have"
                shown.add(name)
                for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", " ".join(words[len(path) :])):
                    assert option in commands[name], f"README: `r1build {name}` takes no {option}"
    assert sorted(set(commands) - shown) == []
