"""Support for the generate stage's tests: a small project, answers R1 could give, and a judge.

The controller is tested with two judges. :class:`~r1build.gate.static.StaticGate` (real nvcc) where compiler
errors must flow back into prompts; elsewhere :class:`MarkerJudge`, an Evaluator that reads markers a test puts
in the answer's source (``#error`` → compile error, ``// WRONG`` → incorrect, ``// time_us: X`` → a timing
against a fixed floor). There is no GPU here, and budgets, faults and retries do not depend on how candidates
are judged; markers keep those tests fast and say in the answer itself what the judge will decide.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r1build.cache import Cache
from r1build.judge import Evaluator, Job
from r1build.manifest import KernelSpec, Manifest, load_manifest
from r1build.records import GateReport, Result, Timing

if TYPE_CHECKING:
    from r1build.generate import SearchOutcome

KEY = "sk-test-4f1c9a7e2b0d"
"""The API key every test sends; it must never reach the cache."""

FLOOR_US = 10.0
"""The hardware floor MarkerJudge reports."""

SIGNATURE = 'extern "C" cudaError_t vadd(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream)'


def kernel_source(variant: int = 0, *, time_us: float | None = None, extra: str = "") -> str:
    """A valid ``vadd`` translation unit; ``variant`` changes the code (so candidates differ)."""
    marker = f"// time_us: {time_us}\n" if time_us is not None else ""
    return (
        f"{marker}#include <cuda_runtime.h>\n#include <cstdint>\n{extra}"
        "namespace {\n"
        "__global__ void vadd_kernel(const float* a, const float* b, float* out, int64_t n) {\n"
        "    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;\n"
        f"    if (i < n) out[i] = a[i] + b[i] + {variant}.0f * 0.0f;\n"
        "}\n"
        "}  // namespace\n"
        f"{SIGNATURE} {{\n"
        "    if (n <= 0) return cudaSuccess;\n"
        f"    const int threads = {128 + 32 * (variant % 8)};\n"
        "    vadd_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(a, b, out, n);\n"
        "    return cudaGetLastError();\n"
        "}\n"
    )


def broken_source(message: str = "vadd_typo") -> str:
    """A ``vadd`` that does not compile (an undefined identifier)."""
    return f"#include <cuda_runtime.h>\n#include <cstdint>\n{SIGNATURE} {{\n    return {message};\n}}\n"


def answer(source: str, *, prose: str = "Here is the kernel.") -> str:
    """An R1-style answer: prose, then the code in a fenced block."""
    return f"{prose}\n\n```cuda\n{source}```\n\nIt launches on the given stream."


BASELINE = kernel_source(99)

REFERENCE = """import numpy as np


def vadd(a, b, n):
    return (a.astype(np.float64) + b).astype(np.float32)
"""


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return repr(value)


@dataclass
class Project:
    """A manifest with one kernel (``vadd``) in a temporary folder, and a cache."""

    root: Path
    cache_dir: Path

    def write(
        self,
        *,
        generation: dict[str, Any] | None = None,
        budget: dict[str, Any] | None = None,
        baseline: bool = False,
        tunables: dict[str, list[int]] | None = None,
        limits: dict[str, int] | None = None,
    ) -> Manifest:
        gen = {
            "provider": "deepseek",
            "max-concurrency": 4,
            "max-tokens": 4096,
            "request-timeout-s": 5,
            "retries": 2,
            "retry-backoff-s": 0.01,
            "search": "rounds",  # the tests written for rounds; test_generate_continuous.py tests the default
            **(generation or {}),
        }
        bud = {"candidates": 8, "rounds": 2, "samples": 4, "wall-time-s": 30, "patience": 1, **(budget or {})}
        lines = ['archs = ["sm_90"]', "", "[generation]"]
        lines += [f"{k} = {_toml(v)}" for k, v in gen.items()]
        lines += [
            "",
            "[[kernel]]",
            'name = "vadd"',
            'description = "out[i] = a[i] + b[i] for i in [0, n)."',
            "args = [",
            '  { name = "a", dtype = "float32", shape = ["n"], role = "in" },',
            '  { name = "b", dtype = "float32", shape = ["n"], role = "in" },',
            '  { name = "out", dtype = "float32", shape = ["n"], role = "out" },',
            '  { name = "n", dtype = "int64" },',
            "]",
            'reference = "ref:vadd"',
            "test-shapes = [{ n = 1 }, { n = 1000 }]",
            "bench-shapes = [{ n = 16777216 }]",  # twice the L2 and more: timed cold, below the memory floor
            f"budget = {_toml(bud)}",
        ]
        if baseline:
            (self.root / "vadd.cu").write_text(BASELINE)
            lines.append('baseline = "vadd.cu"')
        if tunables:
            lines.append(f"tunables = {_toml(tunables)}")
        if limits:
            lines.append(f"limits = {_toml(limits)}")
        (self.root / "ref.py").write_text(REFERENCE)
        (self.root / "kernels.toml").write_text("\n".join(lines) + "\n")
        return load_manifest(self.root / "kernels.toml")

    def cache(self) -> Cache:
        return Cache(self.cache_dir)

    def cache_bytes(self) -> bytes:
        """Every byte stored under the cache directory."""
        return b"".join(p.read_bytes() for p in sorted(self.cache_dir.rglob("*")) if p.is_file())


def env_for(url: str, **extra: str) -> dict[str, str]:
    """The environment a search gets: the server's URL and the test key."""
    return {"R1BUILD_BASE_URL": url, "DEEPSEEK_API_KEY": KEY, **extra}


@dataclass
class MarkerJudge:
    """An Evaluator deciding by markers in the source (see the module docstring); records what it judged."""

    delay_s: float = 0.0
    jobs: list[list[str]] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def judged(self) -> list[str]:
        return [d for job in self.jobs for d in job]

    def evaluate(self, job: Job) -> list[Result]:
        with self.lock:
            self.jobs.append([c.digest for c in job.candidates])
            self.threads.add(threading.current_thread().name)
        if self.delay_s:
            time.sleep(self.delay_s)
        return [self._one(job.spec, job.arch, c.digest, c.source) for c in job.candidates]

    def _one(self, spec: KernelSpec, arch: str, digest: str, source: str) -> Result:
        error = re.search(r"#error (.*)", source)
        if error:
            return Result(
                candidate=digest, arch=arch, status="compile_error", detail=f"vadd.cu(3): error: {error.group(1)}"
            )
        if f'extern "C" cudaError_t {spec.name}(' not in source:
            return Result(candidate=digest, arch=arch, status="rejected", detail=f"does not export {spec.name}")
        if "// WRONG" in source:
            return Result(
                candidate=digest,
                arch=arch,
                status="incorrect",
                stage="evaluate",
                detail="n=1000: 1000 of 1000 elements differ, max abs error 0.5 at index 3",
            )
        report = GateReport(registers=16)
        timed = re.search(r"// time_us: ([0-9.]+)", source)
        if timed:
            t = float(timed.group(1))
            timing = Timing(median_us=t, spread=0.01, samples=20, floor_us=FLOOR_US, share_of_floor=FLOOR_US / t)
            return Result(
                candidate=digest,
                arch=arch,
                status="passed",
                stage="evaluate",
                gate=report,
                timing=timing,
                device="TestGPU",
            )
        return Result(candidate=digest, arch=arch, status="passed", gate=report)


def search_vadd(manifest: Manifest, cache: Cache, url: str, *, evaluator: Evaluator | None = None) -> SearchOutcome:
    """A whole search for ``vadd`` on sm_90 against the server at ``url``: no seeds, judged by ``evaluator`` (a
    :class:`MarkerJudge` when None)."""
    from r1build.generate import SearchJob, search

    return search(
        SearchJob(
            manifest, manifest.kernel("vadd"), "sm_90", evaluator=evaluator or MarkerJudge(), cache=cache, seeds=[]
        ),
        environ=env_for(url),
    )
