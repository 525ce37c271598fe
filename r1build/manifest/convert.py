"""Turning parsed TOML into the typed model, driven by the dataclasses' type hints.

Every problem becomes a :class:`ConversionProblem` with the key path it concerns, so the loader can point at the
file and line. Unknown keys get a did-you-mean.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Sequence
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

    ``kebab``: dataclass fields are spelled in kebab-case (TOML); snake_case otherwise (JSON records).
    """
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _convert_dataclass(tp, value, path, kebab)
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        real = [o for o in options if o is not type(None)]
        if len(real) == 1:
            return convert(real[0], value, path, kebab=kebab)
        for option in options:
            if option is type(None):
                continue
            try:
                return convert(option, value, path, kebab=kebab)
            except ConversionProblem:
                continue
        raise ConversionProblem(path, f"expected {_type_name(tp)}, got {_describe(value)}")
    if origin is Literal:
        if value not in get_args(tp):
            choices = [str(a) for a in get_args(tp)]
            hint = did_you_mean(str(value), choices)
            raise ConversionProblem(path, f"must be one of {', '.join(map(repr, choices))}, got {value!r}{hint}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConversionProblem(path, f"expected an array, got {_describe(value)}")
        (item,) = get_args(tp)
        return [convert(item, v, (*path, i), kebab=kebab) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConversionProblem(path, f"expected a table, got {_describe(value)}")
        _, item = get_args(tp)
        return {str(k): convert(item, v, (*path, str(k)), kebab=kebab) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConversionProblem(path, f"expected a boolean, got {_describe(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConversionProblem(path, f"expected an integer, got {_describe(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConversionProblem(path, f"expected a number, got {_describe(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConversionProblem(path, f"expected a string, got {_describe(value)}")
        return value
    raise TypeError(f"unsupported type in the manifest model: {tp!r}")  # a bug in the model, not the input


@functools.cache
def _shape(cls: type, kebab: bool) -> tuple[dict[str, dataclasses.Field[Any]], dict[str, Any]]:
    """The init fields of a dataclass by key, and its resolved type hints (resolving them is the slow part)."""
    fields = {(field_key(f.name) if kebab else f.name): f for f in dataclasses.fields(cls) if f.init}
    return fields, typing.get_type_hints(cls)


def _convert_dataclass(cls: type[T], value: object, path: KeyPath, kebab: bool) -> T:
    if not isinstance(value, dict):
        raise ConversionProblem(path, f"expected a table, got {_describe(value)}")
    shape_of: type = cls
    fields, hints = _shape(shape_of, kebab)
    for key in value:
        if key not in fields:
            hint = did_you_mean(str(key), list(fields))
            raise ConversionProblem((*path, str(key)), f"unknown key {key!r}{hint}")
    kwargs: dict[str, Any] = {}
    for key, f in fields.items():
        if key in value:
            kwargs[f.name] = convert(hints[f.name], value[key], (*path, key), kebab=kebab)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConversionProblem((*path, key), f"missing required key {key!r}")
    return cls(**kwargs)
