"""The benchmark scripts under ``bench/`` keep up with the package: each name they import from r1build is there,
and each record they build from r1build's dataclasses is given only fields it has. They run on a lent GPU, where a
script that dies at its first line costs device time nobody gets back; here they are read, not run."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def _imported(tree: ast.Module) -> dict[str, object]:
    """Each name the script imports from an ``r1build`` module (at any depth of the file), by the name it is bound
    to; :class:`AttributeError` or :class:`ImportError` when one is not there."""
    names: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "r1build":
            module = importlib.import_module(node.module)
            for alias in node.names:
                names[alias.asname or alias.name] = getattr(module, alias.name)
    return names


def _field_problems(tree: ast.Module, where: str) -> list[str]:
    """Each call of an r1build dataclass in ``tree`` given a keyword that is none of its fields."""
    names = _imported(tree)
    problems = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        cls = names.get(node.func.id)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            continue
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted({k.arg for k in node.keywords if k.arg is not None} - fields)
        if unknown:
            problems.append(f"{where}:{node.lineno}: {cls.__name__} has no field {', '.join(unknown)}")
    return problems


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_bench_script_imports_names_r1build_has_and_builds_records_of_their_fields(script: Path) -> None:
    tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    assert _field_problems(tree, script.name) == []


def test_the_check_sees_a_field_that_is_gone_and_a_name_that_is_gone() -> None:
    """The test above fails on the rot it is for (``use_gpu``, renamed ``evaluate`` by the redesign)."""
    tree = ast.parse("from r1build.records import ResolveOptions\nResolveOptions(locked=True, use_gpu=False)\n")
    assert _field_problems(tree, "old.py") == ["old.py:2: ResolveOptions has no field use_gpu"]
    with pytest.raises(AttributeError):
        _imported(ast.parse("from r1build.records import NoSuchRecord\n"))
