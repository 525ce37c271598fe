"""The documentation (``docs/``, built by Sphinx with MyST in ``.ci/run``) and the README that points into it.

What the pages show is checked against the code: the example manifest loads, the CLI table names every command the
parser has and only options they take, the generated references are current, every name of the design page's
glossary exists, every relative link of the README and the pages leads to a file and heading that exist, and every
result file the measured page cites is in ``bench/results/``.
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from r1build.cli.main import build_parser
from r1build.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDES = (
    "project",
    "manifest",
    "packaging",
    "bindings",
    "generation",
    "evaluation",
    "report",
    "caching",
    "cluster",
    "security",
)


def _page(name: str) -> str:
    return (DOCS / f"{name}.md").read_text(encoding="utf-8")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


@pytest.mark.parametrize("where", ["README.md", "docs/guides/manifest.md"])
def test_the_example_manifest_loads(root_copy: Path, where: str) -> None:
    text = (ROOT / where).read_text(encoding="utf-8")
    m = re.search(r"One kernel looks like this:\n\n```toml\n(.*?)```", text, re.S)
    assert m, f"{where}: the example manifest block is missing"
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
    page = _page("reference/cli")
    section = page[page.index("# Commands") : page.index("## Warm commands")]
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
            assert path, f"the CLI table's row `r1build {cell}` names no command the parser has"
            names = [" ".join([*path[:-1], last]) for last in path[-1].split("|")]
            for name in names:
                assert name in commands, f"the CLI table names `r1build {name}`, which the parser does not have"
                shown.add(name)
                for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", " ".join(words[len(path) :])):
                    assert option in commands[name], f"docs/reference/cli.md: `r1build {name}` takes no {option}"
    assert sorted(set(commands) - shown) == []


def test_the_environment_page_is_generated_from_the_settings_module() -> None:
    from r1build.manifest.schema import ENVIRONMENT_PAGE, update_page
    from r1build.settings import VARIABLES, render_variables

    page = ENVIRONMENT_PAGE.read_text(encoding="utf-8")
    assert update_page(page, render_variables()) == page, "stale: python -m r1build.manifest.schema"
    in_page = re.findall(r"^\| `(R1BUILD_[A-Z_]+)(?:=1)?` \|", page, re.MULTILINE)
    assert sorted(in_page) == sorted(VARIABLES) and len(in_page) >= 19


def _slug(heading: str) -> str:
    """The anchor MyST (``myst_heading_anchors``) and GitHub give a heading."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def test_every_relative_link_leads_to_a_page_and_heading_that_exist() -> None:
    checked = 0
    for path in [ROOT / "README.md", *_pages()]:
        text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            assert dest.exists(), f"{path.relative_to(ROOT)}: link to {target}: no such file"
            if anchor and dest.suffix == ".md":
                assert anchor in _anchors(dest), f"{path.relative_to(ROOT)}: link to {target}: no such heading"
            checked += 1
    assert checked >= 30


def test_the_readme_fits_on_a_page_and_links_every_guide() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 170
    for name in GUIDES:
        assert f"](docs/guides/{name}.md" in readme, name
    for name in ("reference/manifest", "reference/cli", "reference/environment", "design", "measured"):
        assert f"](docs/{name}.md" in readme, name


def test_every_page_is_in_the_table_of_contents() -> None:
    index = _page("index")
    for path in _pages():
        name = path.relative_to(DOCS).with_suffix("").as_posix()
        assert name == "index" or re.search(rf"^{re.escape(name)}$", index, re.MULTILINE), name


def test_the_glossary_names_records_that_exist() -> None:
    design = _page("design")
    names = re.findall(r"`(r1build(?:\.\w+)+)`", design[design.index("## Glossary") :])
    assert len(names) >= 8
    for dotted in names:
        module, _, attr = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), attr), f"docs/design.md names {dotted}, which is gone"


def test_the_measured_page_cites_result_files_that_exist() -> None:
    cited = set(re.findall(r"`([\w.-]+\.md)`", _page("measured")))
    assert len(cited) >= 10
    assert sorted(c for c in cited if not (ROOT / "bench" / "results" / c).is_file()) == []
