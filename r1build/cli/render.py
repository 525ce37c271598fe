"""Rendering for the CLI: events from the library, tables, errors. On a terminal, rich (imported only then:
it costs tens of milliseconds); elsewhere (pipes, files, CI logs) plain text and plain tables."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from ..events import Event, Note, Progress, Stage

if TYPE_CHECKING:
    from rich.console import Console as RichConsole

    from ..records import Unresolved

__all__ = ["Console", "counted", "plain_table", "render_unresolved", "visible"]

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if chr(c) not in "\n\t"}


def visible(text: str) -> str:
    """``text`` with control characters (but line breaks and tabs) shown as ``\\x1b``: what the CLI prints comes
    in part from a cache, a bundle or a remote (kernel names, GPU and model names, compiler output), and an escape
    sequence in it must not reach the terminal (retitle it, clear it, rewrite what was printed)."""
    return text.translate(_CONTROL)


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun that fits it: ``1 kernel``, ``2 kernels`` (``many``: the plural where it is not ``one``
    plus s)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


class Console:
    """Where the CLI prints: results to stdout, notes and errors to stderr."""

    PROGRESS_INTERVAL_S = 1.0
    """Least seconds between two progress lines of one task (the last one always shows)."""

    def __init__(self, verbose: int = 0) -> None:
        self.verbose = verbose
        """0: notes and progress of long work; 1: also stages and every progress line; 2: debug logging."""
        self.quiet = False
        """``--quiet``: no notes, stages or progress on stderr; warnings, errors and results only."""
        self._progress: dict[str, tuple[str, float]] = {}
        self._rich: dict[int, RichConsole] = {}

    def _stream(self, to_stderr: bool) -> TextIO:
        return sys.stderr if to_stderr else sys.stdout

    def _console(self, stream: TextIO) -> RichConsole | None:
        """rich's console for ``stream`` when it is a terminal; None (plain text) otherwise."""
        if not stream.isatty():
            return None
        key = id(stream)
        if key not in self._rich:
            from rich.console import Console as RichConsole

            self._rich[key] = RichConsole(file=stream, highlight=False, soft_wrap=True)
        return self._rich[key]

    def _say(self, text: str, *, to_stderr: bool, markup: str = "") -> None:
        """One line: with rich's ``markup`` around ``prefix`` on a terminal, plain otherwise."""
        stream = self._stream(to_stderr)
        rich = self._console(stream)
        text = visible(text)
        if rich is None:
            _write(stream, text + "\n")
            return
        from rich.markup import escape

        rich.print(f"{markup}{escape(text)}[/]" if markup else escape(text))

    def close(self) -> None:
        """Finish any open progress line."""
        self._progress.clear()

    def print(self, text: str = "") -> None:
        """A plain line on stdout (no markup interpretation)."""
        self._say(text, to_stderr=False)

    def json(self, text: str) -> None:
        """Raw JSON to stdout."""
        self.raw(text if text.endswith("\n") else text + "\n")

    def raw(self, text: str) -> None:
        """Text to stdout exactly as given (no markup, no wrapping): a script, a document."""
        _write(sys.stdout, text)

    def error(self, message: str) -> None:
        """An error on stderr."""
        self._prefixed("error:", "bold red", message)

    def warning(self, message: str) -> None:
        """A warning on stderr."""
        self._prefixed("warning:", "yellow", message)

    def _prefixed(self, prefix: str, style: str, message: str) -> None:
        rich = self._console(sys.stderr)
        if rich is None:
            self._say(f"{prefix} {message}", to_stderr=True)
            return
        from rich.markup import escape

        rich.print(f"[{style}]{prefix}[/] {escape(visible(message))}")

    def err_line(self, text: str) -> None:
        """A plain line on stderr (no markup interpretation)."""
        self._say(text, to_stderr=True)

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        title: str | None = None,
        *,
        to_stderr: bool = False,
    ) -> None:
        """A table on stdout (on stderr with ``to_stderr``, for a table that explains an error): rich's on a
        terminal, columns aligned with spaces elsewhere."""
        cells = [["" if v is None else visible(str(v)) for v in row] for row in rows]
        stream = self._stream(to_stderr)
        rich = self._console(stream)
        if rich is None:
            _write(stream, plain_table(columns, cells, title))
            return
        from rich.markup import escape
        from rich.table import Table

        table = Table(title=title, show_lines=False)
        for col in columns:
            table.add_column(col)
        for row in cells:
            table.add_row(*(escape(v) for v in row))
        rich.print(table)

    def event(self, event: Event) -> None:
        """Render one library event (installed as the event sink)."""
        if isinstance(event, Note):
            where = "/".join(x for x in (event.kernel, event.arch) if x)
            prefix = f"{where}: " if where else ""
            if event.level == "error":
                self.error(prefix + event.message)
            elif event.level == "warning":
                self.warning(prefix + event.message)
            elif not self.quiet:
                self.err_line(prefix + event.message)
        elif self.quiet:
            return
        elif isinstance(event, Stage):
            if self.verbose and event.done and event.detail:
                where = "/".join(x for x in (event.kernel, event.arch) if x)
                self._say(f"{event.stage} {where}: {event.detail}", to_stderr=True, markup="[dim]")
        elif isinstance(event, Progress):
            self._render_progress(event)

    def _render_progress(self, event: Progress) -> None:
        # the static gate is quick: its counters show only with -v; long work (generation, GPU
        # evaluation) shows a line at most once a second per task, and always its last line
        if event.task.startswith("gate") and not self.verbose:
            return
        fields = " ".join(f"{k}={v}" for k, v in event.fields.items())
        total = f"/{event.total}" if event.total is not None else ""
        line = f"{event.task}: {event.completed}{total} {fields}".rstrip()
        now = time.monotonic()
        last_line, last_time = self._progress.get(event.task, ("", 0.0))
        finished = event.total is not None and event.completed >= event.total
        if line == last_line or (not finished and not self.verbose and now - last_time < self.PROGRESS_INTERVAL_S):
            return
        self._progress[event.task] = (line, now)
        self._say(line, to_stderr=True, markup="[cyan]")


def _write(stream: TextIO, text: str) -> None:
    """``text`` on ``stream``, flushed; :class:`~r1build.errors.OutputError` when it is stdout and cannot take it
    (``r1build cache ls | head -1``, ``> /dev/full``)."""
    try:
        stream.write(text)
        stream.flush()
    except OSError as exc:
        if stream is not sys.stdout:
            raise
        from ..errors import OutputError

        raise OutputError(exc) from None


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None) -> str:
    """A table as text: a title line, the header, a rule, one line per row, columns aligned with spaces."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip() + "\n"

    head = f"{title}\n" if title else ""
    return head + line(columns) + line(["-" * w for w in widths]) + "".join(line(r) for r in rows)


def render_unresolved(console: Console, unresolved: Sequence[Unresolved]) -> None:
    """One table per kernel x arch where no candidate may win: each candidate, who rejected it and why."""
    for u in unresolved:
        console.error(f"{u.kernel}/{u.arch}: no candidate may win; nothing is emitted or locked for it")
        console.table(
            ["candidate", "provenance", "origin", "state", "stage", "result", "reason"],
            [
                [o.candidate[:12], o.provenance, o.origin, o.validation, o.stage or "-", o.status or "-", o.reason]
                for o in u.outcomes
            ],
            title=f"{u.kernel} on {u.arch}",
            to_stderr=True,
        )
        console.err_line(f"fix: {u.fix}")
