"""The ``flops`` expression of a kernel: sizes, numbers and ``+ - * / // % **``, checked by evaluating it at
every shape the kernel declares (in floating point, as the floor computation does), so an expression that
divides by zero, overflows or is negative is refused when the manifest is read rather than on a GPU."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping, Sequence

from ..convert import did_you_mean

__all__ = ["flops_problem"]

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


class _Bad(Exception):
    pass


def _evaluate(node: ast.AST, sizes: Mapping[str, int]) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, sizes)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Name):
        return float(sizes[node.id])
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        value = _BINARY[type(node.op)](_evaluate(node.left, sizes), _evaluate(node.right, sizes))
        if isinstance(value, complex):  # a negative number to a fractional power
            raise ValueError("a negative number to a fractional power has no real value")
        return float(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, sizes)
        return -value if isinstance(node.op, ast.USub) else value
    raise _Bad


def _shown(expr: str) -> str:
    """The expression for a message: whole when short, else its start."""
    return repr(expr) if len(expr) <= 80 else repr(expr[:60]) + f"... ({len(expr)} characters)"


def evaluate_flops(expr: str, sizes: Mapping[str, int]) -> float:
    """The value of a ``flops`` expression at ``sizes``; :class:`ValueError` saying why when it has none."""
    problem = flops_problem(expr, list(sizes), [sizes])
    if problem is not None:
        raise ValueError(problem)
    return _evaluate(ast.parse(expr, mode="eval"), sizes)


def flops_problem(expr: str, size_names: Sequence[str], shapes: Sequence[Mapping[str, int]]) -> str | None:
    """Why ``expr`` is not a usable ``flops`` expression for these sizes and shapes, or None."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return f"not an arithmetic expression: {_shown(expr)}"
    except (RecursionError, MemoryError):
        return f"too long or too deeply nested to read ({len(expr)} characters): {_shown(expr)}"
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load, ast.USub, ast.UAdd, *_BINARY)
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            return f"only sizes, numbers, parentheses and + - * / // % ** are allowed: {_shown(expr)}"
        if isinstance(node, ast.Name) and node.id not in size_names:
            return f"{node.id!r} is not a size of this kernel{did_you_mean(node.id, list(size_names))}"
    for sizes in shapes:
        where = ", ".join(f"{k}={v}" for k, v in sizes.items())
        try:
            value = _evaluate(tree, sizes)
        except _Bad:
            return f"only sizes, numbers, parentheses and + - * / // % ** are allowed: {_shown(expr)}"
        except (ZeroDivisionError, OverflowError, ValueError) as exc:
            return f"{_shown(expr)} cannot be evaluated at {where}: {exc}"
        except RecursionError:
            return f"too long or too deeply nested to evaluate ({len(expr)} characters): {_shown(expr)}"
        if not math.isfinite(value) or value < 0:
            return f"{_shown(expr)} is {value:g} at {where}; the operation count must be finite and not negative"
    return None
