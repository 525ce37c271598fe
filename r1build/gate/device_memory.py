"""Static memory of a candidate: the sizes of its ``__device__`` variables (and host statics), read from the
symbols of its host object and of the device code embedded in it.

nvcc's resource report cannot be trusted for this: ptxas prints the bytes of global memory a module reserves as
a 32-bit number, so a 4 GiB ``__device__`` array reads as "0 bytes gmem" (4 GiB + 4 KiB as "4096 bytes gmem"),
and the section headers of the device ELF wrap the same way. The symbol tables hold 64-bit sizes:

* the device ELF (a cubin per arch, embedded uncompressed in the host object's ``.nv_fatbin`` section): every
  ``__device__`` variable, including function-scope ``static __device__`` ones, as an object symbol of a
  ``.nv.global`` section;
* the host object: the host shadow nvcc emits for every namespace-scope ``__device__`` variable (same size, in
  ``.bss``), and the candidate's own host statics; this also covers a cubin nvcc stored compressed.

Both ELF files are parsed here in Python (no tool runs on the candidate's object).
"""

from __future__ import annotations

import re
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

from ..convert import record
from ..errors import ToolchainError
from .symbols import Read, UnreadableObject, reader

__all__ = ["STATIC_MEMORY_LIMIT", "StaticVariable", "static_memory_problem", "static_variables"]

STATIC_MEMORY_LIMIT = 1 << 30
"""Most bytes of static memory (``__device__`` variables of one arch's device code, or host statics) a candidate
may reserve: 1 GiB. Its library is loaded into processes that also hold the caller's buffers, the device memory is
reserved when the module loads whether or not the kernel runs, and a host shadow past 2 GiB does not even link
into a shared library (a relocation overflow); a kernel works in the buffers it is given."""

_EM_CUDA = 190
_SHT_SYMTAB = 2
_STT_OBJECT = 1
_DEVICE_DATA = re.compile(r"\.nv\.global(?:\..*)?")
_HOST_DATA = re.compile(r"\.(?:bss|data|rodata|lbss|ldata|lrodata)(?:\..*)?")


@record(frozen=True)
class StaticVariable:
    """One variable of static storage in a candidate's objects."""

    name: str
    """Its symbol (mangled)."""
    size: int
    """Bytes, from the symbol table."""
    device: bool
    """In the device code (else in the host object)."""


def _sections(data: bytes, base: int) -> list[tuple[str, int, int, int, int]] | None:
    """(name, type, offset, size, link) of each section of the ELF64 at ``base``; None where it is not one."""
    try:
        shoff = struct.unpack_from("<Q", data, base + 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, base + 0x3A)
        raw = []
        for k in range(shnum):
            name, kind, _flags, _addr, offset, size, link = struct.unpack_from(
                "<IIQQQQI", data, base + shoff + k * shentsize
            )
            raw.append((name, kind, offset, size, link))
        names = raw[shstrndx]
    except (struct.error, IndexError):
        return None
    out = []
    for name, kind, offset, size, link in raw:
        start = base + names[2] + name
        end = data.find(b"\0", start)
        out.append((data[start:end].decode("latin-1"), kind, offset, size, link))
    return out


def _objects(data: bytes, base: int, wanted: re.Pattern[str]) -> Iterator[tuple[str, int]]:
    """(name, size) of every object symbol of the ELF64 at ``base`` in a section whose name ``wanted`` matches."""
    sections = _sections(data, base)
    if sections is None or data[base + 4 : base + 6] != b"\x02\x01":  # ELF64, little-endian
        return
    for _name, kind, offset, size, link in sections:
        if kind != _SHT_SYMTAB or link >= len(sections):
            continue
        strings = base + sections[link][2]
        for at in range(base + offset, base + offset + size - 23, 24):
            name, info, _other, shndx, _value, sym_size = struct.unpack_from("<IBBHQQ", data, at)
            if info & 0xF != _STT_OBJECT or not 0 < shndx < len(sections):
                continue
            if wanted.fullmatch(sections[shndx][0]):
                end = data.find(b"\0", strings + name)
                yield data[strings + name : end].decode("latin-1"), sym_size


def static_variables(obj: Path) -> tuple[list[StaticVariable], list[StaticVariable]]:
    """The host object's static variables, and those of its largest cubin (the arch that reserves the most)."""
    data = obj.read_bytes()
    if data[:4] != b"\x7fELF":
        return [], []
    host = [StaticVariable(n, s, device=False) for n, s in _objects(data, 0, _HOST_DATA)]
    cubins: list[list[StaticVariable]] = [[]]
    fatbin = next((s for s in _sections(data, 0) or [] if s[0] == ".nv_fatbin"), None)
    if fatbin is not None:
        blob = data[fatbin[2] : fatbin[2] + fatbin[3]]
        for match in re.finditer(rb"\x7fELF", blob):
            base = match.start()
            if len(blob) > base + 20 and struct.unpack_from("<H", blob, base + 18)[0] == _EM_CUDA:
                cubins.append([StaticVariable(n, s, device=True) for n, s in _objects(blob, base, _DEVICE_DATA)])
    return host, max(cubins, key=lambda vs: sum(v.size for v in vs))


def _readable(name: str, read: Read) -> str:
    cxxfilt = shutil.which("c++filt")
    if cxxfilt is None:
        return name
    try:
        done = read([cxxfilt, name])
    except (UnreadableObject, ToolchainError):
        return name
    # a device symbol of an anonymous namespace carries the file's hash: name it as the source does
    return re.sub(r"^_INTERNAL_[0-9a-f]+_\w*?::", "", done.strip()) or name


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n} bytes ({n / (1 << shift):.3g} {unit})"
    return f"{n} bytes"


def static_memory_problem(obj: Path, limit: int = STATIC_MEMORY_LIMIT, read: Read | None = None) -> str | None:
    """Why the object reserves too much static memory, naming its largest variable (demangled by ``c++filt``
    through ``read``, :func:`.symbols.reader`: the name is the candidate's, hostile input to binutils' parser;
    None: as this process, for the user's own object); None when within ``limit``."""
    read = read if read is not None else reader(obj)
    for variables in reversed(static_variables(obj)):  # the device code first: it names function-scope statics
        total = sum(v.size for v in variables)
        if total <= limit:
            continue
        big = max(variables, key=lambda v: v.size)
        where = (
            "__device__ variables"
            if big.device
            else "static variables of the host object (a __device__ variable's host shadow is one)"
        )
        return (
            f"reserves too much static memory: {_readable(big.name, read)} is {_size(big.size)} ({where}: "
            f"{_size(total)} in all), over the limit of {_size(limit)}. A kernel works in the buffers the call is "
            "given: keep __device__ arrays to a little state of fixed size (nvcc's resource report wraps such "
            "sizes at 4 GiB; these come from the symbol table)."
        )
    return None
