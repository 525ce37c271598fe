"""The environment of a process that runs or compiles model-written code: an allowlist of what CUDA, the
compiler, Python and cupy need, never anything named like a credential."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .policy import Confinement

__all__ = ["confined_environment", "scrubbed_environment"]

_KEEP = frozenset(
    {
        "PATH",
        "LD_LIBRARY_PATH",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "PYTHONHOME",
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_MODULE_LOADING",
        "CUDA_DEVICE_ORDER",
        "CUDA_VISIBLE_DEVICES",
        "R1BUILD_NVCC",
        "CUDACXX",
        # Keep NVLink multicast off everywhere the host asks for it (shared machines).
        "NCCL_NVLS_ENABLE",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST",
        "NVSHMEM_DISABLE_NVLS",
    }
)
_KEEP_PREFIXES = ("CUPY_",)
_COMPILE_KEEP = frozenset({"PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"})
"""What a compile or tool (a confinement with neither Python nor the GPU) keeps of the host's environment: nvcc
finds its host compiler on ``PATH``, and messages stay in the host's language. Nothing a GPU or Python process
needs (``CUDA_*``, ``CUPY_*``, ``PYTHONHOME``, ``R1BUILD_NVCC``): a compile can read its own environment
(``/proc/self/environ``), so what it is not given it cannot put into an object."""
_SET_HERE = frozenset({"HOME", "TMPDIR", "USER", "LOGNAME"})
CONFINED_USER = "r1build"
"""The user name a confined process is told (``USER``, ``LOGNAME``)."""
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)


def scrubbed_environment(
    base: Mapping[str, str], *, home: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment for a process that runs candidate code: only what CUDA, Python and cupy need (an
    allowlist), never anything that looks like a credential, ``HOME`` and ``TMPDIR`` pointed at ``home``, the user
    named :data:`CONFINED_USER`."""
    env = {k: v for k, v in base.items() if (k in _KEEP or k.startswith(_KEEP_PREFIXES)) and not _SECRET.search(k)}
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home)
    # a user name for getpass.getuser() (torch's compile caches ask for one): the sandbox has no passwd entry for
    # this uid ("getpwuid(): uid not found"), and the real name is none of the confined code's business
    env["USER"] = env["LOGNAME"] = CONFINED_USER
    env["CUPY_CACHE_DIR"] = str(home / "cupy")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    for k, v in (extra or {}).items():
        if not _SECRET.search(k):
            env[k] = v
    return env


def confined_environment(base: Mapping[str, str], confinement: Confinement) -> dict[str, str]:
    """:func:`scrubbed_environment` with the confined process's working directory as its home (for compiles and
    tools; a worker's environment is scrubbed where it is made, with a home of its own); a compile or tool (no
    Python, no GPU) keeps only :data:`_COMPILE_KEEP` of it."""
    env = scrubbed_environment(base, home=confinement.workdir)
    env["LANG"] = base.get("LANG", "C.UTF-8")
    if not (confinement.gpu or confinement.python):
        env = {k: v for k, v in env.items() if k in _COMPILE_KEEP or k in _SET_HERE}
    return env
