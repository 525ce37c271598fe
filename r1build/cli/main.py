"""``r1build``: entry point. Exceptions become exit codes here and nowhere else.

Exit codes: 0 ok, 1 failure, 2 bad input or usage. A user error never shows a traceback.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from . import fastpath

if TYPE_CHECKING:
    import argparse
    from types import ModuleType

    from ..errors import OutputError

__all__ = ["build_parser", "main", "output_options"]

_YOUNG_COLLECTION = 10_000
"""Allocations between two collections of the youngest objects in a command's own process (Python's default is
700): a `resolve --locked` made 13 collections after its imports (~1 ms); a long search makes one every 10,000
objects, still a few MB at most."""

_VERBOSE = "verbose:"
_QUIET = "quiet:"

COMMANDS: dict[str, str] = {
    "check": "project",
    "status": "project",
    "resolve": "project",
    "lock": "project",
    "vendor": "project",
    "audit": "audit_cmd",
    "cache": "cache_cmd",
    "generate": "generate_cmd",
    "replay": "generate_cmd",
    "key": "key_cmd",
    "report": "report_cmd",
    "export-dataset": "dataset_cmd",
    "doctor": "doctor_cmd",
    "worker": "worker_cmd",
    "completions": "completions",
}
"""Each sub-command → the module of this package that registers it (``register(subparsers) -> None``, handlers
``func(args, console)``). A command line imports the one module its command needs: a module costs its imports
(the resolver, the cache, the LLM client...) and a command pays only for its own."""


def command_of(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` names: its first word that is not an option (the main parser's options take no
    value); None without one."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _modules(argv: Sequence[str] | None) -> list[ModuleType]:
    """The command modules a parser for ``argv`` needs: the named command's alone; every one for the full parser
    (``argv`` None), for the main parser's ``--help`` and for a word that is no command (argparse's error lists
    the commands); none when no command is named (``--version``, or the error that a command is required)."""
    names = dict.fromkeys(COMMANDS.values())
    if argv is not None:
        command = command_of(argv)
        before = argv[: argv.index(command)] if command is not None else argv
        if not {"-h", "--help"} & set(before):  # the main parser's help lists every command
            if command in COMMANDS:
                names = {COMMANDS[command]: None}
            elif command is None:
                names = {}
    return [importlib.import_module(f"{__package__}.{name}") for name in names]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser: with ``argv``, one that knows just enough to parse it (see :func:`_modules`);
    without, the full parser (every command, as ``--help`` and the completion scripts show them)."""
    import argparse  # here, not at import: a replayed command never parses

    from ..errors import UsageError

    class _Parser(argparse.ArgumentParser):
        """Every parser, the commands' included, takes the output options, so ``r1build status -v`` works as
        ``r1build -v status`` does. Each parser counts into a destination of its own (a sub-command's parser
        fills a fresh namespace that then overwrites its parent's), and :func:`output_options` adds them up:
        ``r1build -v resolve -v`` is ``-vv``, as with uv and cargo."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.add_argument(
                "-v",
                "--verbose",
                action="count",
                dest=f"{_VERBOSE}{self.prog}",
                default=argparse.SUPPRESS,
                help="more logging (-vv for debug); counted wherever it is given",
            )
            self.add_argument(
                "-q",
                "--quiet",
                action="store_true",
                dest=f"{_QUIET}{self.prog}",
                default=argparse.SUPPRESS,
                help="only warnings, errors and results (no notes or progress)",
            )

        def error(self, message: str) -> None:  # type: ignore[override]
            hint = _option_hint(parser, argv or (), message) if message.startswith("unrecognized arguments") else ""
            raise UsageError(f"{self.prog}: {message}{hint}")

    parser = _Parser(prog="r1build", description="CUDA kernels from kernels.toml, chosen per GPU arch.")
    parser.add_argument("--version", action="version", version=f"r1build {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in _modules(argv):
        module.register(sub)
    return parser


def _option_hint(parser: argparse.ArgumentParser, argv: Sequence[str], message: str) -> str:
    """`` (did you mean '--locked'?)`` for an unrecognized option close to one of the command's own (``--lockd``),
    or an empty string. The command is the chain of sub-commands ``argv`` names (``cache gc``)."""
    import argparse

    from ..convert import did_you_mean

    command = parser
    for word in (a for a in argv if not a.startswith("-")):
        subs = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        command = subs[0].choices[word]
    options = [o for action in command._actions for o in action.option_strings if o.startswith("--")]
    given = [w.split("=", 1)[0] for w in message.partition(":")[2].split() if w.startswith("--")]
    return next((hint for w in given if (hint := did_you_mean(w, options))), "")


def output_options(args: argparse.Namespace) -> tuple[int, bool]:
    """``(verbose, quiet)`` of parsed arguments: every ``-v`` given before and after the command(s) counted,
    ``-q`` given anywhere. Also set on ``args`` as ``verbose`` and ``quiet``.
    :class:`~r1build.errors.UsageError` for both."""
    from ..errors import UsageError

    given = vars(args)
    verbose = sum(int(v) for k, v in given.items() if k.startswith(_VERBOSE))
    quiet = any(bool(v) for k, v in given.items() if k.startswith(_QUIET))
    if verbose and quiet:
        raise UsageError("-v/--verbose and -q/--quiet: choose one")
    args.verbose, args.quiet = verbose, quiet
    return verbose, quiet


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (also used by the console script through SystemExit).

    Run as its own process (``argv`` None), a read-only command whose inputs are unchanged since its last run
    answers from its record (:mod:`.fastpath`) before anything heavy is imported."""
    if argv is not None:
        return _main(argv)
    # the command's imports and its parser make objects that all live to the end: collecting among them (~30
    # times) was ~3 ms of a ~60 ms `resolve --locked`; they are frozen out of the collector once parsed
    gc.disable()
    argv = sys.argv[1:]
    try:
        code = fastpath.replay(argv)
    except OSError as exc:  # printing the recorded output: the replay's own checks fail quietly
        from ..errors import OutputError

        return _output_lost(OutputError(exc))
    if code is not None:
        return code
    result: list[int] = []
    with fastpath.recording(argv, result):
        result.append(_main(argv, own_process=True))
    return result[0]


def _unknown_variables(args: argparse.Namespace) -> list[str]:
    """Warnings for ``R1BUILD_*`` variables r1build does not read, sparing those the manifest names."""
    from ..settings import unknown_variables

    found = unknown_variables()
    if found:  # only then read the manifest early, for its api-key-env
        from ..manifest import named_variables

        given = getattr(args, "manifest", None)
        start = given if isinstance(given, Path) else Path.cwd()
        found = unknown_variables(known=named_variables(start, walk_up=not isinstance(given, Path)))
    return found


def _configure_logging(command: str, verbose: int) -> None:
    """Log to stderr at the level ``-v`` asks. Not done for a command a record may answer (``status``, ``resolve
    --locked``) without ``-v``: nothing on its path logs what a user sees (its notes go to the console), and
    importing :mod:`logging` was ~2.5 ms of its first run (:class:`~r1build.events.Logger`)."""
    import logging

    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if command != "worker" and not verbose:
        # a cluster resolve reports what Dask's client logs (a lost scheduler, a refused connection) itself
        logging.getLogger("distributed").setLevel(logging.CRITICAL)


def _main(argv: Sequence[str], *, own_process: bool = False) -> int:
    """The command ``argv`` names, its errors rendered; ``own_process``: run as the process's own command (the
    collector, off since the start, is turned on with what the imports made frozen out of it)."""
    from ..errors import NoWinnerError, OutputError, R1BuildError
    from .render import Console, render_unresolved

    console = Console()
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if own_process:
            gc.freeze()
            gc.set_threshold(_YOUNG_COLLECTION, *gc.get_threshold()[1:])
            gc.enable()
        verbose, quiet = output_options(args)
        console.verbose, console.quiet = verbose, quiet
        recorder = fastpath.active()
        if recorder is not None:
            recorder.allowed = fastpath.Recorder.keeps(args)
            recorder.hold(getattr(args, "cache_dir", None))
        if verbose or not fastpath.Recorder.keeps(args):
            _configure_logging(args.command, verbose)
        from ..events import Note

        for message in _unknown_variables(args):
            console.event(Note("warning", message))
        code: int = args.func(args, console)
        return code
    except NoWinnerError as exc:
        render_unresolved(console, exc.unresolved)
        return exc.exit_code
    except OutputError as exc:
        return _output_lost(exc)
    except R1BuildError as exc:
        console.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        console.error("interrupted")
        return 130
    finally:
        console.close()


def _output_lost(exc: OutputError) -> int:
    """The exit code of a run whose standard output failed, after saying why on stderr: nothing for a reader that
    went away (``r1build cache ls | head -1``: EPIPE), as a filter says nothing then; an error line for another
    failure (a full disk). stdout is pointed at /dev/null, so the flush at exit fails no more."""
    import contextlib
    import os

    with contextlib.suppress(OSError, ValueError):  # ValueError, io.UnsupportedOperation: a stream with no fd
        fd = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    if not isinstance(exc.cause, BrokenPipeError):
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"error: {exc}\n")
            sys.stderr.flush()
    return exc.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
