"""The ``r1build`` console script: :func:`main` turns the garbage collector off before the CLI is imported.

The CLI's imports (the standard library's and r1build's) make objects that all live as long as the process; the
collector walked them ~11 times before :func:`r1build.cli.main.main` could turn it off (~1 ms of a ~55 ms
``resolve --locked``). That function turns it back on once the command line is parsed, with what the imports made
frozen out of it.
"""

from __future__ import annotations

import gc

__all__ = ["main"]


def main() -> int:
    """Run the CLI as its own process (the console script's entry point)."""
    gc.disable()
    from .main import main as run  # here: after the collector is off

    return run()
