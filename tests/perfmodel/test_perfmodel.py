"""The performance model on the CPU: real nvcc's PTX and ptxas report of the root kernels, occupancy by the arch's
limits, predictions that rank vectorized before scalar code, ordering and skipping in a search, settings."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from r1build.errors import ConfigError
from r1build.evaluate.variants import expand_variants
from r1build.generate import SearchJob
from r1build.generate.controller import run_search
from r1build.generate.providers import resolve_endpoint
from r1build.manifest import Manifest, load_manifest
from r1build.perfmodel import PerfModel, compile_features, ptx_features
from r1build.perfmodel.predict import Prediction, block_threads, occupancy
from r1build.records import Candidate, Origin
from r1build.settings import env_settings
from r1build.toolchain.nvcc import toolchain
from tests.generate.chat_server import Answer, ChatServer
from tests.generate.gen_support import KEY, MarkerJudge, Project, answer, kernel_source
from tests.support.shared import once_per_run

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root_manifest() -> Manifest:
    return load_manifest(ROOT / "kernels.toml")


@pytest.fixture(scope="module")
def silu_predictions(root_manifest: Manifest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Prediction | None]:
    """The model's prediction for sm_90 of each of silu_mul's variants by digest (its nvcc compile: 25 of them,
    seconds of CPU), made once a test run for the tests of the model and of its bench that both ask for them."""
    with once_per_run(tmp_path_factory, "perfmodel-silu_mul") as (folder, made):
        stored = folder / "predictions.json"
        if not made:
            model = PerfModel(root_manifest)
            spec = root_manifest.kernel("silu_mul")
            predicted = {c.digest: model.predict(spec, "sm_90", c) for c in expand_variants(root_manifest, spec)}
            doc = {digest: None if p is None else dataclasses.asdict(p) for digest, p in predicted.items()}
            stored.write_text(json.dumps(doc), encoding="utf-8")
    doc = json.loads(stored.read_text(encoding="utf-8"))
    return {digest: None if p is None else Prediction(**p) for digest, p in doc.items()}


def _model(manifest: Manifest, predictions: dict[str, Prediction | None]) -> PerfModel:
    """A model of ``manifest`` that already holds ``predictions`` for sm_90 (and compiles any other candidate)."""
    return PerfModel(manifest, _known={(digest, "sm_90"): p for digest, p in predictions.items()})


def test_ptx_counts_of_a_scalar_and_a_vectorized_kernel(root_manifest: Manifest) -> None:
    spec = root_manifest.kernel("silu_mul")
    scalar = Candidate((ROOT / "kernels/silu_mul.cu").read_text(), Origin("baseline"))
    vec4 = Candidate((ROOT / "kernels/silu_mul_vec4.cu").read_text(), Origin("file"))
    flags = list(root_manifest.settings.nvcc_flags)
    a = compile_features(scalar, spec, "sm_90", flags=flags, toolchain=toolchain())
    b = compile_features(vec4, spec, "sm_90", flags=flags, toolchain=toolchain())
    assert a is not None and b is not None
    assert a.ptx.widest("load") == 32 and a.ptx.global_stores
    assert b.ptx.widest("load") == 128 and b.ptx.widest("store") == 128
    assert a.ptx.fp_ops > 0 and a.report.registers > 0
    broken = Candidate("this is not CUDA", Origin("generated"))
    assert compile_features(broken, spec, "sm_90", flags=flags, toolchain=toolchain()) is None


def test_ptx_features_of_text() -> None:
    ptx = """
.visible .entry k(.param .u64 k_param_0)
.maxntid 128, 1, 1
{
\tld.global.nc.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd4];
\t@%p1 bra \t$L__BB0_2;
\tld.shared.f32 \t%f5, [%r3];
\tfma.rn.f32 \t%f6, %f1, %f2, %f5;
\tbar.sync \t0;
\tatom.global.add.f32 \t%f7, [%rd5], %f6;
\tst.global.v2.f32 \t[%rd6], {%f6, %f7};
$L__BB0_2:
\tret;
}"""
    f = ptx_features(ptx)
    assert f.global_loads == {128: 1} and f.global_stores == {64: 1}
    assert (f.shared_loads, f.fp_ops, f.barriers, f.atomics, f.max_threads) == (1, 1, 1, 1, 128)


def test_occupancy_by_the_arch_limits() -> None:
    assert occupancy("sm_90", registers=32, shared_bytes=0, threads=256) == 1.0
    assert occupancy("sm_90", registers=128, shared_bytes=0, threads=256) == 0.25  # 2 blocks of 8 warps
    assert occupancy("sm_90", registers=32, shared_bytes=100 * 1024, threads=256) == 0.25  # 2 blocks by smem
    assert occupancy("sm_86", registers=32, shared_bytes=0, threads=1024) == pytest.approx(32 / 48)


def test_block_size_from_the_code() -> None:
    from r1build.perfmodel.features import CodeFeatures, PtxFeatures
    from r1build.records import GateReport

    plain = CodeFeatures(report=GateReport(), ptx=PtxFeatures())
    assert block_threads(Candidate("k<<<g, 512, 0, s>>>()", Origin("file")), plain) == 512
    assert block_threads(Candidate("x", Origin("file"), {"BLOCK": 128}), plain) == 128
    assert block_threads(Candidate("const int threads = 64;", Origin("file")), plain) == 64
    assert block_threads(Candidate("nothing", Origin("file")), plain) == 256
    bounded = CodeFeatures(report=GateReport(), ptx=PtxFeatures(max_threads=96))
    assert block_threads(Candidate("k<<<g, 512>>>()", Origin("file")), bounded) == 96


@pytest.mark.heavy  # every root variant compiled for its features: 14 s
def test_vectorized_code_is_predicted_faster_and_every_root_variant_is_predicted(
    root_manifest: Manifest, silu_predictions: dict[str, Prediction | None]
) -> None:
    model = _model(root_manifest, silu_predictions)
    spec = root_manifest.kernel("silu_mul")
    variants = expand_variants(root_manifest, spec)
    assert {c.digest for c in variants} == set(silu_predictions)
    predictions = {(c.origin.path, tuple(sorted(c.defines.items()))): model.predict(spec, "sm_90", c) for c in variants}
    assert all(p is not None and p.lower_bound_us > p.memory_us for p in predictions.values())
    scalar = predictions[("kernels/silu_mul.cu", ())]
    vec4 = predictions[("kernels/silu_mul_vec4.cu", (("BLOCK", 256), ("UNROLL", 1)))]
    assert vec4 is not None and scalar is not None and vec4.lower_bound_us < scalar.lower_bound_us
    assert vec4.width_bits == 128 and scalar.width_bits == 32
    matmul = root_manifest.kernel("matmul")
    _, tile16, tile32 = expand_variants(root_manifest, matmul)[:3]  # the baseline's: no defines, TILE=16, TILE=32
    p16, p32 = model.predict(matmul, "sm_90", tile16), model.predict(matmul, "sm_90", tile32)
    assert p16 is not None and p32 is not None and p16.compute_us > p16.memory_us  # 2*m*n*k flops dominate
    assert p32.lower_bound_us < p16.lower_bound_us  # twice the reuse per global load


def test_a_search_skips_what_the_model_predicts_far_slower(tmp_path: Path) -> None:
    """The baseline is measured at 20 µs (a marker); the model predicts ~60 µs or more for any vadd at n = 16M
    (192 MiB at the arch's bandwidth), so in skip mode at 2x no generated candidate reaches the judge."""
    project = Project(tmp_path, tmp_path / "cache")
    manifest = project.write(baseline=True, budget={"rounds": 1, "samples": 2, "candidates": 2})
    (tmp_path / "vadd.cu").write_text(kernel_source(99, time_us=20.0))
    manifest = load_manifest(tmp_path / "kernels.toml")
    spec = manifest.kernel("vadd")
    seeds = expand_variants(manifest, spec)
    judge = MarkerJudge()
    model = PerfModel(manifest, mode="skip", skip_factor=2.0)
    replies = [Answer(answer(kernel_source(1, time_us=5.0))), Answer(answer(kernel_source(2, time_us=6.0)))]
    with ChatServer(replies) as server, project.cache() as cache:
        endpoint = resolve_endpoint(
            manifest.settings.generation, {"R1BUILD_BASE_URL": server.url, "DEEPSEEK_API_KEY": KEY}
        )
        outcome = asyncio.run(
            run_search(
                SearchJob(manifest, spec, "sm_90", evaluator=judge, cache=cache, seeds=seeds, perf_model=model),
                endpoint,
            )
        )
    generated = outcome.generated()
    assert len(generated) == 2
    assert all(
        r.status == "rejected" and "skipped by the performance model" in r.detail and "2x" in r.detail
        for _, r in generated
    )
    assert judge.judged == [s.digest for s in seeds]  # only the seeds reached the judge


def test_settings() -> None:
    assert env_settings({}).perf_model is None
    assert env_settings({"R1BUILD_PERF_MODEL": "skip", "R1BUILD_PERF_MODEL_SKIP": "2.5"}).perf_model == "skip"
    assert env_settings({"R1BUILD_PERF_MODEL_SKIP": "2.5"}).perf_model_skip == 2.5
    with pytest.raises(ConfigError, match="R1BUILD_PERF_MODEL must be"):
        env_settings({"R1BUILD_PERF_MODEL": "fast"})
    with pytest.raises(ConfigError, match="R1BUILD_PERF_MODEL_SKIP"):
        env_settings({"R1BUILD_PERF_MODEL_SKIP": "0.5"})


def _bench() -> Any:
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("perf_model_bench", ROOT / "bench" / "perf_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bench_ranks_and_replays() -> None:
    bench = _bench()
    assert bench.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert bench.spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert bench.spearman([1, 1, 2], [5, 6, 7]) == pytest.approx(0.866, abs=1e-3)  # ties share their mean rank
    assert bench.spearman([1, 2], [1, 2]) is None
    # predicted order 0, 1, 2, 3; the first measures 10, so 3 (predicted 40 > 2 x 10) is skipped: same winner
    assert bench.replay([5, 8, 9, 40], [10, 12, 9.5, 30], 2.0) == {"jobs": 3, "of": 4, "same_winner": True}
    # a skip that loses the winner is reported
    assert bench.replay([5, 40], [10, 1], 2.0) == {"jobs": 1, "of": 2, "same_winner": False}


def test_the_bench_predicts_on_the_cpu(
    silu_predictions: dict[str, Prediction | None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one kernel's 25 variants: all 165 took 73 s of the suite (the model's own tests above cover the others); its
    # model holds their predictions, made by the same model for the same manifest once a test run (their compiles
    # are the seconds of this test)
    bench = _bench()
    monkeypatch.setattr(bench, "PerfModel", lambda manifest: _model(manifest, silu_predictions))
    assert bench.main(["--out", str(tmp_path), "--kernel", "silu_mul"]) == 0
    text = (tmp_path / "perf_model.md").read_text()
    assert "| silu_mul | kernels/silu_mul_vec4.cu BLOCK=256 UNROLL=1 |" in text and "predictions only" in text
    assert "| softmax_rows |" not in text


def test_a_family_arch_is_predicted_with_its_gpus_peaks() -> None:
    from r1build.perfmodel.predict import ARCH_PEAKS, arch_peaks

    assert arch_peaks("sm_100f") == ARCH_PEAKS["sm_100"] and arch_peaks("sm_120f") == ARCH_PEAKS["sm_120"]
    assert arch_peaks("sm_90a") == ARCH_PEAKS["sm_90a"] and arch_peaks("sm_88") == ARCH_PEAKS["sm_90"]
