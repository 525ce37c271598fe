"""A stand-in for the GPU evaluator, for tests of what the resolver does with a GPU's verdicts.

:class:`GpuDouble` implements the :class:`~r1build.judge.Evaluator` interface: the real static gate first, then a
verdict the test chooses. It is only for decision logic (what is chosen, cached, locked, emitted), never for the
GPU checks themselves: those are tested on a GPU (``@pytest.mark.gpu``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from r1build.judge import Job
from r1build.records import Candidate, Result
from r1build.resolve.judges import Judges
from tests.support.decisions import measured_result

__all__ = ["GpuDouble", "install_gpu_double"]


@dataclass
class GpuDouble:
    """Stands in for the GPU evaluator of sm_90 (see the module docstring): the real static gate first, then
    ``reject(candidate)`` says which fail the GPU checks and ``time_us(candidate)`` how fast the others are."""

    judges: Judges
    reject: Callable[[Candidate], bool]
    time_us: Callable[[Candidate], float]

    def evaluate(self, job: Job) -> list[Result]:
        out = []
        for c, gated in zip(job.candidates, self.judges.gate.evaluate(job), strict=True):
            if not gated.ok:
                out.append(gated)
            elif self.reject(c):
                out.append(
                    Result(
                        candidate=c.digest,
                        arch=job.arch,
                        status="incorrect",
                        stage="evaluate",
                        detail="n=7: 1 of 7 elements differ",
                        device="Test GPU",
                    )
                )
            else:
                # the gate's report kept, as the real evaluator keeps it
                measured = measured_result(c.digest, self.time_us(c), arch=job.arch, device="Test GPU")
                out.append(replace(measured, gate=gated.gate))
        return out


def install_gpu_double(
    monkeypatch: pytest.MonkeyPatch,
    reject: Callable[[Candidate], bool],
    time_us: Callable[[Candidate], float] = lambda c: 10.0,
) -> None:
    """Make the resolver see a GPU of sm_90 (and only of it) that judges like :class:`GpuDouble`."""

    def gpu_for(self: Judges, arch: str) -> GpuDouble | None:
        return GpuDouble(self, reject, time_us) if arch == "sm_90" and self.evaluate is not False else None

    monkeypatch.setattr(Judges, "gpu_for", gpu_for)
    monkeypatch.setattr(Judges, "gpu_archs", lambda self: {"sm_90"})
