"""Closing several workers: each is asked to exit before any is waited for, so their exits overlap (a GPU
evaluator's five workers each tear a CUDA context down). No GPU: test_evaluate_process's child, taking 0.4 s to
exit."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from r1build.evaluate.process import WorkerHandle, scrubbed_environment
from tests.evaluate.test_evaluate_process import CHILD, ROOT

EXIT = 'if op == "exit":\n        sys.exit(0)'
SLOW_EXIT = CHILD.replace(
    EXIT, 'if op == "exit":\n        time.sleep(0.4)  # a CUDA context torn down\n        sys.exit(0)'
)


def test_workers_asked_first_exit_together(tmp_path: Path) -> None:
    assert EXIT in CHILD
    script = tmp_path / "child.py"
    script.write_text(SLOW_EXIT)
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = scrubbed_environment(dict(os.environ), home=tmp_path, extra={"PYTHONPATH": path})
    workers = [
        WorkerHandle([sys.executable, str(script)], env, tmp_path / f"w{i}", start_timeout_s=30) for i in range(3)
    ]
    for w in workers:
        w.start()
    start = time.perf_counter()
    for w in workers:
        w.ask_to_exit()
    for w in workers:
        w.close()
    took = time.perf_counter() - start
    assert not any(w.running for w in workers)
    assert took < 1.0, f"{took:.2f} s: the exits did not overlap (one after another takes 1.2 s)"
