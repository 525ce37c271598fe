"""What one test run makes once for all its xdist workers: a wheel built by pip, a sample's sdist, a cache of gate
verdicts. A module-scoped fixture runs once per worker that runs a test of the module; for a product that takes tens
of seconds of CPU and is only read, the workers share one, made by whichever asks first."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["once_per_run"]


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of this test run that every worker sees (with xdist, the parent of the workers' own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """The folder ``name`` of this test run, held alone while the block runs, and whether an earlier holder made
    what it holds (a block that ends without an exception marks it made; one that fails leaves it for the next)."""
    folder = _run_folder(tmp_path_factory) / f"shared-{name}"
    folder.mkdir(exist_ok=True)
    with open(folder.with_suffix(".lock"), "w") as lock:  # noqa: PTH123 - a descriptor for flock
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = (folder / ".made").exists()
        yield folder, made
        (folder / ".made").touch()
