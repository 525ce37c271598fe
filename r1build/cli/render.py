"""Rendering for the CLI: events from the library, tables, errors. Built on rich."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console as RichConsole
from rich.markup import escape
from rich.table import Table

from ..events import Event, Note, Progress, Stage
from ..records import Unresolved

__all__ = ["Console", "render_unresolved"]


class Console:
    """Where the CLI prints: results to stdout, notes and errors to stderr."""

    PROGRESS_INTERVAL_S = 1.0
    """Least seconds between two progress lines of one task (the last one always shows)."""

    def __init__(self, verbose: int = 0) -> None:
        # piped output (CI logs, `| less`) gets wide tables instead of rich's 80-column default
        self.out = RichConsole(file=sys.stdout, highlight=False, soft_wrap=True,
                               width=None if sys.stdout.isatty() else 160)
        self.err = RichConsole(file=sys.stderr, highlight=False, soft_wrap=True,
                               width=None if sys.stderr.isatty() else 160)
        self.verbose = verbose
        """0: notes and progress of long work; 1: also stages and every progress line; 2: debug logging."""
        self.quiet = False
        """``--quiet``: no notes, stages or progress on stderr; warnings, errors and results only."""
        self._progress: dict[str, tuple[str, float]] = {}

    def close(self) -> None:
        """Finish any open progress line."""
        self._progress.clear()

    def print(self, text: str = "") -> None:
        """A plain line on stdout (no markup interpretation)."""
        self.out.print(escape(text))

    def json(self, text: str) -> None:
        """Raw JSON to stdout."""
        self.raw(text if text.endswith("\n") else text + "\n")

    def raw(self, text: str) -> None:
        """Text to stdout exactly as given (no markup, no wrapping): a script, a document."""
        sys.stdout.write(text)
        sys.stdout.flush()

    def error(self, message: str) -> None:
        """An error on stderr."""
        self.err.print(f"[bold red]error:[/] {escape(message)}")

    def warning(self, message: str) -> None:
        """A warning on stderr."""
        self.err.print(f"[yellow]warning:[/] {escape(message)}")

    def err_line(self, text: str) -> None:
        """A plain line on stderr (no markup interpretation)."""
        self.err.print(escape(text))

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None, *,
              to_stderr: bool = False) -> None:
        """A table on stdout (on stderr with ``to_stderr``, for a table that explains an error)."""
        table = Table(title=title, show_lines=False)
        for col in columns:
            table.add_column(col)
        for row in rows:
            table.add_row(*(escape("" if v is None else str(v)) for v in row))
        (self.err if to_stderr else self.out).print(table)

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
                self.err.print(escape(prefix + event.message))
        elif self.quiet:
            return
        elif isinstance(event, Stage):
            if self.verbose and event.done and event.detail:
                where = "/".join(x for x in (event.kernel, event.arch) if x)
                self.err.print(f"[dim]{escape(event.stage)} {escape(where)}: {escape(event.detail)}[/]")
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
        self.err.print(f"[cyan]{escape(line)}[/]")


def render_unresolved(console: Console, unresolved: Sequence[Unresolved]) -> None:
    """One table per kernel x arch where no candidate may win: each candidate, who rejected it and why."""
    for u in unresolved:
        console.error(f"{u.kernel}/{u.arch}: no candidate may win; nothing is emitted or locked for it")
        console.table(["candidate", "provenance", "origin", "state", "stage", "result", "reason"],
                      [[o.candidate[:12], o.provenance, o.origin, o.validation, o.stage or "-", o.status or "-",
                        o.reason] for o in u.outcomes],
                      title=f"{u.kernel} on {u.arch}", to_stderr=True)
        console.err_line(f"fix: {u.fix}")
