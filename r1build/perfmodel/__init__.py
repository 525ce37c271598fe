"""A performance model before the GPU: predict each candidate's lower bound from its compiled code.

:class:`PerfModel` compiles a variant once the way the gate does (:mod:`.features`: ptxas's report and the PTX's
counts) and predicts its time at the spec's first benchmark shape (:mod:`.predict`). A search can use it to
order the GPU's work (most promising first) and to skip candidates predicted more than ``skip_factor`` times
slower than the best time measured so far, each skip recorded as the candidate's result with both numbers. It is
off unless ``R1BUILD_PERF_MODEL`` is ``order`` or ``skip`` (``R1BUILD_PERF_MODEL_SKIP``: the factor, 3 by
default), until ``bench/perf_model.py`` shows on a GPU that it ranks well enough to save GPU jobs without
losing the winner.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..convert import field, record
from ..manifest.flags import rooted_flags
from ..manifest.model import KernelSpec, Manifest
from ..records import Candidate, Result
from ..settings import PerfModelMode
from ..toolchain.nvcc import toolchain
from .features import CodeFeatures, compile_features, ptx_features
from .predict import Prediction, predict, shape_work

__all__ = ["CodeFeatures", "PerfModel", "Prediction", "compile_features", "ptx_features", "skipped_result"]


def skipped_result(candidate: Candidate, arch: str, prediction: Prediction, best_us: float, factor: float) -> Result:
    """The result of a candidate the model skipped: rejected before the GPU, with the numbers that decided it."""
    return Result(
        candidate=candidate.digest,
        arch=arch,
        status="rejected",
        stage="gate",
        detail=f"skipped by the performance model: predicted lower bound {prediction.lower_bound_us:.2f} us "
        f"is more than {factor:g}x the best measured {best_us:.2f} us",
    )


@record
class PerfModel:
    """Predictions for one manifest's candidates (see the module docstring), computed once per variant and arch."""

    manifest: Manifest
    mode: PerfModelMode = "order"
    skip_factor: float = 3.0
    peaks: tuple[float, float] | None = None
    """Measured (bandwidth bytes/s, fp32 flops/s); the arch's representative GPU's when None."""
    _known: dict[tuple[str, str], Prediction | None] = field(default_factory=dict)

    def predict(self, spec: KernelSpec, arch: str, candidate: Candidate) -> Prediction | None:
        """The candidate's prediction at the spec's first benchmark shape; None when it does not compile."""
        key = (candidate.digest, arch)
        if key not in self._known:
            features = compile_features(
                candidate,
                spec,
                arch,
                flags=rooted_flags(self.manifest.settings.nvcc_flags, self.manifest.root),
                toolchain=toolchain(),
            )
            shape = (spec.bench_shapes or spec.test_shapes)[0]
            nbytes, flops = shape_work(spec, shape)
            self._known[key] = (
                None
                if features is None
                else predict(spec, arch, candidate, features, bytes_moved=nbytes, flops=flops, peaks=self.peaks)
            )
        return self._known[key]

    def plan(
        self, spec: KernelSpec, arch: str, candidates: Sequence[Candidate], best_us: float | None
    ) -> tuple[list[Candidate], list[Result]]:
        """``candidates`` in predicted order (those that do not compile last, for the gate to judge), and, in
        ``skip`` mode with a best time measured, the results of those skipped."""
        predicted = [(c, self.predict(spec, arch, c)) for c in candidates]
        ordered = sorted(predicted, key=lambda cp: (cp[1] is None, cp[1].lower_bound_us if cp[1] else 0.0))
        keep: list[Candidate] = []
        skipped: list[Result] = []
        for candidate, prediction in ordered:
            if (
                self.mode == "skip"
                and best_us is not None
                and prediction is not None
                and prediction.lower_bound_us > self.skip_factor * best_us
            ):
                skipped.append(skipped_result(candidate, arch, prediction, best_us, self.skip_factor))
            else:
                keep.append(candidate)
        return keep, skipped
