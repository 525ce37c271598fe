"""A candidate's checks hold the GPU's quiet lock per test shape, around the worker's work only: the GPU can be taken
for timing between two shapes (not only between two candidates), and building requests and judging replies
never hold it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from r1build.evaluate.correctness.candidate import run_checks
from r1build.evaluate.correctness.plan import plan_checks
from r1build.evaluate.library import Library
from r1build.evaluate.process import WorkerDied
from r1build.manifest import load_manifest
from r1build.manifest.reference import load_reference

ROOT = Path(__file__).resolve().parents[2]


class _Slot:
    """Records whether the hold was held at each of the worker's steps; the worker dies at its first request."""

    def __init__(self, held: list[bool]) -> None:
        self.held = held
        self.steps: list[tuple[str, bool]] = []

    def load(self, _spec: Any, _lib: Any, *, timeout_s: float) -> None:
        self.steps.append(("load", self.held[0]))

    def request(self, header: Any, buffers: Any, *, timeout_s: float) -> Any:
        self.steps.append(("request", self.held[0]))
        raise WorkerDied("the worker died (test)", -9, "")


def test_the_worker_is_asked_inside_the_hold_and_a_death_names_the_shape() -> None:
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = manifest.kernel("sum_all")
    plans = plan_checks(spec, load_reference(manifest.root, spec.reference))
    held = [False]
    entered: list[int] = []

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        entered.append(1)
        held[0] = True
        try:
            yield
        finally:
            held[0] = False

    slot = _Slot(held)
    lib = Library(Path("/nonexistent.so"), "0" * 64, "sm_90", 0.0)
    verdict = run_checks(cast(Any, slot), spec, lib, plans, timeout_s=5.0, part="shared", hold=hold)
    assert verdict is not None and verdict.status == "crashed"
    assert f"at {plans[0].key}" in verdict.detail
    assert slot.steps == [("load", True), ("request", True)] and entered == [1] and not held[0]
