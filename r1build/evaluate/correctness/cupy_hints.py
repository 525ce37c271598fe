"""A static look at a numpy reference for what likely keeps it from running on cupy arrays.

The library's time is the numpy reference run with its ``numpy`` rebound to cupy
(:mod:`r1build.evaluate.child.measures`); a reference cupy cannot run loses that figure on the GPU. ``r1build check``
names the likely causes beforehand, read from the source (the function and the module's functions it calls), never
by running it: a hint, not isolation. A kernel naming a ``gpu-reference`` gets none (its library is that function).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from ...manifest.reference import ReferenceProblem, reference_file

__all__ = ["NOT_IN_CUPY", "cupy_problems"]

NOT_IN_CUPY = frozenset(
    {
        # Kept short and explicit: numpy names cupy (13.x) has no counterpart for, that references plausibly use.
        # Not exhaustive (the figure's own failure on the GPU is the authority); extend when one is met.
        "errstate",
        "seterr",
        "geterr",
        "vectorize",  # cupy.vectorize compiles a restricted subset of Python; a numpy one calls Python per element
        "frompyfunc",
        "nditer",
        "fromiter",
        "longdouble",
        "float128",
        "ma",
        "char",
        "rec",
        "emath",
    }
)
"""Attributes of ``numpy`` (``np.errstate``) and names imported from it that cupy lacks or runs per element."""


def cupy_problems(root: Path, ref: str) -> list[str]:
    """What in reference ``ref`` (``module:function`` under ``root``) likely fails or crawls on cupy arrays, as
    ``file:line: what`` lines; empty when nothing was seen or the source cannot be read (``check`` reports that
    elsewhere)."""
    try:
        path = reference_file(root, ref)
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (ReferenceProblem, OSError, SyntaxError, ValueError):
        return []
    aliases, imported = _numpy_names(tree)
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found: list[str] = []
    for fn in _reached(functions, ref.partition(":")[2]):
        params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        for node in ast.walk(fn):
            what = _problem(node, aliases, imported, params)
            if what is not None:
                found.append(f"{path.name}:{getattr(node, 'lineno', fn.lineno)}: {what}")
    return list(dict.fromkeys(found))


def _numpy_names(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """Names bound to the numpy module (``np``), and names imported from it that cupy lacks (local → numpy's)."""
    aliases: set[str] = set()
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == "numpy"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "numpy":
            imported |= {a.asname or a.name: a.name for a in node.names if a.name in NOT_IN_CUPY}
    return aliases, imported


def _reached(
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef], start: str
) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The function ``start`` and the module's functions it calls by name, transitively."""
    todo, seen = [start], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        yield functions[name]
        calls = [c for c in ast.walk(functions[name]) if isinstance(c, ast.Call)]
        todo += [c.func.id for c in calls if isinstance(c.func, ast.Name)]


def _problem(node: ast.AST, aliases: set[str], imported: dict[str, str], params: set[str]) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
        if node.attr in NOT_IN_CUPY:
            return f"uses {node.value.id}.{node.attr}, which cupy has no counterpart for"
    elif isinstance(node, ast.Name) and node.id in imported and isinstance(node.ctx, ast.Load):
        return f"uses numpy's {imported[node.id]}, which cupy has no counterpart for"
    elif isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
            return "raises NotImplementedError (a case the reference leaves out may be the one cupy takes)"
    elif isinstance(node, (ast.For, *_COMPREHENSIONS)) and _over_elements(node, params):
        return "loops in Python over an argument's elements (one GPU call per element on cupy: not the library's time)"
    return None


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _over_elements(node: ast.AST, params: set[str]) -> bool:
    """A loop (or comprehension) that iterates over an array argument, or whose body indexes one with its loop
    variable."""
    if isinstance(node, ast.For):
        iters, targets, body = [node.iter], [node.target], list(node.body)
    else:
        gens: list[ast.comprehension] = getattr(node, "generators", [])
        iters, targets = [g.iter for g in gens], [g.target for g in gens]
        body = [getattr(node, k) for k in ("elt", "key", "value") if hasattr(node, k)]
    if any(isinstance(it, ast.Name) and it.id in params for it in iters):
        return True
    names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    subscripts = [s for part in body for s in ast.walk(part) if isinstance(s, ast.Subscript)]
    return any(
        isinstance(s.value, ast.Name)
        and s.value.id in params
        and bool({n.id for n in ast.walk(s.slice) if isinstance(n, ast.Name)} & names)
        for s in subscripts
    )
