"""Records: how r1build declares them (:func:`record`) and turns parsed TOML and JSON into them (:func:`convert`,
driven by their type hints).

Every conversion problem becomes a :class:`ConversionProblem` with the key path it concerns, so the loader can
point at the file and line. Unknown keys get a did-you-mean.

``@record(frozen=True)`` makes the same class ``@dataclass(frozen=True)`` makes, field for field
(:func:`dataclasses.fields`, :func:`dataclasses.replace`, :func:`dataclasses.asdict`, ``match``, pickling, mypy's
view of its ``__init__`` through :func:`typing.dataclass_transform`), and behaves the same: keyword and positional
arguments, defaults and ``default_factory``, ``kw_only``, ``__post_init__``, ``repr=False`` and ``compare=False``
fields, equality and hashing by the compared fields, :class:`dataclasses.FrozenInstanceError` on assignment.
Why not ``@dataclass`` itself: it writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__`` and ``__delattr__`` as source text and compiles it, about 0.3 ms a frozen class on CPython 3.11;
the ~50 records a ``resolve --locked`` imports spent ~15 ms of a ~90 ms command in the compiler
(bench/first_run_floor.py). Here each method is written once and reads the class's fields from a
:class:`_Layout` made when the class is (no code is compiled): a record costs ~30 µs to declare and about a
microsecond more to construct.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import MISSING, FrozenInstanceError
from operator import attrgetter
from reprlib import recursive_repr
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin, overload

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
elif hasattr(typing, "dataclass_transform"):  # 3.11+
    from typing import dataclass_transform
else:  # 3.10: the marker is for type checkers alone

    def dataclass_transform(**_: Any) -> Any:
        return lambda f: f


__all__ = ["ConversionProblem", "KeyPath", "convert", "did_you_mean", "field_key", "record"]

KeyPath = tuple[str | int, ...]
T = TypeVar("T")

_R = TypeVar("_R")
_LAYOUT = "__record_layout__"


class _Layout:
    """What the shared methods need of one record class, worked out once when the class is declared."""

    __slots__ = ("compared", "factories", "fields", "frozen", "init_names", "positional", "post_init", "shown")

    def __init__(self, cls: type, fields: tuple[dataclasses.Field[Any], ...], frozen: bool) -> None:
        init = [f for f in fields if f.init]
        self.fields = frozenset(f.name for f in fields)
        self.init_names = {f.name: f for f in init}
        self.positional = tuple(f.name for f in init if not f.kw_only)
        self.factories = tuple(f for f in fields if not f.init and f.default_factory is not MISSING)
        self.shown = tuple(f.name for f in fields if f.repr)
        self.compared = _getter(tuple(f.name for f in fields if f.compare))
        self.post_init = hasattr(cls, "__post_init__")
        self.frozen = frozen


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def _default(f: dataclasses.Field[Any]) -> Any:
    return f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The compared fields of a record as one tuple (``attrgetter`` of one name returns the bare value)."""
    if not names:
        return lambda _: ()
    get = attrgetter(*names)
    return (lambda obj: (get(obj),)) if len(names) == 1 else get


def _layout(obj: Any) -> _Layout:
    layout: _Layout = getattr(type(obj), _LAYOUT)
    return layout


def _init(self: Any, /, *args: Any, **kwargs: Any) -> None:
    layout, name = _layout(self), type(self).__qualname__
    if len(args) > len(layout.positional):
        raise TypeError(
            f"{name}.__init__() takes {len(layout.positional) + 1} positional arguments but {len(args) + 1} were given"
        )
    given = dict(zip(layout.positional, args, strict=False))
    for key, value in kwargs.items():
        if key not in layout.init_names:
            raise TypeError(f"{name}.__init__() got an unexpected keyword argument {key!r}")
        if key in given:
            raise TypeError(f"{name}.__init__() got multiple values for argument {key!r}")
        given[key] = value
    values = {}
    for key, f in layout.init_names.items():
        if key in given:
            values[key] = given[key]
        elif _has_default(f):
            values[key] = _default(f)
    if len(values) < len(layout.init_names):
        missing = [repr(k) for k in layout.init_names if k not in values]
        raise TypeError(f"{name}.__init__() missing {len(missing)} required argument(s): {', '.join(missing)}")
    values.update((f.name, _default(f)) for f in layout.factories)
    self.__dict__.update(values)
    if layout.post_init:
        self.__post_init__()


@recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in _layout(self).shown)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    compared = _layout(self).compared
    return compared(self) == compared(other)


def _hash(self: Any) -> int:
    return hash(_layout(self).compared(self))


def _setattr(self: Any, name: str, value: Any) -> None:
    cls = type(self)
    if _LAYOUT in cls.__dict__ or name in _layout(self).fields:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    cls = type(self)
    if _LAYOUT in cls.__dict__ or name in _layout(self).fields:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)


def _hash_action(cls: type, eq: bool, frozen: bool) -> Any:
    """What ``__hash__`` becomes, by dataclasses' own table: MISSING to leave the class's as it is."""
    own = cls.__dict__.get("__hash__", MISSING)
    explicit = not (own is MISSING or (own is None and "__eq__" in cls.__dict__))
    if not eq or explicit:
        return MISSING
    return _hash if frozen else None


def _declare(cls: type[_R], frozen: bool, kw_only: bool, eq: bool) -> type[_R]:
    for base in cls.__mro__[1:]:
        layout = base.__dict__.get(_LAYOUT)
        if layout is not None and layout.frozen != frozen:
            kind = "frozen" if layout.frozen else "non-frozen"
            raise TypeError(f"{cls.__qualname__}: cannot inherit {'non-' if not frozen else ''}frozen from {kind}")
    if frozen and ("__setattr__" in cls.__dict__ or "__delattr__" in cls.__dict__):
        raise TypeError(f"{cls.__qualname__}: cannot overwrite __setattr__ or __delattr__ of a frozen record")
    hash_to = _hash_action(cls, eq, frozen)
    dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
    setattr(cls, _LAYOUT, _Layout(cls, dataclasses.fields(cls), frozen))  # type: ignore[arg-type]
    methods: dict[str, Any] = {"__init__": _init, "__repr__": _repr}
    if eq:
        methods["__eq__"] = _eq
    if frozen:
        methods |= {"__setattr__": _setattr, "__delattr__": _delattr}
    for name, method in methods.items():
        if name not in cls.__dict__ or name in ("__setattr__", "__delattr__"):
            setattr(cls, name, method)
    if hash_to is not MISSING:
        cls.__hash__ = hash_to  # type: ignore[method-assign]
    return cls


@overload
def record(cls: type[_R], /) -> type[_R]: ...
@overload
def record(*, frozen: bool = ..., kw_only: bool = ..., eq: bool = ...) -> Callable[[type[_R]], type[_R]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(
    cls: type[_R] | None = None, /, *, frozen: bool = False, kw_only: bool = False, eq: bool = True
) -> type[_R] | Callable[[type[_R]], type[_R]]:
    """Declare ``cls`` a record: ``@record``, ``@record(frozen=True)``, ``@record(frozen=True, kw_only=True)``,
    ``@record(eq=False)``, as with :func:`dataclasses.dataclass` (fields are declared with
    :func:`dataclasses.field`)."""
    if cls is None:
        return lambda c: _declare(c, frozen, kw_only, eq)
    return _declare(cls, frozen, kw_only, eq)


@record(frozen=True)
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
