"""The CUDA toolchain: finding nvcc and identifying it by its ``--version`` output."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import ToolchainError
from .keys import digest_bytes
from .settings import env_settings

__all__ = ["Toolchain", "find_nvcc", "toolchain"]


@dataclass(frozen=True)
class Toolchain:
    """An nvcc, identified by its version text."""

    nvcc: str
    """Path of the nvcc executable."""
    version_text: str
    """Full ``nvcc --version`` output."""

    @property
    def ident(self) -> str:
        """Short stable identity, e.g. ``cuda_13.0.r13.0/compiler.36424714_0``; the digest if unparsable."""
        m = re.search(r"Build (\S+)", self.version_text)
        return m.group(1) if m else "nvcc-" + digest_bytes(self.version_text.encode())[:16]

    @property
    def release(self) -> str:
        """``13.0`` style release number, or ``unknown``."""
        m = re.search(r"release (\d+\.\d+)", self.version_text)
        return m.group(1) if m else "unknown"


def find_nvcc() -> str:
    """nvcc from ``R1BUILD_NVCC``, ``CUDACXX``, ``CUDA_HOME``/``CUDA_PATH`` or ``PATH``."""
    explicit = env_settings().nvcc or os.environ.get("CUDACXX")
    if explicit:
        return explicit
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    found = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)
    if not found:
        raise ToolchainError("nvcc not found: put it on PATH or set CUDACXX / CUDA_HOME / R1BUILD_NVCC")
    return found


@functools.lru_cache(maxsize=4)
def _toolchain(nvcc: str) -> Toolchain:
    try:
        proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {nvcc} --version: {exc}") from None
    if proc.returncode != 0:
        raise ToolchainError(f"{nvcc} --version failed with code {proc.returncode}: {proc.stderr.strip()}")
    return Toolchain(nvcc=nvcc, version_text=proc.stdout.strip())


def toolchain() -> Toolchain:
    """The toolchain in use (cached per process)."""
    return _toolchain(find_nvcc())
