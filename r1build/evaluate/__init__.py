"""Evaluate stage: candidates validated and timed on local GPUs, in isolated worker processes.

:class:`GpuEvaluator` implements :class:`~r1build.judge.Evaluator`; :func:`detect_gpus` says what there is to
measure on (an empty list without cupy or a GPU); :func:`expand_variants` lists the candidates a manifest itself
provides (baseline, hand-written files, tunable value sets).
"""

from __future__ import annotations

from .devices import GpuInfo, archs_of, detect_gpus
from .evaluator import GpuEvaluator
from .floors import DeviceFloors, bytes_moved, eval_flops, floor_us
from .variants import expand_variants, tunable_value_sets

__all__ = [
    "DeviceFloors",
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
