"""The two timing regimes in the evaluator: the request the worker gets for the ``idle-gaps`` regime, the finalists
timed again in it (the fastest back to back), and both medians recorded on their timing. The GPU test times the
root manifest's silu_mul variants and finds both regimes on the finalists."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from r1build.cache import Cache
from r1build.evaluate import EvaluatorOptions, GpuEvaluator, expand_variants
from r1build.evaluate.timing.stats import FINALISTS, SampleStats, finalists, time_request, with_regimes
from r1build.judge import Job
from r1build.manifest import Manifest
from r1build.records import Timing


def test_the_idle_gaps_request_names_its_regime_and_gap_and_back_to_back_is_as_before() -> None:
    before = time_request("lib:1", [], budget_s=0.3)
    assert "regime" not in before and "idle_gap_us" not in before  # the worker reads no new field by default
    idle = time_request("lib:1", [], budget_s=0.3, regime="idle-gaps", idle_gap_us=500.0)
    assert (idle["regime"], idle["idle_gap_us"]) == ("idle-gaps", 500.0)
    assert {k: v for k, v in idle.items() if k not in ("regime", "idle_gap_us")} == before


def test_the_finalists_are_the_fastest_back_to_back() -> None:
    medians = {"a": 12.0, "b": 9.0, "c": 30.0, "d": 10.0, "e": 9.0}
    assert finalists(medians) == ["b", "e", "d"][:FINALISTS]
    assert finalists(medians, 1) == ["b"] and finalists({}) == []


def test_a_finalist_records_both_regimes_and_the_others_none() -> None:
    timing = Timing(median_us=10.0, spread=0.01, samples=100)
    assert with_regimes(timing, None) == timing
    both = with_regimes(timing, SampleStats(median_us=13.123456, spread=0.05, samples=20))
    assert both.regimes == {"back-to-back": 10.0, "idle-gaps": 13.1235} and both.median_us == 10.0


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GpuEvaluator]:
    with (
        Cache(tmp_path_factory.mktemp("cache")) as cache,
        GpuEvaluator(cache, options=EvaluatorOptions(call_timeout_s=8.0)) as ev,
    ):
        yield ev


@pytest.mark.gpu
@pytest.mark.slow
def test_finalists_are_timed_in_both_regimes_on_a_gpu(evaluator: GpuEvaluator, root_manifest: Manifest) -> None:
    arch = min(a for a in evaluator.archs if not a.endswith("a"))
    spec = root_manifest.kernel("silu_mul")
    candidates = expand_variants(root_manifest, spec)
    results = evaluator.evaluate(Job(root_manifest, spec, arch, candidates, candidates[0]))
    timed = sorted((r for r in results if r.timing is not None), key=lambda r: r.timing.median_us if r.timing else 0)
    both = [r for r in timed if r.timing and set(r.timing.regimes) == {"back-to-back", "idle-gaps"}]
    assert 1 <= len(both) <= FINALISTS, [r.timing for r in timed]
    assert timed[0] in both  # the fastest back to back is a finalist
    for r in both:
        assert r.timing is not None and r.timing.regimes["idle-gaps"] > 0
