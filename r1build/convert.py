"""Records: how r1build declares them (:func:`record`, :func:`field`) and turns parsed TOML and JSON into them
(:func:`convert`, driven by their type hints).

``@record(frozen=True)`` makes what ``@dataclass(frozen=True)`` makes, as callers see it: keyword and positional
arguments, defaults and ``default_factory``, ``kw_only``, ``__post_init__``, ``repr=False`` and ``compare=False``
fields, equality and hashing by the compared fields, :class:`FrozenInstanceError` (an AttributeError) on
assignment, ``match``, pickling; :func:`fields`, :func:`replace` and :func:`asdict` here, and mypy's view of the
class through :func:`typing.dataclass_transform`. :mod:`dataclasses` itself (``dataclasses.replace``,
``fields``, ``asdict``, ``is_dataclass``) works on a record too: the first time it asks, the record's
``__dataclass_fields__`` is made from its fields.

Why not ``@dataclass``: it writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__`` and ``__delattr__`` as source text and compiles it, about 0.3 ms a frozen class on CPython 3.11,
and importing it imports :mod:`inspect` and :mod:`ast` (~4 ms): a first ``resolve --locked`` spent ~20 ms of
~90 ms on them (issue 29, bench/first_run_floor.py). Here each method is written once and reads the class's fields
from a :class:`_Layout` made when the class is: a record costs ~25 µs to declare (a frozen dataclass ~320 µs) and
about 0.2 µs more to construct (~1 µs with keywords).

Every conversion problem becomes a :class:`ConversionProblem` with the key path it concerns, so the loader can
point at the file and line. Unknown keys get a did-you-mean.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
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


__all__ = [
    "MISSING",
    "ConversionProblem",
    "Field",
    "FrozenInstanceError",
    "KeyPath",
    "asdict",
    "convert",
    "did_you_mean",
    "field",
    "field_key",
    "fields",
    "is_record",
    "record",
    "replace",
]

KeyPath = tuple[str | int, ...]
T = TypeVar("T")

_R = TypeVar("_R")
_LAYOUT = "__record_layout__"


class _Missing:
    """The value of a field's ``default`` or ``default_factory`` that it has none."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record (or deletion of one)."""


class Field:
    """One field of a record, as :func:`fields` returns it (the attributes of :class:`dataclasses.Field` that
    r1build reads)."""

    __slots__ = ("compare", "default", "default_factory", "init", "kw_only", "metadata", "name", "repr", "type")

    def __init__(
        self,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        init: bool = True,
        repr: bool = True,
        compare: bool = True,
        kw_only: Any = MISSING,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name: str = ""
        self.type: Any = None
        self.default, self.default_factory = default, default_factory
        self.init, self.repr, self.compare, self.kw_only = init, repr, compare, kw_only
        self.metadata: Mapping[str, Any] = types.MappingProxyType(dict(metadata or {}))

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, init={self.init}, kw_only={self.kw_only})"


@overload
def field(
    *,
    default: _R,
    init: bool = ...,
    repr: bool = ...,
    compare: bool = ...,
    kw_only: bool = ...,
    metadata: Mapping[str, Any] | None = ...,
) -> _R: ...
@overload
def field(
    *,
    default_factory: Callable[[], _R],
    init: bool = ...,
    repr: bool = ...,
    compare: bool = ...,
    kw_only: bool = ...,
    metadata: Mapping[str, Any] | None = ...,
) -> _R: ...
@overload
def field(
    *,
    init: bool = ...,
    repr: bool = ...,
    compare: bool = ...,
    kw_only: bool = ...,
    metadata: Mapping[str, Any] | None = ...,
) -> Any: ...


def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    init: bool = True,
    repr: bool = True,
    compare: bool = True,
    kw_only: Any = MISSING,
    metadata: Mapping[str, Any] | None = None,
) -> Any:
    """A field of a record with more than a plain default, as :func:`dataclasses.field`."""
    return Field(default, default_factory, init, repr, compare, kw_only, metadata)


class _Layout:
    """What the shared methods need of one record class, worked out once when the class is declared."""

    __slots__ = (
        "all",
        "compared",
        "factories",
        "fields",
        "frozen",
        "init_names",
        "positional",
        "post_init",
        "shown",
        "steps",
    )

    def __init__(self, cls: type, fields: tuple[Field, ...], frozen: bool) -> None:
        init = [f for f in fields if f.init]
        self.all = fields
        self.fields = frozenset(f.name for f in fields)
        self.init_names = {f.name: f for f in init}
        self.steps = tuple(
            (f.name, _REQUIRED if not _has_default(f) else _FACTORY if f.default is MISSING else _VALUE, f)
            for f in init
        )
        """Per init field in order: its name, whether it is required, has a value or a factory, the field."""
        self.positional = tuple(f.name for f in init if not f.kw_only)
        self.factories = tuple(f for f in fields if not f.init and f.default_factory is not MISSING)
        self.shown = tuple(f.name for f in fields if f.repr)
        self.compared = _getter(tuple(f.name for f in fields if f.compare))
        self.post_init = hasattr(cls, "__post_init__")
        self.frozen = frozen


def _has_default(f: Field) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The compared fields of a record as one tuple (``attrgetter`` of one name returns the bare value)."""
    if not names:
        return lambda _: ()
    get = attrgetter(*names)
    return (lambda obj: (get(obj),)) if len(names) == 1 else get


def _layout(obj: Any) -> _Layout:
    layout: _Layout = getattr(type(obj), _LAYOUT)
    return layout


_REQUIRED, _VALUE, _FACTORY = 0, 1, 2


def _init(self: Any, /, *args: Any, **kwargs: Any) -> None:
    layout: _Layout = type(self).__record_layout__
    if args:
        named = layout.positional[: len(args)]
        if len(args) > len(layout.positional) or (kwargs and not kwargs.keys().isdisjoint(named)):
            _refuse_positional(self, layout, args, kwargs)
        kwargs.update(zip(named, args, strict=True))
    values = {}
    for name, kind, f in layout.steps:
        if name in kwargs:
            values[name] = kwargs[name]
        elif kind == _VALUE:
            values[name] = f.default
        elif kind == _FACTORY:
            values[name] = f.default_factory()
    if len(values) != len(layout.steps) or not kwargs.keys() <= layout.init_names.keys():
        _refuse_arguments(self, layout, kwargs)
    if layout.factories:
        values.update((f.name, f.default_factory()) for f in layout.factories)
    self.__dict__.update(values)
    if layout.post_init:
        self.__post_init__()


def _refuse_positional(self: Any, layout: _Layout, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The TypeError Python words for too many positional arguments, or one also given by keyword."""
    name = type(self).__qualname__
    if len(args) > len(layout.positional):
        raise TypeError(
            f"{name}.__init__() takes {len(layout.positional) + 1} positional arguments but {len(args) + 1} were given"
        )
    twice = next(key for key in layout.positional[: len(args)] if key in kwargs)
    raise TypeError(f"{name}.__init__() got multiple values for argument {twice!r}")


def _refuse_arguments(self: Any, layout: _Layout, kwargs: dict[str, Any]) -> None:
    """The TypeError for keyword arguments that are no init field, or init fields without a value."""
    name = type(self).__qualname__
    for key in kwargs:
        if key not in layout.init_names:
            raise TypeError(f"{name}.__init__() got an unexpected keyword argument {key!r}")
    missing = [repr(n) for n, kind, _ in layout.steps if kind == _REQUIRED and n not in kwargs]
    raise TypeError(f"{name}.__init__() missing {len(missing)} required argument(s): {', '.join(missing)}")


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


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is typing.ClassVar or get_origin(annotation) is typing.ClassVar


def _as_field(value: Any) -> Any:
    """A :func:`dataclasses.field` in a record's body as this module's :class:`Field` (the value else)."""
    if type(value).__name__ != "Field" or type(value).__module__ != "dataclasses":
        return value
    kw_only = value.kw_only if isinstance(value.kw_only, bool) else MISSING
    default = MISSING if type(value.default).__name__ == "_MISSING_TYPE" else value.default
    factory = MISSING if type(value.default_factory).__name__ == "_MISSING_TYPE" else value.default_factory
    return Field(default, factory, value.init, value.repr, value.compare, kw_only, value.metadata)


def _own_fields(cls: type, kw_only: bool) -> list[Field]:
    """The fields ``cls``'s own body declares, in order; a default stays a class attribute, a :func:`field`
    gives way to its default (or to nothing), as with dataclasses."""
    out = []
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063 (not inspect: its import)
        if _is_classvar(annotation):
            continue
        value = _as_field(cls.__dict__.get(name, MISSING))
        f = value if isinstance(value, Field) else Field(default=value)
        f.name, f.type = name, annotation
        if f.kw_only is MISSING:
            f.kw_only = kw_only
        if isinstance(f.default, (list, dict, set)):
            raise ValueError(f"{cls.__qualname__}.{name}: mutable default {type(f.default)} (use default_factory)")
        if isinstance(value, Field):
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        out.append(f)
    return out


def _all_fields(cls: type, kw_only: bool) -> tuple[Field, ...]:
    """The fields of ``cls``: its record bases' first (a field declared again keeps its place), then its own;
    refused where a positional field without a default follows one with a default."""
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        layout = base.__dict__.get(_LAYOUT)
        if layout is not None:
            found.update((f.name, f) for f in layout.all)
    found.update((f.name, f) for f in _own_fields(cls, kw_only))
    defaulted = False
    for f in found.values():
        if f.init and not f.kw_only:
            if defaulted and not _has_default(f):
                raise TypeError(f"{cls.__qualname__}: non-default argument {f.name!r} follows default argument")
            defaulted = defaulted or _has_default(f)
    return tuple(found.values())


class _DataclassFields:
    """A record's ``__dataclass_fields__``, made from its fields the first time :mod:`dataclasses` asks
    (``dataclasses.replace``, ``fields``, ``asdict``, ``is_dataclass``): importing dataclasses costs what r1build's
    own imports save, so only what asks pays it."""

    def __get__(self, obj: Any, owner: type) -> dict[str, Any]:
        made = owner.__dict__.get("__record_dataclass_fields__")
        if made is None:
            import dataclasses  # here: only a caller of dataclasses' functions on a record pays for it

            own = fields(owner)
            body: dict[str, Any] = {"__annotations__": {f.name: f.type for f in own}, "__module__": owner.__module__}
            for f in own:
                kwargs = {"default": f.default} if f.default is not MISSING else {}
                if f.default_factory is not MISSING:
                    kwargs["default_factory"] = f.default_factory
                body[f.name] = dataclasses.field(
                    init=f.init, repr=f.repr, compare=f.compare, kw_only=f.kw_only, metadata=f.metadata, **kwargs
                )
            shadow: Any = dataclasses.dataclass(type(owner.__name__, (), body), init=False, repr=False, eq=False)
            made = dict(shadow.__dataclass_fields__)
            type.__setattr__(owner, "__record_dataclass_fields__", made)
        return made


_DATACLASS_FIELDS = _DataclassFields()


def _declare(cls: type[_R], frozen: bool, kw_only: bool, eq: bool) -> type[_R]:
    for base in cls.__mro__[1:]:
        layout = base.__dict__.get(_LAYOUT)
        if layout is not None and layout.frozen != frozen:
            kind = "frozen" if layout.frozen else "non-frozen"
            raise TypeError(f"{cls.__qualname__}: cannot inherit {'non-' if not frozen else ''}frozen from {kind}")
    if frozen and ("__setattr__" in cls.__dict__ or "__delattr__" in cls.__dict__):
        raise TypeError(f"{cls.__qualname__}: cannot overwrite __setattr__ or __delattr__ of a frozen record")
    hash_to = _hash_action(cls, eq, frozen)
    layout = _Layout(cls, _all_fields(cls, kw_only), frozen)
    setattr(cls, _LAYOUT, layout)
    cls.__dataclass_fields__ = _DATACLASS_FIELDS  # type: ignore[attr-defined]
    cls.__match_args__ = layout.positional  # type: ignore[attr-defined,misc]
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


@dataclass_transform(field_specifiers=(field, Field))
def record(
    cls: type[_R] | None = None, /, *, frozen: bool = False, kw_only: bool = False, eq: bool = True
) -> type[_R] | Callable[[type[_R]], type[_R]]:
    """Declare ``cls`` a record: ``@record``, ``@record(frozen=True)``, ``@record(frozen=True, kw_only=True)``,
    ``@record(eq=False)``, as with :func:`dataclasses.dataclass` (fields with more than a default are declared
    with :func:`field`)."""
    if cls is None:
        return lambda c: _declare(c, frozen, kw_only, eq)
    return _declare(cls, frozen, kw_only, eq)


def is_record(obj: Any) -> bool:
    """Whether ``obj`` is a record class or a record."""
    return hasattr(obj if isinstance(obj, type) else type(obj), _LAYOUT)


def fields(obj: Any) -> tuple[Field, ...]:
    """The fields of a record class or record, in order (TypeError for anything else)."""
    layout = getattr(obj if isinstance(obj, type) else type(obj), _LAYOUT, None)
    if layout is None:
        raise TypeError(f"{obj!r} is not a record")
    return typing.cast(tuple[Field, ...], layout.all)


def replace(obj: _R, /, **changes: Any) -> _R:
    """A copy of the record ``obj`` with ``changes``, made through its ``__init__`` (``__post_init__`` runs)."""
    for f in fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified with replace()")
        elif f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


def asdict(obj: Any) -> dict[str, Any]:
    """The record ``obj`` as a dict, records inside it as dicts too, containers copied (as dataclasses.asdict)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}


def _plain(value: Any) -> Any:
    if is_record(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    import copy  # here: records hold plain values; anything else is copied as dataclasses.asdict copies it

    return copy.deepcopy(value)


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
    if origin is dict or is_record(tp):
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
    if isinstance(tp, type) and is_record(tp):
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
def _shape(cls: type, kebab: bool) -> tuple[dict[str, Field], dict[str, Any]]:
    """The init fields of a dataclass by key, and its resolved type hints (resolving them is the slow part)."""
    by_key = {(field_key(f.name) if kebab else f.name): f for f in fields(cls) if f.init}
    return by_key, typing.get_type_hints(cls)


def _dataclass_converter(cls: type, kebab: bool) -> Converter:
    def convert_record(value: object, path: KeyPath) -> Any:
        return _convert_dataclass(cls, value, path, kebab)

    return convert_record


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
def _plan(cls: type, kebab: bool) -> tuple[dict[str, Field], list[tuple[str, str, Converter, bool, type | None, bool]]]:
    """The init fields of a dataclass by key, and for each: its key, name, converter, whether it is required,
    and the type whose values (and whether None) pass unconverted."""
    by_key, hints = _shape(cls, kebab)
    steps = [
        (
            key,
            f.name,
            _converter(hints[f.name], kebab),
            not _has_default(f),
            *_exact(hints[f.name]),
        )
        for key, f in by_key.items()
    ]
    return by_key, steps


def _convert_dataclass(cls: type[T], value: object, path: KeyPath, kebab: bool) -> T:
    if not isinstance(value, dict):
        raise ConversionProblem(path, f"expected a table, got {_describe(value)}")
    shape_of: type = cls
    by_key, steps = _plan(shape_of, kebab)
    if not value.keys() <= by_key.keys():
        for key in value:
            if key not in by_key:
                hint = did_you_mean(str(key), list(by_key))
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
