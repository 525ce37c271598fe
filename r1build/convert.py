"""Turning parsed TOML into the typed model, driven by the dataclasses' type hints.

Every problem becomes a :class:`ConversionProblem` with the key path it concerns, so the loader can point at the
file and line. Unknown keys get a did-you-mean.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

__all__ = ["ConversionProblem", "KeyPath", "convert", "did_you_mean", "field_key"]

KeyPath = tuple[str | int, ...]
T = TypeVar("T")


@dataclass(frozen=True)
class ConversionProblem(Exception):
    """One conversion problem at ``path``."""

    path: KeyPath
    message: str


def field_key(name: str) -> str:
    """TOML key of a dataclass field."""
    return name.replace("_", "-")


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    import difflib  # here: only a mistake asks

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp) if a is not type(None))
    if origin is list:
        return "an array"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a table"
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}.get(tp, str(tp))


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", int: "an integer", float: "a number", list: "an array", dict: "a table"}.get(
        type(value), type(value).__name__
    )


def convert(tp: Any, value: object, path: KeyPath = (), *, kebab: bool = True) -> Any:
    """Convert ``value`` to type ``tp``, raising :class:`ConversionProblem` for the first thing wrong.

    ``kebab``: dataclass fields are spelled in kebab-case (TOML); snake_case otherwise (JSON records). The type is
    read once per process into a converter (:func:`_converter`): a record's first read pays no type
    introspection per value.
    """
    return _converter(tp, kebab)(value, path)


Converter = Callable[[object, KeyPath], Any]


@functools.cache
def _converter(tp: Any, kebab: bool) -> Converter:
    """The converter of one type (built once; dataclass fields resolved on first use, so types may nest)."""
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_converter(tp, kebab)
    if origin in (Union, types.UnionType):
        return _union_converter(tp, kebab)
    if origin is Literal:
        allowed = get_args(tp)

        def literal(value: object, path: KeyPath) -> Any:
            if value not in allowed:
                choices = [str(a) for a in allowed]
                hint = did_you_mean(str(value), choices)
                raise ConversionProblem(path, f"must be one of {', '.join(map(repr, choices))}, got {value!r}{hint}")
            return value

        return literal
    if origin is list:
        (item_type,) = get_args(tp)

        def array(value: object, path: KeyPath) -> Any:
            if not isinstance(value, list):
                raise ConversionProblem(path, f"expected an array, got {_describe(value)}")
            item = _converter(item_type, kebab)
            return [item(v, (*path, i)) for i, v in enumerate(value)]

        return array
    if origin is dict:
        _, value_type = get_args(tp)

        def table(value: object, path: KeyPath) -> Any:
            if not isinstance(value, dict):
                raise ConversionProblem(path, f"expected a table, got {_describe(value)}")
            item = _converter(value_type, kebab)
            return {str(k): item(v, (*path, str(k))) for k, v in value.items()}

        return table
    scalar = _SCALARS.get(tp)
    if scalar is None:
        raise TypeError(f"unsupported type in the manifest model: {tp!r}")  # a bug in the model, not the input
    return scalar


def _union_converter(tp: Any, kebab: bool) -> Converter:
    options = get_args(tp)
    nullable = type(None) in options
    real = [o for o in options if o is not type(None)]
    resolved: list[Converter] = []  # the options' converters, looked up at the first call (types may nest)

    def union(value: object, path: KeyPath) -> Any:
        if value is None and nullable:
            return None
        if not resolved:
            resolved.extend(_converter(o, kebab) for o in real)
        if len(resolved) == 1:
            return resolved[0](value, path)
        for option in resolved:
            try:
                return option(value, path)
            except ConversionProblem:
                continue
        raise ConversionProblem(path, f"expected {_type_name(tp)}, got {_describe(value)}")

    return union


def _bool(value: object, path: KeyPath) -> bool:
    if not isinstance(value, bool):
        raise ConversionProblem(path, f"expected a boolean, got {_describe(value)}")
    return value


def _int(value: object, path: KeyPath) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConversionProblem(path, f"expected an integer, got {_describe(value)}")
    return value


def _float(value: object, path: KeyPath) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConversionProblem(path, f"expected a number, got {_describe(value)}")
    return float(value)


def _str(value: object, path: KeyPath) -> str:
    if not isinstance(value, str):
        raise ConversionProblem(path, f"expected a string, got {_describe(value)}")
    return value


_SCALARS: dict[Any, Converter] = {bool: _bool, int: _int, float: _float, str: _str}


@functools.cache
def _shape(cls: type, kebab: bool) -> tuple[dict[str, dataclasses.Field[Any]], dict[str, Any]]:
    """The init fields of a dataclass by key, and its resolved type hints (resolving them is the slow part)."""
    fields = {(field_key(f.name) if kebab else f.name): f for f in dataclasses.fields(cls) if f.init}
    return fields, typing.get_type_hints(cls)


def _dataclass_converter(cls: type, kebab: bool) -> Converter:
    def record(value: object, path: KeyPath) -> Any:
        return _convert_dataclass(cls, value, path, kebab)

    return record


def _exact(tp: Any) -> tuple[type | None, bool]:
    """For a field of a plain scalar type (or an optional one): the type whose values pass as they are, and
    whether None does; (None, False) for anything else (its converter decides)."""
    nullable = False
    if get_origin(tp) in (Union, types.UnionType):
        real = [o for o in get_args(tp) if o is not type(None)]
        if len(real) != 1:
            return None, False
        nullable, tp = True, real[0]
    return (tp, nullable) if tp in (str, int, float, bool) else (None, False)


@functools.cache
def _plan(
    cls: type, kebab: bool
) -> tuple[dict[str, dataclasses.Field[Any]], list[tuple[str, str, Converter, bool, type | None, bool]]]:
    """The init fields of a dataclass by key, and for each: its key, name, converter, whether it is required,
    and the type whose values (and whether None) pass unconverted."""
    fields, hints = _shape(cls, kebab)
    steps = [
        (
            key,
            f.name,
            _converter(hints[f.name], kebab),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            *_exact(hints[f.name]),
        )
        for key, f in fields.items()
    ]
    return fields, steps


def _convert_dataclass(cls: type[T], value: object, path: KeyPath, kebab: bool) -> T:
    if not isinstance(value, dict):
        raise ConversionProblem(path, f"expected a table, got {_describe(value)}")
    shape_of: type = cls
    fields, steps = _plan(shape_of, kebab)
    if not value.keys() <= fields.keys():
        for key in value:
            if key not in fields:
                hint = did_you_mean(str(key), list(fields))
                raise ConversionProblem((*path, str(key)), f"unknown key {key!r}{hint}")
    kwargs: dict[str, Any] = {}
    for key, name, conv, required, exact, nullable in steps:
        v = value.get(key, _ABSENT)
        if v is not _ABSENT:
            # a value of exactly the field's scalar type is what its converter would return (bool is not int)
            kwargs[name] = v if type(v) is exact or (v is None and nullable) else conv(v, (*path, key))
        elif required:
            raise ConversionProblem((*path, key), f"missing required key {key!r}")
    return cls(**kwargs)


_ABSENT = object()
