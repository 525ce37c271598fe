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

__all__ = ["GpuArchs", "Toolchain", "find_nvcc", "gpu_archs", "toolchain"]


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


@dataclass(frozen=True)
class GpuArchs:
    """The archs an nvcc can compile for, as it lists them."""

    real: tuple[str, ...]
    """Machine-code archs (``nvcc --list-gpu-code``), e.g. ``sm_90``, by number."""
    virtual: tuple[str, ...]
    """PTX archs (``nvcc --list-gpu-arch``), e.g. ``compute_90``."""
    specific: tuple[str, ...]
    """Arch-specific ``a`` archs (``sm_90a``): those ``nvcc --help`` allows for ``--gpu-architecture``."""

    def supports(self, arch: str, *, sass: bool, ptx: bool) -> bool:
        """Whether this nvcc embeds the asked code of a canonical arch (``sm_90``, ``sm_90a``)."""
        if arch.endswith("a"):
            return arch in self.specific
        number = arch.removeprefix("sm_")
        return (not sass or arch in self.real) and (not ptx or f"compute_{number}" in self.virtual)

    def describe(self) -> str:
        """The archs, for a message: ``sm_75, sm_80, ... (and sm_90a, ...)``."""
        text = ", ".join(self.real)
        return text + (f" (and {', '.join(self.specific)})" if self.specific else "")


def _output(nvcc: str, flag: str) -> str:
    try:
        proc = subprocess.run([nvcc, flag], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {nvcc} {flag}: {exc}") from None
    if proc.returncode != 0:
        raise ToolchainError(f"{nvcc} {flag} failed with code {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


_ALLOWED = re.compile(r"--gpu-architecture\b.*?Allowed values for this option:(?P<values>.*?)(?:\n\s*\n|\Z)",
                      re.DOTALL)


@functools.lru_cache(maxsize=4)
def _gpu_archs(nvcc: str, version_text: str) -> GpuArchs:
    del version_text  # part of the cache key: the same path may hold another nvcc later
    def by_number(names: list[str]) -> tuple[str, ...]:
        return tuple(sorted(set(names), key=lambda a: (int(re.sub(r"\D", "", a)), a)))

    real = re.findall(r"^sm_\d+$", _output(nvcc, "--list-gpu-code"), re.MULTILINE)
    virtual = re.findall(r"^compute_\d+$", _output(nvcc, "--list-gpu-arch"), re.MULTILINE)
    m = _ALLOWED.search(_output(nvcc, "--help"))
    specific = re.findall(r"'compute_(\d+a)'", m.group("values")) if m else []
    return GpuArchs(by_number(real), by_number(virtual), by_number([f"sm_{n}" for n in specific]))


def gpu_archs(tc: Toolchain) -> GpuArchs:
    """What ``tc`` compiles for, asked once per nvcc identity (path and ``--version`` text) and process."""
    return _gpu_archs(tc.nvcc, tc.version_text)
