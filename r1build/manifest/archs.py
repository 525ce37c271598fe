"""GPU architectures: parsing the spellings users write, and what each target offers a kernel.

An arch is written as nvcc or CMake write it, and the spelling also says which code the build embeds for it
(what nvcc and CMake's ``CUDA_ARCHITECTURES`` mean by it):

* ``sm_90`` or ``9.0``: machine code (SASS); the kernel's highest such arch also gets PTX when the manifest's
  ``ptx`` is on (the default), so GPUs newer than every target can JIT-compile it;
* ``90-real``: machine code only, never PTX;
* ``90``: machine code and PTX (CMake's meaning);
* ``90-virtual`` or ``compute_90``: PTX only (nvcc's and CMake's virtual arch).

``a`` archs (``sm_90a``, ``90a``, ...: arch-specific, their code runs on that one compute capability) and CUDA
12.9's family archs (``sm_100f``, ``100f-real``, ...: family-portable, their code runs on every later member of the
family, ``sm_100f`` on 10.0 and 10.3 GPUs) take the same spellings. The canonical name of an arch is ``sm_90``
(``sm_90a``, ``sm_100f``): kernels are resolved, locked and cached per canonical arch, whatever code is embedded
for it.
Which archs exist is the installed nvcc's to say (:mod:`r1build.toolchain.archs`); this module only knows their
spellings and, for the prompts and the resource limits, the facts of the ones on record in :data:`ARCHS`.
"""

from __future__ import annotations

import re
from typing import Literal

from ..convert import record, replace

__all__ = [
    "ARCHS",
    "DEFAULT_ARCHS",
    "Arch",
    "ArchInfo",
    "ArchTarget",
    "Code",
    "arch_info",
    "family_clash",
    "parse_arch",
    "parse_target",
    "suffix_of",
]


class Arch(str):
    """A canonical arch name (``sm_90``, ``sm_90a``), parsed once where it enters: the manifest's archs when it
    loads (:func:`parse_target`), ``--arch`` on the command line. A str, so locks, keys and JSON write it as the name
    it is; :func:`parse_arch` and :func:`arch_info` take one as it is, without parsing it again."""

    __slots__ = ()


@record(frozen=True, kw_only=True)
class ArchInfo:
    """What a target architecture offers a kernel (representative part for SM count)."""

    arch: str
    """Canonical name, e.g. ``sm_90``."""
    capability: tuple[int, int]
    """Compute capability (major, minor)."""
    family: str
    """Marketing generation, e.g. Hopper."""
    example_gpu: str
    """A representative GPU of this arch, whose SM count is given."""
    sm_count: int
    """Streaming multiprocessors of the representative GPU."""
    smem_per_block: int
    """Largest shared memory one block may use, in bytes, after opting in above 48 KiB."""
    smem_per_sm: int
    """Shared memory per multiprocessor, in bytes."""
    regs_per_thread: int
    """Most registers one thread may use."""
    regs_per_sm: int
    """32-bit registers per multiprocessor."""
    max_threads_per_block: int
    """Most threads in one block."""
    tensor_cores: str
    """Tensor-core generation and how to reach it."""

    @property
    def number(self) -> str:
        """The bare number CMake and nvcc use, e.g. ``90`` or ``90a``."""
        return self.arch.removeprefix("sm_")


_KIB = 1024

ARCHS: dict[str, ArchInfo] = {
    info.arch: info
    for info in (
        ArchInfo(
            arch="sm_70",
            capability=(7, 0),
            family="Volta",
            example_gpu="Tesla V100",
            sm_count=80,
            smem_per_block=96 * _KIB,
            smem_per_sm=96 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="1st gen: wmma fp16",
        ),
        ArchInfo(
            arch="sm_72",
            capability=(7, 2),
            family="Volta",
            example_gpu="Jetson AGX Xavier",
            sm_count=8,
            smem_per_block=48 * _KIB,
            smem_per_sm=96 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="1st gen: wmma fp16, int8",
        ),
        ArchInfo(
            arch="sm_75",
            capability=(7, 5),
            family="Turing",
            example_gpu="Tesla T4",
            sm_count=40,
            smem_per_block=64 * _KIB,
            smem_per_sm=64 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="2nd gen: mma.sync / wmma fp16, int8",
        ),
        ArchInfo(
            arch="sm_80",
            capability=(8, 0),
            family="Ampere",
            example_gpu="A100",
            sm_count=108,
            smem_per_block=163 * _KIB,
            smem_per_sm=164 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="3rd gen: mma.sync / wmma fp16, bf16, tf32; cp.async",
        ),
        ArchInfo(
            arch="sm_86",
            capability=(8, 6),
            family="Ampere",
            example_gpu="RTX A6000",
            sm_count=84,
            smem_per_block=99 * _KIB,
            smem_per_sm=100 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="3rd gen: mma.sync / wmma fp16, bf16, tf32; cp.async",
        ),
        ArchInfo(
            arch="sm_87",
            capability=(8, 7),
            family="Ampere",
            example_gpu="Jetson AGX Orin",
            sm_count=16,
            smem_per_block=163 * _KIB,
            smem_per_sm=164 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="3rd gen: mma.sync / wmma fp16, bf16, tf32; cp.async",
        ),
        ArchInfo(
            arch="sm_89",
            capability=(8, 9),
            family="Ada",
            example_gpu="L40S",
            sm_count=142,
            smem_per_block=99 * _KIB,
            smem_per_sm=100 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="4th gen: mma.sync fp16, bf16, tf32, fp8",
        ),
        ArchInfo(
            arch="sm_90",
            capability=(9, 0),
            family="Hopper",
            example_gpu="H100 SXM / H200",
            sm_count=132,
            smem_per_block=227 * _KIB,
            smem_per_sm=228 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="4th gen: mma.sync; wgmma and setmaxnreg need sm_90a; TMA (cp.async.bulk.tensor)",
        ),
        ArchInfo(
            arch="sm_90a",
            capability=(9, 0),
            family="Hopper",
            example_gpu="H100 SXM / H200",
            sm_count=132,
            smem_per_block=227 * _KIB,
            smem_per_sm=228 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="4th gen: wgmma, setmaxnreg, TMA (cp.async.bulk.tensor)",
        ),
        ArchInfo(
            arch="sm_100",
            capability=(10, 0),
            family="Blackwell",
            example_gpu="B200",
            sm_count=148,
            smem_per_block=227 * _KIB,
            smem_per_sm=228 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="5th gen: tcgen05 needs sm_100a; mma.sync available",
        ),
        ArchInfo(
            arch="sm_100a",
            capability=(10, 0),
            family="Blackwell",
            example_gpu="B200",
            sm_count=148,
            smem_per_block=227 * _KIB,
            smem_per_sm=228 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="5th gen: tcgen05.mma with tensor memory",
        ),
        ArchInfo(
            arch="sm_103",
            capability=(10, 3),
            family="Blackwell",
            example_gpu="B300",
            sm_count=148,
            smem_per_block=227 * _KIB,
            smem_per_sm=228 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="5th gen: tcgen05 needs sm_103a",
        ),
        ArchInfo(
            arch="sm_110",
            capability=(11, 0),
            family="Blackwell",
            example_gpu="Jetson Thor",
            sm_count=20,
            smem_per_block=227 * _KIB,
            smem_per_sm=228 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="5th gen",
        ),
        ArchInfo(
            arch="sm_120",
            capability=(12, 0),
            family="Blackwell",
            example_gpu="RTX 5090",
            sm_count=170,
            smem_per_block=99 * _KIB,
            smem_per_sm=100 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="5th gen consumer: mma.sync fp16, bf16, fp8, fp4",
        ),
        ArchInfo(
            arch="sm_121",
            capability=(12, 1),
            family="Blackwell",
            example_gpu="DGX Spark (GB10)",
            sm_count=48,
            smem_per_block=99 * _KIB,
            smem_per_sm=100 * _KIB,
            regs_per_thread=255,
            regs_per_sm=65536,
            max_threads_per_block=1024,
            tensor_cores="5th gen consumer: mma.sync fp16, bf16, fp8, fp4",
        ),
    )
}

DEFAULT_ARCHS: tuple[str, ...] = ("sm_80", "sm_90")
"""Targets used when neither the manifest nor the command line names any."""

Code = Literal["default", "sass", "ptx", "sass+ptx"]
"""What a spelling asks to embed: ``default`` (``sm_90``, ``9.0``: machine code, PTX by the manifest's ``ptx``
rule), ``sass`` (``90-real``), ``ptx`` (``90-virtual``, ``compute_90``) or ``sass+ptx`` (``90``)."""

_SPELLINGS = "sm_90, 9.0, 90, 90-real, 90-virtual, compute_90 (and sm_90a, 90a-real, sm_100f, ...)"
_PATTERNS = (  # ASCII digits: int() also reads fullwidth and other Unicode digits; nvcc does not
    re.compile(r"^(?P<kind>sm_|compute_)(?P<num>[0-9]{2,3})(?P<suffix>[af]?)$"),
    re.compile(r"^(?P<num>[0-9]{2,3})(?P<suffix>[af]?)(?:-(?P<cmake>real|virtual))?$"),
    re.compile(r"^(?P<major>[0-9]{1,2})\.(?P<minor>[0-9])(?P<suffix>[af]?)$"),
)


@record(frozen=True)
class ArchTarget:
    """One target arch as written, with the code to embed for it."""

    arch: str
    """Canonical name, e.g. ``sm_90``."""
    code: Code
    """What the spelling asks for (``default`` until :func:`settle_codes` decides)."""
    key: tuple[str | int, ...] = ()
    """Where the manifest spells it (``("archs", 1)``), for messages; empty for an arch made in code."""

    @property
    def sass(self) -> bool:
        """Whether machine code of this arch is embedded."""
        return self.code in ("default", "sass", "sass+ptx")

    @property
    def ptx(self) -> bool:
        """Whether PTX of this arch is embedded."""
        return self.code in ("ptx", "sass+ptx")


def parse_target(text: str | int) -> ArchTarget:
    """The canonical arch and the code a spelling asks for; :class:`ValueError` naming the accepted spellings for
    text that spells no arch. Whether the installed nvcc knows the arch is checked where nvcc is used."""
    raw = str(text).strip().lower()
    for pattern in _PATTERNS:
        m = pattern.match(raw)
        if not m:
            continue
        groups = m.groupdict()
        num = groups["num"] if groups.get("num") else f"{groups['major']}{groups['minor']}"
        if int(num.lstrip("0") or "0") < 10:
            break
        code: Code
        if groups.get("kind") == "compute_" or groups.get("cmake") == "virtual":
            code = "ptx"
        elif groups.get("cmake") == "real":
            code = "sass"
        elif "kind" not in groups and "major" not in groups:  # CMake's bare number
            code = "sass+ptx"
        else:
            code = "default"
        return ArchTarget(Arch(f"sm_{num}{groups['suffix']}"), code)
    raise ValueError(f"{str(text)!r} is not a GPU architecture (spellings: {_SPELLINGS})")


def parse_arch(text: str | int) -> Arch:
    """Canonical ``sm_XY`` for any accepted spelling; :class:`ValueError` naming the spellings otherwise. An
    :class:`Arch` is canonical already: it comes back as it is."""
    if isinstance(text, Arch):
        return text
    return Arch(parse_target(text).arch)


def merge_targets(targets: list[ArchTarget]) -> list[ArchTarget]:
    """One target per canonical arch, in first-written order; two spellings of one arch embed what either asks
    for (``90-real`` and ``90-virtual`` make ``90``; ``sm_90`` beside an explicit spelling takes that one's)."""
    merged: dict[str, ArchTarget] = {}
    for target in targets:
        seen = merged.get(target.arch)
        if seen is None or seen.code == "default":
            merged[target.arch] = target if seen is None or target.code != "default" else seen
        elif target.code not in ("default", seen.code):
            merged[target.arch] = replace(seen, code="sass+ptx")
    return list(merged.values())


def family_clash(targets: list[ArchTarget]) -> tuple[ArchTarget, ArchTarget] | None:
    """A plain target and its family sibling (``sm_100`` and ``sm_100f``) among ``targets``, if both are: their
    code runs on the same GPUs, and nvcc refuses to build one object for both."""
    by_arch = {t.arch: t for t in targets}
    for target in targets:
        if suffix_of(target.arch) == "f" and target.arch[:-1] in by_arch:
            return by_arch[target.arch[:-1]], target
    return None


def settle_codes(targets: list[ArchTarget], ptx: bool) -> list[ArchTarget]:
    """Every target's code decided: ``default`` becomes machine code, and with ``ptx`` the highest arch of the
    list that is neither an ``a`` nor an ``f`` arch (whose PTX runs on no later major) also gets PTX when it was
    spelled ``sm_XY`` / ``X.Y`` (an explicit ``90-real`` keeps machine code only; an arch already carrying PTX
    needs no more)."""
    plain = [t for t in targets if suffix_of(t.arch) == ""]
    highest = max(plain, key=lambda t: arch_info(t.arch).capability, default=None)
    settled = []
    for target in targets:
        if target.code != "default":
            settled.append(target)
        elif ptx and target is highest:
            settled.append(replace(target, code="sass+ptx"))
        else:
            settled.append(replace(target, code="sass"))
    return settled


def suffix_of(arch: str) -> str:
    """``a`` for an arch-specific arch (``sm_90a``), ``f`` for a family arch (``sm_100f``), else ``""``."""
    return arch[-1] if arch[-1] in "af" else ""


def _capability(arch: str) -> tuple[int, int]:
    num = arch.removeprefix("sm_").rstrip("af")
    return int(num[:-1]), int(num[-1])


def arch_info(arch: str) -> ArchInfo:
    """Facts about an arch given in any accepted spelling. A family arch (``sm_100f``) has its plain sibling's;
    an arch nvcc knows but this table does not (``sm_88``) gets the facts of the nearest arch on record below it,
    with its own name and capability."""
    canonical = parse_arch(arch)
    if canonical in ARCHS:
        return ARCHS[canonical]
    if suffix_of(canonical) == "f" and canonical[:-1] in ARCHS:  # a family arch: the GPU of its own capability
        sibling = ARCHS[canonical[:-1]]
        return replace(sibling, arch=canonical, tensor_cores=f"{sibling.tensor_cores}; family-portable code")
    capability = _capability(canonical)
    lower = [info for info in ARCHS.values() if suffix_of(info.arch) == "" and info.capability <= capability]
    basis = max(lower, key=lambda info: info.capability) if lower else ARCHS["sm_70"]
    return replace(
        basis,
        arch=canonical,
        capability=capability,
        example_gpu=f"no GPU on record (the facts of {basis.arch}'s {basis.example_gpu})",
    )


def arch_for_capability(major: int, minor: int) -> str | None:
    """The plain (non ``a``) arch of a compute capability, if on record."""
    canonical = f"sm_{major}{minor}"
    return canonical if canonical in ARCHS else None
