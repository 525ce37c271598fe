"""Shared fixtures and the ``gpu`` marker's skip logic."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """Visible CUDA GPUs (0 when cupy is missing or no driver answers)."""
    try:
        import cupy
    except Exception:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible (cupy missing or no device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def find_cuobjdump() -> str | None:
    """cuobjdump from PATH, the CUDA toolkit, or the ``nvidia-cuda-cuobjdump`` wheel (a test extra)."""
    import os
    import site

    found = shutil.which("cuobjdump")
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in homes:
        if home and (Path(home) / "bin" / "cuobjdump").is_file():
            return str(Path(home) / "bin" / "cuobjdump")
    for base in site.getsitepackages():
        for candidate in sorted((Path(base) / "nvidia").glob("cu*/bin/cuobjdump")):
            return str(candidate)
    return None


@pytest.fixture
def cuobjdump() -> str:
    """Path of cuobjdump; skips the test where none is installed."""
    found = find_cuobjdump()
    if found is None:
        pytest.skip("cuobjdump not installed (the test extra nvidia-cuda-cuobjdump provides it)")
    return found


@pytest.fixture
def root_copy(tmp_path: Path) -> Path:
    """A copy of the root manifest with its references and baselines, in a temp folder."""
    shutil.copy(ROOT / "kernels.toml", tmp_path / "kernels.toml")
    shutil.copytree(ROOT / "kernels", tmp_path / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
    return tmp_path


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache directory, also set as R1BUILD_CACHE_DIR."""
    d = tmp_path / "cache"
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(d))
    yield d
