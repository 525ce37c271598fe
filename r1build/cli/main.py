"""``r1build``: entry point. Exceptions become exit codes here and nowhere else.

Exit codes: 0 ok, 1 failure, 2 bad input or usage. A user error never shows a traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import __version__
from . import fastpath

if TYPE_CHECKING:
    import argparse
    from types import ModuleType

__all__ = ["build_parser", "main", "output_options"]

_VERBOSE = "verbose:"
_QUIET = "quiet:"

# Each module registers its sub-commands: ``register(subparsers) -> None``; handlers are ``func(args, console)``.
COMMAND_MODULES = (
    "project",
    "cache_cmd",
    "generate_cmd",
    "key_cmd",
    "report_cmd",
    "dataset_cmd",
    "doctor_cmd",
    "worker_cmd",
    "completions",
)


def _modules() -> list[ModuleType]:
    return [importlib.import_module(f"{__package__}.{name}") for name in COMMAND_MODULES]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
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
            raise UsageError(f"{self.prog}: {message}")

    parser = _Parser(prog="r1build", description="CUDA kernels from kernels.toml, chosen per GPU arch.")
    parser.add_argument("--version", action="version", version=f"r1build {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in _modules():
        module.register(sub)
    return parser


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
    argv = sys.argv[1:]
    code = fastpath.replay(argv)
    if code is not None:
        return code
    result: list[int] = []
    with fastpath.recording(argv, result):
        result.append(_main(argv))
    return result[0]


def _main(argv: Sequence[str]) -> int:
    import logging

    from ..errors import NoWinnerError, R1BuildError
    from .render import Console, render_unresolved

    console = Console()
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        verbose, quiet = output_options(args)
        console.verbose, console.quiet = verbose, quiet
        recorder = fastpath.active()
        if recorder is not None:
            recorder.allowed = fastpath.Recorder.keeps(args)
        logging.basicConfig(
            level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
            format="%(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        if args.command != "worker" and not verbose:
            # a cluster resolve reports what Dask's client logs (a lost scheduler, a refused connection) itself
            logging.getLogger("distributed").setLevel(logging.CRITICAL)
        code: int = args.func(args, console)
        return code
    except NoWinnerError as exc:
        render_unresolved(console, exc.unresolved)
        return exc.exit_code
    except R1BuildError as exc:
        console.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        console.error("interrupted")
        return 130
    finally:
        console.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
