"""Provider profiles, endpoint resolution and the prompts built from the spec."""

from __future__ import annotations

import pytest

from r1build.errors import ConfigError
from r1build.generate import endpoint_configured, resolve_endpoint
from r1build.generate.prompts import Judged, feedback_prompt, task_prompt, trim_log
from r1build.generate.providers import public_url
from r1build.manifest.model import Arg, Generation, KernelSpec
from r1build.records import GateReport, Result, Timing
from tests.generate.gen_support import KEY, SIGNATURE, Project, kernel_source


def test_endpoint_configured() -> None:
    deepseek = Generation()
    assert not endpoint_configured(deepseek, {})
    assert endpoint_configured(deepseek, {"DEEPSEEK_API_KEY": "k"})
    assert not endpoint_configured(deepseek, {"DEEPSEEK_API_KEY": ""})
    assert not endpoint_configured(deepseek, {"OPENAI_API_KEY": "k"})
    assert endpoint_configured(deepseek, {"R1BUILD_BASE_URL": "http://127.0.0.1:1/v1"})
    assert endpoint_configured(Generation(base_url="http://h/v1"), {})
    custom = Generation(provider="nim", api_key_env="MY_KEY")
    assert endpoint_configured(custom, {"MY_KEY": "k"})
    assert not endpoint_configured(custom, {"NVIDIA_API_KEY": "k"})
    assert endpoint_configured(Generation(provider="vllm"), {"OPENAI_API_KEY": "k"})


def test_resolve_endpoint_profiles() -> None:
    ep = resolve_endpoint(Generation(), {"DEEPSEEK_API_KEY": KEY})
    assert (ep.base_url, ep.model, ep.key_env) == ("https://api.deepseek.com", "deepseek-reasoner", "DEEPSEEK_API_KEY")
    assert not ep.profile.honours_temperature
    assert KEY not in repr(ep)
    nim = resolve_endpoint(Generation(provider="nim"), {"NVIDIA_API_KEY": KEY})
    assert nim.model == "deepseek-ai/deepseek-r1" and nim.profile.honours_temperature
    local = resolve_endpoint(Generation(provider="vllm", model="r1-distill"), {})
    assert local.api_key == "EMPTY" and local.model == "r1-distill" and local.key_env is None
    override = resolve_endpoint(Generation(base_url="http://a/v1"), {"R1BUILD_BASE_URL": "http://b:9/v1/"})
    assert override.base_url == "http://b:9/v1"


def test_resolve_endpoint_errors() -> None:
    with pytest.raises(ConfigError, match="DEEPSEEK_API_KEY"):
        resolve_endpoint(Generation(), {})
    with pytest.raises(ConfigError, match="not an http"):
        resolve_endpoint(Generation(), {"R1BUILD_BASE_URL": "ftp://x"})
    # a key is optional for a server of one's own
    assert resolve_endpoint(Generation(), {"R1BUILD_BASE_URL": "http://127.0.0.1:8/v1"}).api_key == "EMPTY"


def test_public_url_drops_credentials() -> None:
    assert public_url("https://user:pw@host.example:8443/v1?key=abc#x") == "https://host.example:8443/v1"


def test_task_prompt_carries_the_spec(project: Project) -> None:
    manifest = project.write(tunables={"BLOCK": [128, 256]}, limits={"registers": 64, "spill-bytes": 0})
    spec = manifest.kernel("vadd")
    text = task_prompt(manifest, spec, "sm_90", direction="warp shuffles")
    for needle in (
        SIGNATURE,  # the exact signature
        "| a | const float* | input array (read only) | [n]",
        "| out | float* | output array",
        "out[i] = a[i] + b[i]",  # the description
        "def vadd(a, b, n):",  # the reference's source
        "n=1; n=1000",  # correctness shapes
        "n=16777216",  # benchmark shape
        "132 SMs",
        "227 KiB per block",
        "at most 255 per thread",
        "Tensor cores: 4th gen",
        "at most 64 registers per thread",
        "no spilling",
        "nvcc -O3 -std=c++17 -arch=sm_90",
        "`BLOCK` is tried with the values 128, 256",
        "// @tunable NAME: 128, 256, 512",
        "Optimization direction for this attempt: warp shuffles",
        "anonymous namespace",
        "`stream`",
        "```cuda fenced block",
    ):
        assert needle in text, needle


def test_feedback_prompt() -> None:
    gate = GateReport(registers=40, spill_stores=8, spill_loads=8, shared_bytes=4096)
    log = "\n".join(
        [f"note {i}: instantiated from here" for i in range(60)]
        + ['vadd.cu(12): error: identifier "tid" is undefined', "1 error detected"]
    )
    failed = Judged(
        "round 0 sample 1", kernel_source(1), Result(candidate="d1", arch="sm_90", status="compile_error", detail=log)
    )
    fast = Judged(
        "round 0 sample 2",
        kernel_source(2),
        Result(
            candidate="d2",
            arch="sm_90",
            status="passed",
            gate=gate,
            device="H200",
            timing=Timing(
                median_us=12.5, spread=0.01, samples=20, floor_us=10.0, share_of_floor=0.8, speedup_vs_baseline=1.5
            ),
        ),
    )
    wrong = Judged(
        "round 0 sample 3",
        kernel_source(3),
        Result(candidate="d3", arch="sm_90", status="incorrect", detail="n=1000: max abs error 0.5 at index 3"),
    )
    spec_text = feedback_prompt(
        _spec(),
        parent=failed,
        parent_in_conversation=True,
        best=[fast],
        failures=[wrong],
        notes=["2 answer(s) had no ```cuda block with the kernel."],
        direction="vectorized loads",
    )
    assert 'identifier "tid" is undefined' in spec_text
    assert "note 59" not in spec_text  # trimmed to the errors
    assert "12.50 us" in spec_text and "80% of the hardware floor (10.00 us)" in spec_text
    assert "1.50x the baseline" in spec_text and "40 registers per thread, 16 bytes of spills" in spec_text
    assert kernel_source(2).strip() in spec_text  # the best kernel's source, as it is not the parent
    assert "max abs error 0.5" in spec_text
    assert "no ```cuda block" in spec_text
    assert spec_text.count(kernel_source(1).strip()) == 0  # the parent's own code is in the conversation
    assert "Fix it, focusing on vectorized loads" in spec_text


def test_trim_log_keeps_errors() -> None:
    text = "\n".join(["warning: unused"] * 100 + ["x.cu(3): error: boom", "  here"] + ["warning: more"] * 100)
    out = trim_log(text)
    assert "error: boom" in out and "  here" in out and len(out) < 600


def _spec() -> KernelSpec:
    args = [
        Arg("a", "float32", ["n"], "in"),
        Arg("b", "float32", ["n"], "in"),
        Arg("out", "float32", ["n"], "out"),
        Arg("n", "int64"),
    ]
    return KernelSpec(
        name="vadd",
        description="add",
        args=args,
        reference="ref:vadd",
        test_shapes=[{"n": 1}],
        bench_shapes=[{"n": 1048576}],
    )
