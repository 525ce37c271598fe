"""The package faces: outside ``cache/`` and ``lock/``, modules import from the package (``r1build.cache``,
``r1build.lock``), never from the modules inside it; ``cache.remote`` is a package with a face of its own. And no
module imports, at import time, one that imports it back."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import r1build

_NOT_YET: set[str] = set()


def test_no_module_reaches_into_the_cache_or_lock_package() -> None:
    package = Path(r1build.__file__).parent
    inner = re.compile(r"^\s*from\s+\.+(?:cache|lock)\.(?!remote\b)\w+\s+import\b", re.M)
    offenders = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).parts[0] not in ("cache", "lock") and inner.search(path.read_text())
    ]
    assert sorted(set(offenders) - _NOT_YET) == []


def _import_time_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements among ``body`` that run when the module is imported: at module level, and inside
    ``if`` (but not ``if TYPE_CHECKING:``), ``try`` and ``with`` blocks; not inside functions or classes."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                out += _import_time_imports(node.body)
            out += _import_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                out += _import_time_imports(block)
        elif isinstance(node, ast.With):
            out += _import_time_imports(node.body)
    return out


def _module_imports(package: Path) -> dict[str, set[str]]:
    """Every module of r1build and the r1build modules it imports when it is imported (see
    :func:`_import_time_imports`)."""
    modules: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for imp in _import_time_imports(ast.parse(path.read_text()).body):
            if isinstance(imp, ast.Import):
                found.update(alias.name for alias in imp.names)
                continue
            base = here[: len(here) - imp.level + 1] if imp.level else []
            target = ".".join(base + ([imp.module] if imp.module else []))
            for alias in imp.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (module -> modules it imports), each as the path that closes it."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_import_cycles() -> None:
    """Stages never import upward: no module of r1build imports, at import time, one that imports it back."""
    assert _cycles(_module_imports(Path(r1build.__file__).parent)) == []


def test_an_import_cycle_is_found(tmp_path: Path) -> None:
    """The check above sees a cycle through a package face and relative imports, and not one that only a function
    or ``if TYPE_CHECKING:`` would close."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .sub import thing\n")
    (package / "sub" / "__init__.py").write_text("from .inner import thing\n")
    (package / "sub" / "inner.py").write_text("from ..a import x\nthing = x = 1\n")
    (package / "late.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n\n"
        "def f() -> None:\n    from .a import x\n"
    )
    graph = _module_imports(package)
    assert _cycles(graph) == [["pkg.a", "pkg.sub", "pkg.sub.inner", "pkg.a"]]
    assert graph["pkg.late"] == set()
