"""The device code each arch adds to an object: the sizes of the entries of its ``.nv_fatbin`` section.

An object nvcc built holds one fatbin per translation unit in its ``.nv_fatbin`` ELF section: a 16-byte header
(magic ``0xBA55ED50``, version, header size, size of what follows) and entries, each a header (kind: 1 PTX,
2 machine code; its own header size; the padded size of its payload, compressed or not; the SM number at
offset 28; flags at offset 40, where ``0x100000`` marks an ``a`` arch and ``0x200000`` a family ``f`` arch)
then its payload. An entry's header and payload are what that arch adds to a binary (and, zipped, to a wheel).
The layout is NVIDIA's and undocumented; the tests check it against ``cuobjdump`` on objects of the real nvcc.
"""

from __future__ import annotations

import struct
from pathlib import Path

__all__ = ["device_code_bytes"]

_MAGIC = 0xBA55ED50
_SPECIFIC, _FAMILY = 0x100000, 0x200000


def device_code_bytes(obj: Path) -> dict[str, int]:
    """Bytes of machine code and PTX of each canonical arch (``sm_90a``, ``sm_100f``) in the fatbin of ``obj``;
    ``{}`` for a file that is missing, is no 64-bit little-endian ELF or holds no fatbin."""
    try:
        data = obj.read_bytes()
    except OSError:
        return {}
    section = _section(data, ".nv_fatbin")
    sizes: dict[str, int] = {}
    if section is None:
        return sizes
    pos = 0
    while pos + 16 <= len(section):
        magic, _version, header, size = struct.unpack_from("<IHHQ", section, pos)
        if magic != _MAGIC:
            break
        entry, end = pos + header, min(pos + header + size, len(section))
        while entry + 48 <= end:
            _kind, _ver, entry_header, padded = struct.unpack_from("<HHIQ", section, entry)
            (number,) = struct.unpack_from("<I", section, entry + 28)
            (flags,) = struct.unpack_from("<Q", section, entry + 40)
            suffix = "a" if flags & _SPECIFIC else "f" if flags & _FAMILY else ""
            arch = f"sm_{number}{suffix}"
            sizes[arch] = sizes.get(arch, 0) + entry_header + padded
            entry += entry_header + padded
        pos = end
    return sizes


def _section(data: bytes, name: str) -> bytes | None:
    """The contents of the section ``name`` of a 64-bit little-endian ELF file, or None."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or entsize < 64 or shoff + count * entsize > len(data) or names_index >= count:
        return None
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * entsize) for i in range(count)]
    names_offset = headers[names_index][4]
    wanted = name.encode() + b"\0"
    for name_at, _type, _flags, _addr, offset, size in headers:
        start = names_offset + name_at
        if data[start : start + len(wanted)] == wanted and offset + size <= len(data):
            return data[offset : offset + size]
    return None
