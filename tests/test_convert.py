"""``r1build.convert.record`` declares the same classes ``dataclasses.dataclass`` does: each shape below is declared
both ways and every behaviour a caller can see is compared (construction and its errors, repr, equality, hashing,
frozen assignment, replace, asdict, pickling, match, inheritance)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest

from r1build import convert
from r1build.convert import FrozenInstanceError, record


def _pair(frozen: bool = False, kw_only: bool = False, eq: bool = True) -> tuple[Any, Any]:
    """The same class body declared by ``dataclass`` and by ``record``."""

    def body() -> dict[str, Any]:
        return {
            "__annotations__": {"a": "int", "b": "str", "c": "tuple[int, ...]", "d": "list[int]", "e": "int"},
            "__module__": __name__,
            "__doc__": "A record.",
            "c": (),
            "d": field(default_factory=list, compare=False, repr=False),
            "e": field(default=7, init=False),
        }

    made: list[Any] = []
    for decorate in (dataclass, record):
        cls = type("Shape", (), body())
        made.append(decorate(frozen=frozen, kw_only=kw_only, eq=eq)(cls))
    return made[0], made[1]


def _outcome(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except Exception as exc:  # the type and, for TypeError, that one was raised
        return ("raised", type(exc).__name__)


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1, "x"), {}),
    ((1, "x", (2,)), {}),
    ((1,), {"b": "y", "d": [3]}),
    ((), {"a": 1, "b": "x"}),
    ((), {}),
    ((1,), {}),
    ((1, "x", (), [], 9), {}),
    ((1, "x"), {"a": 2}),
    ((1, "x"), {"e": 1}),
    ((1, "x"), {"zz": 1}),
]


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("kw_only", [False, True])
@pytest.mark.parametrize("eq", [False, True])
def test_record_matches_dataclass(frozen: bool, kw_only: bool, eq: bool) -> None:
    plain, ours = _pair(frozen, kw_only, eq)
    for args, kwargs in CALLS:
        want = _outcome(lambda a=args, k=kwargs: plain(*a, **k))
        got = _outcome(lambda a=args, k=kwargs: ours(*a, **k))
        assert want[0] == got[0] and (want[0] == "ok" or want[1] == got[1]), (args, kwargs, want, got)
        if want[0] != "ok":
            continue
        p, o = want[1], got[1]
        assert repr(p) == repr(o) and vars(p) == vars(o) and list(vars(p)) == list(vars(o))
        assert dataclasses.asdict(p) == dataclasses.asdict(o)
        assert [f.name for f in dataclasses.fields(p)] == [f.name for f in dataclasses.fields(o)]
        twin = ours(*args, **kwargs)
        assert (o == twin) == (p == plain(*args, **kwargs))
        assert (o == copy.deepcopy(o)) == (p == copy.deepcopy(p))
        assert _outcome(lambda o=o: hash(o))[0] == _outcome(lambda p=p: hash(p))[0]
        if frozen and eq:
            assert hash(o) == hash(twin)
            assert o == ours(*args, **{**kwargs, "d": [99]})  # d is compare=False
        assert convert.asdict(o) == dataclasses.asdict(p)
        assert [(f.name, f.init, f.repr, f.compare) for f in convert.fields(ours)] == [
            (f.name, f.init, f.repr, f.compare) for f in dataclasses.fields(plain)
        ]
        assert vars(convert.replace(o, b="r")) == vars(dataclasses.replace(p, b="r"))
        changed = dataclasses.replace(o, a=42)
        assert type(changed) is ours and changed.a == 42 and vars(changed) == vars(dataclasses.replace(p, a=42))
        assert _outcome(lambda o=o: setattr(o, "a", 5)) == _outcome(lambda p=p: setattr(p, "a", 5))
        assert _outcome(lambda o=o: setattr(o, "new", 5)) == _outcome(lambda p=p: setattr(p, "new", 5))
        assert _outcome(lambda o=o: delattr(o, "b")) == _outcome(lambda p=p: delattr(p, "b"))


@record(frozen=True, kw_only=True)
class Sent:
    """A record that crosses a process boundary (Dask, the worker's pipe) by pickle."""

    name: str
    sizes: tuple[int, ...] = ()
    notes: list[str] = field(default_factory=list, compare=False)


def test_a_record_survives_pickle_and_copy() -> None:
    sent = Sent(name="k", sizes=(1, 2), notes=["a"])
    for twin in (pickle.loads(pickle.dumps(sent)), copy.copy(sent), copy.deepcopy(sent)):
        assert twin == sent and twin.notes == ["a"] and type(twin) is Sent
        with pytest.raises(FrozenInstanceError):
            twin.name = "q"  # type: ignore[misc]


def test_record_helpers_refuse_what_is_no_record() -> None:
    for helper in (convert.fields, convert.asdict, convert.replace):
        with pytest.raises(TypeError):
            helper(object())
    assert not convert.is_record(object()) and convert.is_record(Sent) and convert.is_record(Sent(name="x"))
    with pytest.raises(ValueError, match="init=False"):

        @record(frozen=True)
        class Counted:
            n: int = field(default=0, init=False)

        convert.replace(Counted(), n=1)


def test_compare_false_fields_are_left_out_of_equality_and_hash() -> None:
    @record(frozen=True)
    class Timed:
        name: str
        samples: list[float] = field(default_factory=list, compare=False)

    a, b = Timed("x", [1.0]), Timed("x", [2.0])
    assert a == b and hash(a) == hash(b) and Timed("x") != Timed("y")
    assert {a: 1}[b] == 1


def test_post_init_runs_after_the_fields_are_set() -> None:
    seen = []

    @record(frozen=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            seen.append(self.n)
            if self.n < 0:
                raise ValueError("negative")

    Checked(3)
    with pytest.raises(ValueError):
        Checked(-1)
    assert seen == [3, -1]


def test_frozen_records_refuse_assignment_and_inherit_like_dataclasses() -> None:
    @record(frozen=True)
    class Base:
        a: int

    @record(frozen=True)
    class Child(Base):
        b: str = "z"

    c = Child(1)
    assert (c.a, c.b) == (1, "z") and repr(
        c
    ) == "test_frozen_records_refuse_assignment_and_inherit_like_dataclasses.<locals>.Child(a=1, b='z')"
    with pytest.raises(FrozenInstanceError):
        c.b = "q"  # type: ignore[misc]
    assert c != Base(1) and Base(1) == Base(1)
    with pytest.raises(TypeError, match="frozen"):

        @record
        class Loose(Base):  # type: ignore[misc]
            b: int = 0

    match c:
        case Child(a, b):
            assert (a, b) == (1, "z")
        case _:
            pytest.fail("no match")


def test_mutable_records_are_unhashable_and_assignable() -> None:
    @record
    class Tally:
        n: int = 0

    t = Tally()
    t.n += 1
    assert t == Tally(1) and Tally.__hash__ is None
    with pytest.raises(TypeError):
        hash(t)


def test_an_exception_record_keeps_its_args() -> None:
    @record(frozen=True)
    class Problem(Exception):
        path: tuple[str, ...]
        message: str

    exc = Problem(("a",), "bad")
    assert exc.args == (("a",), "bad") and exc.message == "bad"
    with pytest.raises(Problem):
        raise exc
