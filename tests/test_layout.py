"""The package faces: outside ``cache/`` and ``lock/``, modules import from the package (``r1build.cache``,
``r1build.lock``), never from the modules inside it; ``cache.remote`` is a package with a face of its own. No
module imports, at import time or from inside a function, one that imports it back; folders import only from their
own floor or below (:data:`FLOORS`); the package root keeps only the shared vocabulary; the tests mirror the
package; and a warm build imports nothing but the standard library."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
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


def _modules(package: Path) -> dict[str, Path]:
    """Every module of r1build by its dotted name (a package by its ``__init__.py``)."""
    modules: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported(
    name: str, path: Path, modules: dict[str, Path], statements: list[ast.Import | ast.ImportFrom]
) -> tuple[list[str], set[str]]:
    """The package the module ``name`` (at ``path``) resolves relative imports in, as its parts, and the modules
    ``statements`` (its import statements) name: a submodule where ``from a import b`` names one, else the
    package."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for imp in statements:
        if isinstance(imp, ast.Import):
            found.update(alias.name for alias in imp.names)
            continue
        base = here[: len(here) - imp.level + 1] if imp.level else []
        target = ".".join(base + ([imp.module] if imp.module else []))
        for alias in imp.names:
            sub = f"{target}.{alias.name}"
            found.add(sub if sub in modules else target)
    return here, found


def _module_imports(package: Path) -> dict[str, set[str]]:
    """Every module of r1build and the r1build modules it imports when it is imported (see
    :func:`_import_time_imports`)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        _, found = _imported(name, path, modules, _import_time_imports(ast.parse(path.read_text()).body))
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


def _all_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement among ``body``, inside functions and classes too, but not under
    ``if TYPE_CHECKING:`` (those never run)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out += _all_imports(node.orelse)
        else:
            out += _all_imports([n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)])
    return out


def _run_time_imports(package: Path) -> dict[str, set[str]]:
    """Module -> the r1build modules it may import while it runs (see :func:`_all_imports`), including the
    package faces that importing ``a.b.c`` runs first (``a`` and ``a.b``), but not the importer's own packages
    (Python has started those already)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here, found = _imported(name, path, modules, _all_imports(ast.parse(path.read_text()).body))
        ours = set(".".join(here[:i]) for i in range(1, len(here) + 1))
        with_faces = {".".join(m.split(".")[:i]) for m in found for i in range(1, m.count(".") + 2)}
        graph[name] = {m for m in with_faces if m in modules and m != name and m not in ours}
    return graph


def test_no_import_cycles_through_function_local_imports() -> None:
    """A loop that only a function-local import closes is a loop too: the lower module then knows the higher."""
    assert _cycles(_run_time_imports(Path(r1build.__file__).parent)) == []


def test_a_function_local_cycle_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f() -> None:\n    from .sub.inner import y\n")
    (package / "sub" / "__init__.py").write_text("from .face import z\n")
    (package / "sub" / "face.py").write_text("z = 1\n")
    (package / "sub" / "inner.py").write_text("y = 1\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\nclass C:\n"
        "    def g(self) -> None:\n        from .a import f\n"
    )
    (package / "sub" / "face2.py").write_text("from ..a import f\n")
    graph = _run_time_imports(package)
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.inner"}  # importing pkg.sub.inner runs pkg.sub first
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.sub.face2"] == {"pkg.a"}  # not pkg or pkg.sub: they are its own packages
    (package / "sub" / "face.py").write_text("from ..a import f\nz = 1\n")
    assert _cycles(_run_time_imports(package)) == [["pkg.a", "pkg.sub", "pkg.sub.face", "pkg.a"]]


FLOORS: dict[str, int] = {
    "": 0,  # the package root: the shared vocabulary (errors, events, settings, records, keys, digests, ...)
    "manifest": 1,
    "toolchain": 1,
    "trust": 1,
    "selection": 1,
    "sandbox": 1,
    "cache": 1,
    "lock": 1,
    "gate": 2,
    "evaluate": 2,
    "generate": 2,
    "emit": 2,
    "profile": 2,
    "perfmodel": 2,
    "cluster": 2,
    "resolve": 3,
    "report": 4,
    "build": 4,
    "cli": 4,
}
"""The floors of r1build's folders: a module imports (at any time) only from its own folder, a folder of a lower
floor, or one of its own floor that never imports it back. The vocabulary at the root is the ground floor; the
manifest and the toolchain stand on it; the stages (gate, evaluate, generate, ...) on those; the resolver over the
stages; the build backend, the CLI and the reports at the top."""


def _folder(module: str) -> str:
    parts = module.split(".")
    return (
        parts[1] if len(parts) > 2 or (len(parts) == 2 and (Path(r1build.__file__).parent / parts[1]).is_dir()) else ""
    )


def test_every_folder_has_a_floor_and_no_import_goes_up() -> None:
    package = Path(r1build.__file__).parent
    folders = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders | {""} == set(FLOORS)
    graph = _run_time_imports(package)
    upward = sorted(
        f"{name} -> {dep}"
        for name, deps in graph.items()
        for dep in deps
        if FLOORS[_folder(dep)] > FLOORS[_folder(name)]
    )
    assert upward == []
    across: dict[str, set[str]] = {f: set() for f in FLOORS}
    for name, deps in graph.items():
        across[_folder(name)] |= {_folder(d) for d in deps if _folder(d) != _folder(name)}
    assert _cycles(across) == []  # folders of one floor: one may use the other, never both ways


def test_the_package_root_keeps_only_the_shared_vocabulary() -> None:
    """At most 11 files directly in ``r1build/`` (``py.typed`` and data files count): a module that belongs to a
    stage lives in the stage's folder."""
    root = [p.name for p in Path(r1build.__file__).parent.iterdir() if p.is_file()]
    assert len(root) <= 11, sorted(root)


REPOSITORY_TESTS = {"test_layout.py", "test_docs.py", "test_bench_scripts.py"}
"""The tests at the top of ``tests/`` that are of the repository, not of a module of the package root."""


def test_the_tests_mirror_the_package() -> None:
    """A folder of tests for each folder of the package, and at the top of ``tests/`` only the tests of the root's
    modules (``test_keys.py`` for ``keys.py``) and of the repository: a test of a stage's module is in the stage's
    folder, where a newcomer looks for it."""
    package = Path(r1build.__file__).parent
    tests = Path(__file__).parent
    folders = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders - {p.name for p in tests.iterdir() if p.is_dir()} == set()
    modules = {p.stem for p in package.glob("*.py")}
    loose = {p.name for p in tests.glob("test_*.py")} - REPOSITORY_TESTS
    assert {name for name in loose if name.removeprefix("test_").removesuffix(".py") not in modules} == set()


def test_a_warm_build_imports_only_the_standard_library() -> None:
    """What ``import r1build.build`` loads, and every module of r1build it loads then may import from inside its
    functions (the warm build's stamp check among them), is the standard library, r1build and scikit-build-core:
    no numpy, openai, cupy. The hooks in ``r1build.build`` itself delegate the cold path, and are left out."""
    code = "import json, sys, r1build.build\nprint(json.dumps(sorted(sys.modules)))\n"
    before = set(
        json.loads(
            subprocess.run(
                [sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
    )
    loaded = set(
        json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    )
    outside = (
        {m.split(".")[0] for m in loaded - before} - set(sys.stdlib_module_names) - {"r1build", "scikit_build_core"}
    )
    assert outside == set()
    package = Path(r1build.__file__).parent
    ours = sorted(m for m in loaded if m.startswith("r1build") and m != "r1build.build")
    reached: set[Path] = set()
    graph = _run_time_imports(package)
    todo = list(ours)
    while todo:
        module = todo.pop()
        path = package.parent.joinpath(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if path in reached:
            continue
        reached.add(path)
        todo += graph[module]
    foreign = set()
    for path in reached:
        for imp in _all_imports(ast.parse(path.read_text()).body):
            if isinstance(imp, ast.ImportFrom) and imp.level:
                continue
            names = [imp.module or ""] if isinstance(imp, ast.ImportFrom) else [a.name for a in imp.names]
            top = {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"r1build"}
            foreign |= {f"{path.relative_to(package.parent)}: {t}" for t in top}
    assert foreign == set()


_MOST_LONG_FUNCTIONS = 0
"""Functions (methods included) over 60 lines in ``r1build``: none (issue 28 took 28 to 10, its fifth session the
last 10 to 0); it never goes up."""


def _long_functions(package: Path, most_lines: int = 60) -> list[str]:
    """``path:line name (lines)`` of each function of ``package`` longer than ``most_lines`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > most_lines:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.name} ({lines})")
    return found


def test_functions_over_60_lines_only_go_down() -> None:
    """At most ``_MOST_LONG_FUNCTIONS`` functions of r1build are over 60 lines: a new long one is split into
    functions that read straight through."""
    offenders = _long_functions(Path(r1build.__file__).parent)
    assert len(offenders) <= _MOST_LONG_FUNCTIONS, "\n".join(offenders)


def test_a_long_function_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    body = "".join(f"        x{i} = {i}\n" for i in range(60))
    (package / "mod.py").write_text(f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}")
    assert _long_functions(package) == ["pkg/mod.py:6 long (61)"]
