"""Ranges of the manifest's numbers: declared on the model's fields, checked after conversion, written into
the JSON schema. Strings anywhere must hold no control characters (tab and line breaks aside).

A field declares its range with :func:`bounded` (``registers: int | None = bounded(None, ge=1, le=255)``);
:func:`check_numbers` walks a converted manifest record and raises a :class:`~.convert.ConversionProblem` at the first
number that is out of its range, and at any number that is not finite (NaN or infinity), wherever it sits.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..convert import ConversionProblem, Field, KeyPath, field, field_key, fields, is_record, record

__all__ = ["Bounds", "bounded", "check_numbers", "field_bounds"]


@record(frozen=True)
class Bounds:
    """An interval; None leaves a side open."""

    ge: float | None = None
    """Smallest value allowed."""
    gt: float | None = None
    """Values must be above this."""
    le: float | None = None
    """Largest value allowed."""
    lt: float | None = None
    """Values must be below this."""

    def problem(self, value: float) -> str | None:
        """Why ``value`` is outside, or None."""
        if self.ge is not None and value < self.ge:
            return f"must be at least {_num(self.ge)}, got {_num(value)}"
        if self.gt is not None and value <= self.gt:
            return f"must be above {_num(self.gt)}, got {_num(value)}"
        if self.le is not None and value > self.le:
            return f"must be at most {_num(self.le)}, got {_num(value)}"
        if self.lt is not None and value >= self.lt:
            return f"must be below {_num(self.lt)}, got {_num(value)}"
        return None

    def json_schema(self) -> dict[str, float]:
        """The JSON schema keywords of the interval."""
        out: dict[str, float] = {}
        if self.ge is not None:
            out["minimum"] = self.ge
        if self.gt is not None:
            out["exclusiveMinimum"] = self.gt
        if self.le is not None:
            out["maximum"] = self.le
        if self.lt is not None:
            out["exclusiveMaximum"] = self.lt
        return out

    def render(self) -> str:
        """``≥ 1``, ``> 0, ≤ 1``, ``1..255``: the range for a reference table."""
        if self.ge is not None and self.le is not None:
            return f"{_num(self.ge)}..{_num(self.le)}"
        parts = [
            f"{sign} {_num(bound)}"
            for sign, bound in (("≥", self.ge), (">", self.gt), ("≤", self.le), ("<", self.lt))
            if bound is not None
        ]
        return ", ".join(parts)


def _num(value: float) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        # too large for a float, and for str() past 4300 digits: said by its size
        return f"an integer of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


def bounded(
    default: Any, *, ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None
) -> Any:
    """A dataclass field with ``default`` whose value must lie in the interval."""
    return field(default=default, metadata={"bounds": Bounds(ge=ge, gt=gt, le=le, lt=lt)})


def field_bounds(f: Field) -> Bounds | None:
    """The range a field declares, if any."""
    bounds = f.metadata.get("bounds")
    return bounds if isinstance(bounds, Bounds) else None


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""A control character other than tab, newline and carriage return."""


def _finite(value: object, path: KeyPath) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConversionProblem(path, f"must be a finite number, got {value}")
    if isinstance(value, str) and _CONTROL.search(value):
        raise ConversionProblem(path, f"holds a control character: {value!r}")
    if isinstance(value, list):
        for i, item in enumerate(value):
            _finite(item, (*path, i))


_CHECKED: dict[type, tuple[tuple[str, str, Bounds | None], ...]] = {}
"""Per dataclass: each field set at construction, its manifest key and its range (found once per class)."""


def _checked_fields(cls: type) -> tuple[tuple[str, str, Bounds | None], ...]:
    found = _CHECKED.get(cls)
    if found is None:
        found = _CHECKED[cls] = tuple((f.name, field_key(f.name), field_bounds(f)) for f in fields(cls) if f.init)
    return found


def check_numbers(record: object, path: KeyPath = ()) -> None:
    """Raise :class:`ConversionProblem` at the first non-finite number, number outside its field's range or
    string with a control character in ``record`` (a converted manifest dataclass; nested records, lists and
    tables are walked)."""
    if isinstance(record, list):
        for i, item in enumerate(record):
            check_numbers(item, (*path, i))
        return
    if isinstance(record, dict):
        for key, item in record.items():
            check_numbers(item, (*path, str(key)))
        return
    if not (is_record(record) and not isinstance(record, type)):
        _finite(record, path)
        return
    for name, key, bounds in _checked_fields(type(record)):
        value = getattr(record, name)
        kind = type(value)
        if kind is bool or value is None or (kind is int and bounds is None):
            continue  # nothing to check: the common case, without a call for each (a manifest has thousands)
        where = (*path, key)
        if kind in (int, float, str):
            _finite(value, where)
        else:
            check_numbers(value, where)
        if bounds is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            problem = bounds.problem(value)
            if problem is not None:
                raise ConversionProblem(where, problem)
