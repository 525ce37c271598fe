"""The hardware floor of a call: the time no kernel can beat on a given GPU.

Two ceilings are measured once per device model and cached (``json/floors/<device key>``): memory bandwidth, from
a large device-to-device copy (bytes read plus bytes written over the time), and fp32 arithmetic, the better of a
cuBLAS SGEMM through cupy and a kernel of independent FMAs. For one shape, the bytes a call must move (each
``in`` array read once, each ``out`` written once, each ``inout`` both) over the bandwidth and the spec's
``flops`` expression over the arithmetic rate give two times; the larger is the floor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...convert import record
from ...errors import EvaluationError
from ...manifest.flops import evaluate_flops
from ...manifest.model import KernelSpec
from ..correctness.inputs import array_shape, numpy_dtype

__all__ = ["DeviceFloors", "bytes_moved", "eval_flops", "floor_us", "shape_key"]

FLOORS_NAMESPACE = "floors"
"""Cache namespace of per-device floors."""
FLOORS_SCHEMA = 1
"""Bumped when the measurement changes meaning; older cached floors are then measured again."""


@record(frozen=True)
class DeviceFloors:
    """The measured ceilings of one GPU model."""

    device: str
    """GPU name."""
    bandwidth_bps: float
    """Device memory bandwidth in bytes per second (read plus write)."""
    fp32_flops: float
    """Peak fp32 arithmetic in operations per second (an FMA counts two)."""
    schema: int = FLOORS_SCHEMA
    """Measurement schema version."""

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "bandwidth_bps": self.bandwidth_bps,
            "fp32_flops": self.fp32_flops,
            "schema": self.schema,
        }

    @classmethod
    def from_json(cls, obj: Any) -> DeviceFloors | None:
        """The floors from a cached document, or None when it is unusable or of another schema."""
        if not isinstance(obj, dict) or obj.get("schema") != FLOORS_SCHEMA:
            return None
        try:
            bw, fl = float(obj["bandwidth_bps"]), float(obj["fp32_flops"])
        except (KeyError, TypeError, ValueError):
            return None
        if not (bw > 0 and fl > 0):
            return None
        return cls(str(obj.get("device", "")), bw, fl)


def eval_flops(expr: str, sizes: Mapping[str, int]) -> float:
    """Evaluate a ``flops`` expression (numbers, size names, ``+ - * / // % **``, parentheses) with the rules
    ``r1build check`` applies (:func:`~r1build.manifest.flops.evaluate_flops`)."""
    try:
        return evaluate_flops(expr, sizes)
    except ValueError as exc:
        raise EvaluationError(f"flops expression: {exc}") from None


def bytes_moved(spec: KernelSpec, sizes: Mapping[str, int]) -> int:
    """The fewest bytes one call moves through device memory: ``in`` read once, ``out`` written once,
    ``inout`` read and written."""
    total = 0
    for arg in spec.args:
        if not arg.is_array:
            continue
        nbytes = int(np.prod(array_shape(arg, sizes), dtype=np.int64)) * numpy_dtype(arg.dtype).itemsize
        total += 2 * nbytes if arg.role == "inout" else nbytes
    return total


def floor_us(spec: KernelSpec, sizes: Mapping[str, int], floors: DeviceFloors) -> float:
    """The floor of one call at ``sizes`` in microseconds: the larger of memory time and arithmetic time."""
    memory = bytes_moved(spec, sizes) / floors.bandwidth_bps
    arithmetic = eval_flops(spec.flops, sizes) / floors.fp32_flops if spec.flops else 0.0
    return max(memory, arithmetic) * 1e6


def shape_key(spec: KernelSpec, sizes: Mapping[str, int]) -> str:
    """A shape written as ``n=1024,m=7``: the kernel's sizes in declaration order."""
    names = [a.name for a in spec.args if a.is_size and a.name in sizes]
    names += [k for k in sizes if k not in names]
    return ",".join(f"{k}={sizes[k]}" for k in names)
