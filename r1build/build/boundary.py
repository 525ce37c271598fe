"""The edge between r1build and a build frontend (pip, build, uv): events become plain stderr lines, errors exit.

Frontends show a backend's stderr as it is, often inside a box of their own, so lines here are plain text
with an ``r1build:`` prefix (no colour, no progress bars). An :class:`~r1build.errors.R1BuildError` becomes one
clean message and ``SystemExit(exc.exit_code)``: a user error (exit 2) never shows a traceback. Anything else
is a bug and keeps its traceback. Importing this module costs nothing beyond the standard library; a warm
build does not import it: :func:`r1build.build.warm_kernel_settings` writes its one line in the same form as
:meth:`StderrRenderer.line` itself.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ..events import Event

__all__ = ["StderrRenderer", "frontend_boundary"]


class StderrRenderer:
    """Renders events as plain lines on a text stream (stderr by default).

    Progress of a task is shown at most every ``progress_every_s`` seconds, and only once the task has run that
    long: a build log gets a heartbeat from long jobs (generation, evaluation) and no noise from quick ones.
    A stage's closing line (e.g. the gate's registers and cache hits) is shown when ``verbose``, which defaults
    to ``R1BUILD_VERBOSE=1`` in the environment; notes (warnings, information) always are.
    """

    def __init__(
        self, stream: TextIO | None = None, *, progress_every_s: float = 5.0, verbose: bool | None = None
    ) -> None:
        self.stream = stream
        self.progress_every_s = progress_every_s
        if verbose is None:
            from ..settings import env_settings

            verbose = env_settings().verbose
        self.verbose = verbose
        self._progress_shown: dict[str, float] = {}

    def line(self, text: str) -> None:
        """Write one ``r1build:`` line and flush, so it interleaves correctly with CMake's output."""
        stream = self.stream or sys.stderr
        stream.write(f"r1build: {text}\n")
        stream.flush()

    def __call__(self, event: Event) -> None:
        """The event sink."""
        from ..events import Note, Progress, Stage

        if isinstance(event, Note):
            where = "/".join(x for x in (event.kernel, event.arch) if x)
            level = "" if event.level == "info" else f"{event.level}: "
            self.line(f"{level}{where + ': ' if where else ''}{event.message}")
        elif isinstance(event, Stage):
            if event.done and self.verbose:
                where = "/".join(x for x in (event.kernel, event.arch) if x)
                self.line(f"{event.stage} {where}{': ' + event.detail if event.detail else ''}")
        elif isinstance(event, Progress):
            now = time.monotonic()
            last = self._progress_shown.setdefault(event.task, now)
            if now - last < self.progress_every_s:
                return
            self._progress_shown[event.task] = now
            fields = " ".join(f"{k}={v}" for k, v in event.fields.items())
            total = f"/{event.total}" if event.total is not None else ""
            self.line(f"{event.task}: {event.completed}{total} {fields}".rstrip())


@contextlib.contextmanager
def _events_not_logged() -> Iterator[None]:
    """Notes are logged as well as emitted; here the renderer shows them, so the log must not repeat them."""
    logger = logging.getLogger("r1build")
    quiet = logging.NullHandler()
    propagate = logger.propagate
    logger.addHandler(quiet)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(quiet)
        logger.propagate = propagate


def _named_variables() -> frozenset[str]:
    """The variables the project's manifest names (a build runs in the project folder)."""
    from ..manifest import named_variables

    return named_variables(Path.cwd())


@contextlib.contextmanager
def frontend_boundary(renderer: StderrRenderer | None = None) -> Iterator[StderrRenderer]:
    """Install the stderr renderer as the event sink; turn r1build errors into a message and an exit code."""
    from ..errors import R1BuildError
    from ..events import Note, sink
    from ..settings import env_settings, unknown_variables

    render = renderer or StderrRenderer(verbose=False)
    try:
        if renderer is None:
            render.verbose = env_settings().verbose  # inside: a bad R1BUILD_VERBOSE is a clean error
        with _events_not_logged(), sink(render):
            for message in unknown_variables() and unknown_variables(known=_named_variables()):
                render(Note("warning", message))
            yield render
    except R1BuildError as exc:
        sys.stdout.flush()
        message = str(exc).rstrip() or type(exc).__name__
        first, _, rest = message.partition("\n")
        render.line(f"error: {first}")
        for extra in rest.splitlines():
            (render.stream or sys.stderr).write(f"    {extra}\n")
        (render.stream or sys.stderr).flush()
        raise SystemExit(exc.exit_code) from None
