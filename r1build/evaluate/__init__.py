"""Evaluate stage: candidates validated and timed on local GPUs, in isolated worker processes.

:class:`GpuEvaluator` implements :class:`~r1build.judge.Evaluator`; :func:`detect_gpus` says what there is to
measure on (an empty list without cupy or a GPU); :func:`expand_variants` lists the candidates a manifest itself
provides (baseline, hand-written files, tunable value sets).

Names are imported on first use, so the GPU worker (``python -m r1build.evaluate.child.worker``) and the sanitizer
harness start without loading the gate, the cache or the evaluator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .devices import GpuInfo, archs_of, detect_gpus
    from .evaluator import GpuEvaluator
    from .options import EvaluatorOptions
    from .timing.floors import DeviceFloors, bytes_moved, eval_flops, floor_us
    from .variants import expand_variants, tunable_value_sets

__all__ = [
    "DeviceFloors",
    "EvaluatorOptions",
    "GpuEvaluator",
    "GpuInfo",
    "archs_of",
    "bytes_moved",
    "detect_gpus",
    "eval_flops",
    "expand_variants",
    "floor_us",
    "tunable_value_sets",
]

_HOME = {
    "DeviceFloors": "timing.floors",
    "EvaluatorOptions": "options",
    "GpuEvaluator": "evaluator",
    "GpuInfo": "devices",
    "archs_of": "devices",
    "bytes_moved": "timing.floors",
    "detect_gpus": "devices",
    "eval_flops": "timing.floors",
    "expand_variants": "variants",
    "floor_us": "timing.floors",
    "tunable_value_sets": "variants",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
