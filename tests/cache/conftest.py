"""Fixtures of the cache tests: the command line run in this process."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from r1build.cli.main import main

Cli = Callable[..., tuple[int, str]]
"""``run_cli(*argv)``: r1build's exit code and everything it printed (stdout and stderr together)."""


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run ``r1build *argv`` in this process; what was printed before the call is not part of its output."""

    def run(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return run
