"""A lock naming a GPU-validated generated winner that only the vendored folder holds (the state of a project
resolved where the GPU and the key were, then `r1build vendor`-ed), built with pip and an empty cache: the
vendored copy is used; an edited or deleted copy is never used, and a build that goes on without the locked
winner says so, naming the edited file, instead of shipping the baseline with only the baseline's warning."""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from r1build.judge import CHECKS_VERSION
from r1build.lock import read_lock, vendor_file_name, write_lock
from r1build.records import Candidate, Origin
from tests.build.buildenv import PACKAGES, BuildEnv, copy_project
from tests.support.shared import once_per_run

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

GENERATED = """#include <cuda_runtime.h>
namespace { __global__ void k(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] + x[i]; } }
extern "C" cudaError_t scale(const float* x, float* y, int n, cudaStream_t stream) {
  k<<<(n + 127) / 128, 128, 0, stream>>>(x, y, n); return cudaGetLastError(); }
"""


CANDIDATE = Candidate(GENERATED, Origin("generated", model="deepseek-reasoner", round=0, sample=1))


@pytest.fixture(scope="module")
def vendored_tiny(build_env: BuildEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny, locked to a validated generated winner vendored in kernels/_r1build; made once a test run (its lock
    is an ``r1build lock``, nvcc included), each test builds a copy (:func:`_vendored_project`)."""
    with once_per_run(tmp_path_factory, "vendored-tiny") as (base, made):
        project = base / "tiny"
        if not made:
            shutil.rmtree(project, ignore_errors=True)
            copy_project(PACKAGES / "tiny", project)
            env = {"R1BUILD_CACHE_DIR": str(base / "lock-cache")}
            build_env.check(["r1build", "lock", "--offline", "-m", project], cwd=project, env=env)
            lock = read_lock(project / "kernels.lock")
            assert lock is not None
            (entry,) = lock.kernel
            generated = replace(
                entry,
                winner=CANDIDATE.digest,
                source=CANDIDATE.source_digest,
                provenance="generated",
                validation="validated",
                origin=None,
                model="deepseek-reasoner",
                round=0,
                sample=1,
                time_us=12.5,
                gpu="NVIDIA H200",
                checks=CHECKS_VERSION,
            )
            write_lock(project / "kernels.lock", replace(lock, kernel=[generated]))
            vendored = project / "kernels" / "_r1build" / vendor_file_name("scale", CANDIDATE.source_digest)
            vendored.parent.mkdir(parents=True)
            vendored.write_text(GENERATED, encoding="utf-8")
    return project


def _vendored_project(template: Path, dest: Path) -> tuple[Path, Path, str]:
    """A copy of the project of :func:`vendored_tiny` at ``dest``: the project, the vendored file and the winner's
    digest."""
    project = copy_project(template, dest)
    vendored = project / "kernels" / "_r1build" / vendor_file_name("scale", CANDIDATE.source_digest)
    assert vendored.read_text(encoding="utf-8") == GENERATED
    return project, vendored, CANDIDATE.digest


def _wheel_sources(wheel_dir: Path, project: Path) -> list[str]:
    """The generated kernel sources the build compiled (their names carry the variant's digest)."""
    assert list(wheel_dir.glob("tiny-0.1.0-*.whl"))
    return sorted(p.name for p in (project / ".r1build" / "generated").glob("scale__*.cu"))


def _warnings(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if line.strip().startswith("r1build: warning:")]


def test_a_vendored_winner_builds_and_an_edited_one_is_named(
    build_env: BuildEnv, vendored_tiny: Path, tmp_path: Path
) -> None:
    project, vendored, winner = _vendored_project(vendored_tiny, tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    empty = {"R1BUILD_CACHE_DIR": str(tmp_path / "empty-cache")}

    locked = build_env.pip_wheel(project, out, env={**empty, "R1BUILD_LOCKED": "1"}, isolated=False)
    assert locked.returncode == 0, locked.stdout[-6000:]
    assert _wheel_sources(out, project) == [f"scale__{winner[:12]}.cu"]
    assert _warnings(locked.stdout) == []

    vendored.write_text(GENERATED + "// edited\n", encoding="utf-8")
    for wheel in out.glob("*.whl"):
        wheel.unlink()
    refused = build_env.pip_wheel(project, out, env={**empty, "R1BUILD_LOCKED": "1"}, isolated=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stdout
    edited = f"kernels/_r1build/{vendored.name} is there but was edited"
    assert edited in refused.stdout, refused.stdout[-4000:]
    assert not list(out.glob("*.whl"))
    # an sdist of it is refused too, saying which file was edited
    dist = tmp_path / "dist"
    dist.mkdir()
    sdist = build_env.hook(project, "build_sdist", dist, env=empty)
    assert sdist.returncode == 2 and "Traceback" not in sdist.stdout, sdist.stdout[-4000:]
    assert "names winners this sdist would not carry" in sdist.stdout and edited in sdist.stdout, sdist.stdout

    # unlocked, the build goes on from the baseline, and says that it passed over the locked winner and why
    plain = build_env.pip_wheel(project, out, env=empty, isolated=False)
    assert plain.returncode == 0, plain.stdout[-6000:]
    (passed_over,) = [w for w in _warnings(plain.stdout) if "is passed over" in w]
    assert edited in passed_over and f"generated winner {winner[:12]}" in passed_over, passed_over
    assert _wheel_sources(out, project) != [f"scale__{winner[:12]}.cu"]

    vendored.unlink()
    for wheel in out.glob("*.whl"):
        wheel.unlink()
    gone = build_env.pip_wheel(project, out, env=empty, isolated=False)
    assert gone.returncode == 0, gone.stdout[-6000:]
    (passed_over,) = [w for w in _warnings(gone.stdout) if "is passed over" in w]
    assert "nor vendored in kernels/_r1build" in passed_over and "edited" not in passed_over, passed_over
    with zipfile.ZipFile(next(out.glob("tiny-0.1.0-*.whl"))) as zf:
        assert any(name.endswith(".so") for name in zf.namelist())


def test_an_unlocked_build_with_a_stale_lock_says_it_does_not_use_it(
    build_env: BuildEnv, vendored_tiny: Path, tmp_path: Path
) -> None:
    """The manifest edited after locking (a description reworded): without R1BUILD_LOCKED the build decides the
    kernel again and ships the baseline instead of the locked, GPU-validated winner; it says so, naming the entry
    and why, and nothing is said where the lock is current."""
    project, _vendored, winner = _vendored_project(vendored_tiny, tmp_path / "tiny")
    out = tmp_path / "out"
    out.mkdir()
    empty = {"R1BUILD_CACHE_DIR": str(tmp_path / "empty-cache")}
    current = build_env.pip_wheel(project, out, env=empty, isolated=False)
    assert current.returncode == 0, current.stdout[-6000:]
    assert _warnings(current.stdout) == []

    manifest = project / "kernels.toml"
    text = manifest.read_text(encoding="utf-8")
    assert "y[i] = 2 * x[i]" in text
    manifest.write_text(text.replace("y[i] = 2 * x[i]", "y[i] = x[i] * 2"), encoding="utf-8")
    for wheel in out.glob("*.whl"):
        wheel.unlink()
    stale = build_env.pip_wheel(project, out, env=empty, isolated=False)
    assert stale.returncode == 0, stale.stdout[-6000:]
    (said,) = [w for w in _warnings(stale.stdout) if "kernels.lock is out of date" in w]
    assert f"scale/sm_90 (generated, validated winner {winner[:12]}): stale: spec changed" in said, said
    assert "R1BUILD_LOCKED=1 makes this an error" in said
    assert _wheel_sources(out, project) != [f"scale__{winner[:12]}.cu"]
