"""Events: the library's way to tell a caller what is happening without printing.

Stages call :func:`emit`; whoever drives the pipeline (the CLI, the build backend, a test) installs a sink with
:func:`sink`. Events are small frozen dataclasses so a renderer can ``match`` on them.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from typing import Any, Literal

from .convert import field, record

__all__ = ["Event", "Logger", "Note", "NoteLevel", "Progress", "Stage", "StageName", "emit", "sink", "watch"]

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40
"""The standard library's logging levels (their values are part of its interface)."""


class Logger:
    """``logging.getLogger(name)``, imported when first needed. A debug or info message while nothing has imported
    :mod:`logging` is dropped unread: no handler can be set up without importing it, and an unconfigured root
    logger drops those levels anyway. A command that configures no logging (a first ``resolve --locked``) so never
    imports it (~2.5 ms); a warning or error still goes to logging's last-resort handler, as it would."""

    def __init__(self, name: str) -> None:
        self.name = name

    def log(self, level: int, message: str, *args: Any) -> None:
        """``logging.getLogger(name).log(level, message, *args)``, or nothing (see the class)."""
        if level >= WARNING or "logging" in sys.modules:
            import logging

            logging.getLogger(self.name).log(level, message, *args)

    def debug(self, message: str, *args: Any) -> None:
        self.log(DEBUG, message, *args)

    def info(self, message: str, *args: Any) -> None:
        self.log(INFO, message, *args)

    def warning(self, message: str, *args: Any) -> None:
        self.log(WARNING, message, *args)


log = Logger("r1build")

NoteLevel = Literal["info", "warning", "error"]
"""How much a note matters to a user."""
StageName = Literal["generate", "gate", "evaluate"]
"""The pipeline stages a :class:`Stage` event names: a search that generates, and the two judges (the words of
:data:`~r1build.records.JudgeStage`)."""


@record(frozen=True)
class Event:
    """Base of all events."""


@record(frozen=True)
class Note(Event):
    """A message worth showing a user."""

    level: NoteLevel
    message: str
    kernel: str | None = None
    arch: str | None = None


@record(frozen=True)
class Stage(Event):
    """A pipeline stage started or finished for one kernel and arch."""

    stage: StageName
    kernel: str
    arch: str | None = None
    done: bool = False
    detail: str = ""
    passed: int | None = None
    """How many candidates passed (a finished gate stage: those go on to the GPU where one judges); None where
    not counted."""


@record(frozen=True)
class Progress(Event):
    """Counters of a long-running job (generation, evaluation)."""

    task: str
    completed: int
    total: int | None = None
    fields: dict[str, float | int | str] = field(default_factory=dict)


Sink = Callable[[Event], None]
_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("r1build_event_sink", default=None)


def emit(event: Event) -> None:
    """Send ``event`` to the installed sink, and log notes."""
    current = _sink.get()
    if isinstance(event, Note):
        level = {"warning": WARNING, "error": ERROR}.get(event.level, INFO)
        # with a sink installed, the sink shows the note; the log keeps it at debug level only
        log.log(DEBUG if current is not None else level, "%s", event.message)
    if current is not None:
        current(event)


@contextlib.contextmanager
def sink(callback: Sink) -> Iterator[None]:
    """Install ``callback`` as the event sink for the duration of the block."""
    token = _sink.set(callback)
    try:
        yield
    finally:
        _sink.reset(token)


@contextlib.contextmanager
def watch(callback: Sink) -> Iterator[None]:
    """Have ``callback`` see every event emitted in the block (and in the copies of its context that worker
    threads run in), before the sink installed already, which still gets them all."""
    outer = _sink.get()

    def both(event: Event) -> None:
        callback(event)
        if outer is not None:
            outer(event)

    with sink(both):
        yield
