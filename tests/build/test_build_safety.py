"""Real pip builds of the tiny project that must never spend the installer's key, never wait on a dead endpoint,
and never fail for want of a cache; and an sdist that refuses to ship what a wheel could not build from.

The model is a real chat server on 127.0.0.1 that counts requests; the installer's environment holds
``OPENAI_API_KEY`` and points ``R1BUILD_BASE_URL`` at it.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import replace
from pathlib import Path

import pytest

from r1build.keys import decision_key
from r1build.lock import read_lock, write_lock
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin
from tests.build.buildenv import PACKAGES, BuildEnv, copy_project
from tests.damage import read_only_tree, wreck_index
from tests.generate.chat_server import Answer, ChatServer

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

KEY = "sk-installer-7d1e0c"
GENERATED = """#include <cuda_runtime.h>
namespace { __global__ void k(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] + x[i]; } }
extern "C" cudaError_t scale(const float* x, float* y, int n, cudaStream_t stream) {
  k<<<(n + 127) / 128, 128, 0, stream>>>(x, y, n); return cudaGetLastError(); }
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tiny(build_env: BuildEnv, dest: Path, cache: Path) -> Path:
    """The tiny project with an OpenAI-compatible [generation] table and a small budget, locked."""
    project = copy_project(PACKAGES / "tiny", dest)
    manifest = project / "kernels.toml"
    text = manifest.read_text()
    text = text.replace("[[kernel]]", '[generation]\nprovider = "openai"\n\n[[kernel]]', 1)
    manifest.write_text(text + "budget = { rounds = 1, samples = 2 }\n")
    build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project, env={"R1BUILD_CACHE_DIR": str(cache)})
    return project


def _lock_a_generated_winner(project: Path) -> str:
    """Rewrite the lock so that it names a generated winner whose source is nowhere in the project (the state
    of a lock made where the model ran, shipped without ``r1build vendor``); returns its source digest."""
    manifest = load_manifest(project / "kernels.toml")
    lock = read_lock(project / "kernels.lock")
    assert lock is not None
    (entry,) = lock.kernel
    assert entry.key == decision_key(manifest, manifest.kernel("scale"), "sm_90")
    candidate = Candidate(GENERATED, Origin("generated", model="deepseek-ai/DeepSeek-R1", round=0, sample=1))
    generated = replace(
        entry,
        winner=candidate.digest,
        source=candidate.source_digest,
        provenance="generated",
        origin=None,
        model="deepseek-ai/DeepSeek-R1",
        round=0,
        sample=1,
    )
    write_lock(project / "kernels.lock", replace(lock, kernel=[generated]))
    return candidate.source_digest


def test_installing_never_spends_the_key_and_a_dead_endpoint_costs_seconds(build_env: BuildEnv, tmp_path: Path) -> None:
    project = _tiny(build_env, tmp_path / "tiny", tmp_path / "lock-cache")
    source = _lock_a_generated_winner(project)
    out = tmp_path / "out"
    out.mkdir()
    installer = {"OPENAI_API_KEY": KEY, "R1BUILD_OFFLINE": "", "R1BUILD_CACHE_DIR": str(tmp_path / "empty-cache")}

    # building the sdist refuses: a wheel from it could not find the locked winner
    sdist = build_env.hook(project, "build_sdist", tmp_path / "dist-none")
    assert sdist.returncode == 2, sdist.stdout
    assert "r1build vendor" in sdist.stdout and f"source {source[:16]}" in sdist.stdout
    assert "Traceback" not in sdist.stdout

    # pip wheel with the installer's key and the endpoint up: no request, the gated baseline, a note on the opt-in
    with ChatServer([Answer(f"```cuda\n{GENERATED}```")]) as server:
        proc = build_env.pip_wheel(project, out, env={**installer, "R1BUILD_BASE_URL": server.url}, isolated=False)
        requests = len(server.requests)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert requests == 0, f"the build sent {requests} requests with the installer's key"
    assert "the baseline scale.cu is chosen by the static gate alone, unvalidated" in proc.stdout
    assert "R1BUILD_GENERATE=1" in proc.stdout
    assert list(out.glob("tiny-0.1.0-*.whl"))

    # opted in, with the endpoint down (the defaults: 4 retries from 2 s each): seconds and a warning, a wheel
    for wheel in out.glob("*.whl"):
        wheel.unlink()
    dead = {**installer, "R1BUILD_GENERATE": "1", "R1BUILD_BASE_URL": f"http://127.0.0.1:{_closed_port()}/v1"}
    start = time.monotonic()
    proc = build_env.pip_wheel(project, out, env=dead, isolated=False)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert re.search(r"r1build: warning: the LLM endpoint \S+ is unreachable", proc.stdout), proc.stdout[-4000:]
    assert "the baseline scale.cu is chosen by the static gate alone, unvalidated" in proc.stdout
    assert list(out.glob("tiny-0.1.0-*.whl"))
    assert took < 120, f"the build took {took:.0f} s"


@pytest.mark.parametrize("damage", ["random bytes", "read-only", "missing"])
def test_a_locked_vendored_build_succeeds_whatever_the_cache(build_env: BuildEnv, tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    project = _tiny(build_env, tmp_path / "tiny", cache)
    build_env.check(["r1build", "vendor", "-m", project], cwd=project, env={"R1BUILD_CACHE_DIR": str(cache)})
    out = tmp_path / "out"
    out.mkdir()
    env = {"R1BUILD_LOCKED": "1", "R1BUILD_CACHE_DIR": str(cache)}

    if damage == "random bytes":
        left = wreck_index(cache, "random")
        proc = build_env.pip_wheel(project, out, env=env, isolated=False)
        assert (cache / "cache.db").read_bytes() == left  # nothing lost: the damaged store awaits repair
    elif damage == "read-only":
        with read_only_tree(cache):
            proc = build_env.pip_wheel(project, out, env=env, isolated=False)
    else:
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("")
        proc = build_env.pip_wheel(
            project, out, env={**env, "R1BUILD_CACHE_DIR": str(blocker / "cache")}, isolated=False
        )
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert list(out.glob("tiny-0.1.0-*.whl"))
    warnings = [line for line in proc.stdout.splitlines() if line.strip().startswith("r1build: warning:")]
    assert len(warnings) == 1 and "cache" in warnings[0], warnings
