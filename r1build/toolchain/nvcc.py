"""The CUDA toolchain: finding nvcc and identifying it by its ``--version`` output.

``nvcc --version`` costs a process (tens of milliseconds, more through a wrapper script), so its output is
remembered by the binary's identity: the path found, the file it resolves to, and that file's size, modification
time and inode. A file in the cache directory (``nvcc-versions.json``) keeps the last few, each with the sha256
of its text, checked on read; a changed, moved or replaced nvcc has another identity and runs again. A wrapper
script is identified by itself: after replacing the compiler a wrapper runs, touch the wrapper (or delete the
file) so the next run asks it again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from pathlib import Path

from ..convert import record
from ..errors import NvccSettingError, ToolchainError
from ..filemode import folder_modes, private_folder, write_atomically
from ..settings import env_settings
from .lookup import NvccPlace, first_nvcc, nvcc_identity, nvcc_places

__all__ = [
    "MEMO_NAME",
    "GpuArchs",
    "Toolchain",
    "find_nvcc",
    "gpu_archs",
    "gpu_archs_from_json",
    "nvcc_identity",
    "nvcc_lookup",
    "toolchain",
    "version_digest",
]

_RELEASE = re.compile(r"release \d+\.\d+")
MEMO_NAME = "nvcc-versions.json"
"""The file in the cache directory that remembers ``nvcc --version`` by the binary's identity."""
_MEMO_KEEP = 8


@record(frozen=True)
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
        return m.group(1) if m else "nvcc-" + hashlib.sha256(self.version_text.encode()).hexdigest()[:16]

    @property
    def release(self) -> str:
        """``13.0`` style release number, or ``unknown``."""
        m = re.search(r"release (\d+\.\d+)", self.version_text)
        return m.group(1) if m else "unknown"


def find_nvcc() -> str:
    """nvcc from ``R1BUILD_NVCC``, ``CUDACXX``, ``CUDA_HOME``/``CUDA_PATH`` or ``PATH``."""
    found = first_nvcc(nvcc_lookup())
    if not found:
        raise ToolchainError("nvcc not found: put it on PATH or set CUDACXX / CUDA_HOME / R1BUILD_NVCC")
    return found


def nvcc_lookup() -> list[NvccPlace]:
    """The places :func:`find_nvcc` looks, in order (what a warm-build stamp keeps, to look again)."""
    given = env_settings().nvcc or os.environ.get("CUDACXX")
    return nvcc_places(given, [os.environ.get(var) for var in ("CUDA_HOME", "CUDA_PATH")])


def _memo_file() -> Path:
    from ..cache import default_cache_dir

    return default_cache_dir() / MEMO_NAME


def _remembered(identity: str) -> str | None:
    try:
        entry = json.loads(_memo_file().read_text(encoding="utf-8")).get(identity)
        text, digest = entry["text"], entry["sha256"]
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    if not isinstance(text, str) or hashlib.sha256(text.encode()).hexdigest() != digest:
        return None
    return text


def _remember(identity: str, text: str) -> None:
    """Keep ``text`` for ``identity`` (the newest few identities); silently nothing where it cannot be written."""
    path = _memo_file()
    try:
        memo = json.loads(path.read_text(encoding="utf-8"))
        memo = memo if isinstance(memo, dict) else {}
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested deeper than the parser goes
        memo = {}
    memo.pop(identity, None)
    memo[identity] = {"text": text, "sha256": hashlib.sha256(text.encode()).hexdigest()}
    memo = dict(list(memo.items())[-_MEMO_KEEP:])
    with contextlib.suppress(OSError):
        private_folder(path.parent)  # the cache folder, private when this makes it first
        write_atomically(path, json.dumps(memo, indent=1) + "\n", mode=folder_modes(path.parent)[1])


def _toolchain(nvcc: str) -> Toolchain:
    """The toolchain of ``nvcc``, known in this process by its identity (a replaced binary is asked again)."""
    return _identified(nvcc, nvcc_identity(nvcc))


@functools.lru_cache(maxsize=8)
def _identified(nvcc: str, identity: str | None) -> Toolchain:
    text = _remembered(identity) if identity is not None else None
    if text is not None:
        return Toolchain(nvcc=nvcc, version_text=text)
    import subprocess  # here: a remembered version (the CLI's warm path) never needs the modules

    from .runner import run_process

    try:
        proc = run_process([nvcc, "--version"], timeout_s=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {nvcc} --version: {exc}") from None
    if proc.returncode != 0:
        raise ToolchainError(f"{nvcc} --version failed with code {proc.returncode}: {proc.stderr.strip()}")
    text = proc.stdout.strip()
    if not _RELEASE.search(text):
        shown = text.splitlines()[0][:80] if text else "nothing"
        raise ToolchainError(
            f"{nvcc} is not nvcc: its --version printed {shown!r}, not 'Cuda compilation tools, release X.Y'"
        )
    if identity is not None and identity == nvcc_identity(nvcc):  # unchanged while it ran
        _remember(identity, text)
    return Toolchain(nvcc=nvcc, version_text=text)


def version_digest(nvcc: str) -> str | None:
    """sha256 of ``nvcc --version``'s text (remembered by the binary's identity); None when it cannot answer."""
    try:
        return hashlib.sha256(_toolchain(nvcc).version_text.encode()).hexdigest()
    except ToolchainError:
        return None


def toolchain() -> Toolchain:
    """The toolchain in use (cached per process, and remembered by the binary's identity across processes).
    :class:`~r1build.errors.NvccSettingError` when the nvcc that ``R1BUILD_NVCC`` or ``CUDACXX`` names cannot
    answer ``--version`` as nvcc does."""
    nvcc = find_nvcc()
    try:
        return _toolchain(nvcc)
    except ToolchainError as exc:
        variable = "R1BUILD_NVCC" if env_settings().nvcc else "CUDACXX" if os.environ.get("CUDACXX") else None
        if variable is None:
            raise
        raise NvccSettingError(f"{variable}={nvcc} names no usable nvcc: {exc}") from None


@record(frozen=True)
class GpuArchs:
    """The archs an nvcc can compile for, as it lists them."""

    real: tuple[str, ...]
    """Machine-code archs (``nvcc --list-gpu-code``), e.g. ``sm_90``, by number."""
    virtual: tuple[str, ...]
    """PTX archs (``nvcc --list-gpu-arch``), e.g. ``compute_90``."""
    specific: tuple[str, ...]
    """Arch-specific ``a`` archs (``sm_90a``): those ``nvcc --help`` allows for ``--gpu-architecture``."""
    family: tuple[str, ...]
    """Family ``f`` archs (``sm_100f``, CUDA 12.9 on): those ``nvcc --help`` allows for ``--gpu-architecture``."""

    def supports(self, arch: str, *, sass: bool, ptx: bool) -> bool:
        """Whether this nvcc embeds the asked code of a canonical arch (``sm_90``, ``sm_90a``, ``sm_100f``)."""
        if arch.endswith("a"):
            return arch in self.specific
        if arch.endswith("f"):
            return arch in self.family
        number = arch.removeprefix("sm_")
        return (not sass or arch in self.real) and (not ptx or f"compute_{number}" in self.virtual)

    def describe(self) -> str:
        """The archs, for a message: ``sm_75, sm_80, ... (and sm_90a, ..., sm_100f, ...)``."""
        more = [*self.specific, *self.family]
        return ", ".join(self.real) + (f" (and {', '.join(more)})" if more else "")


def _output(nvcc: str, flag: str) -> str:
    import subprocess

    from .runner import run_process

    try:
        proc = run_process([nvcc, flag], timeout_s=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {nvcc} {flag}: {exc}") from None
    if proc.returncode != 0:
        raise ToolchainError(f"{nvcc} {flag} failed with code {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


_ALLOWED = re.compile(r"--gpu-architecture\b.*?Allowed values for this option:(?P<values>.*?)(?:\n\s*\n|\Z)", re.DOTALL)


@functools.lru_cache(maxsize=4)
def _gpu_archs(nvcc: str, version_text: str) -> GpuArchs:
    del version_text  # part of the cache key: the same path may hold another nvcc later

    def by_number(names: list[str]) -> tuple[str, ...]:
        return tuple(sorted(set(names), key=lambda a: (int(re.sub(r"\D", "", a)), a)))

    real = re.findall(r"^sm_\d+$", _output(nvcc, "--list-gpu-code"), re.MULTILINE)
    virtual = re.findall(r"^compute_\d+$", _output(nvcc, "--list-gpu-arch"), re.MULTILINE)
    m = _ALLOWED.search(_output(nvcc, "--help"))
    values = m.group("values") if m else ""
    specific, family = ([f"sm_{n}" for n in re.findall(rf"'compute_(\d+{s})'", values)] for s in "af")
    return GpuArchs(by_number(real), by_number(virtual), by_number(specific), by_number(family))


def gpu_archs(tc: Toolchain) -> GpuArchs:
    """What ``tc`` compiles for, asked once per nvcc identity (path and ``--version`` text) and process."""
    return _gpu_archs(tc.nvcc, tc.version_text)


def gpu_archs_from_json(doc: object) -> GpuArchs | None:
    """A :class:`GpuArchs` stored as JSON (its four lists), or None for anything else (one stored before family
    archs were read, too: nvcc is asked again)."""
    if not isinstance(doc, dict):
        return None
    lists = [doc.get(name) for name in ("real", "virtual", "specific", "family")]
    if not all(isinstance(v, list) and all(isinstance(a, str) for a in v) for v in lists):
        return None
    real, virtual, specific, family = (tuple(v) for v in lists if isinstance(v, list))
    return GpuArchs(real, virtual, specific, family)
