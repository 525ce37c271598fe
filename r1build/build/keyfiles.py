"""Private keys never leave in a distribution: the sdist and the wheel are read back once written, and every
member that holds a PEM private key is taken out of them.

A key is told by its content, whatever its name: a line that begins ``-----BEGIN ... PRIVATE KEY-----``
(PKCS#8 ``PRIVATE KEY``, ``ENCRYPTED PRIVATE KEY``, ``RSA`` / ``EC`` / ``DSA`` / ``OPENSSH PRIVATE KEY``, and
``PGP PRIVATE KEY BLOCK``), and by the name ``r1build key generate`` writes by default. Members over
:data:`SCAN_LIMIT` are not read (no key file is that large; a wheel's compiled kernels are). Where nothing is
found the archive is left as scikit-build-core wrote it; otherwise it is written again without those members, as
deterministically as before: the same member headers and, for an sdist, the gzip header's date and name; for a
wheel, the same zip entries, with the ``RECORD`` lines of the members taken out removed.

Imported by every wheel build (the warm one too): the standard library only, and nothing read at import.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["PRIVATE_KEY", "SCAN_LIMIT", "holds_private_key", "strip_sdist", "strip_wheel", "warn_left_out"]

PRIVATE_KEY = re.compile(rb"(?m)^-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
"""The first line of a PEM private key, of any kind."""
SCAN_LIMIT = 1 << 20
"""Members larger than this (bytes) are not read for keys."""
_KEY_NAMES = frozenset({"r1build-signing-key.pem"})
"""File names that are r1build's private keys whatever they hold (:data:`r1build.trust.signing.DEFAULT_KEY_NAME`)."""


def holds_private_key(name: str, data: bytes) -> bool:
    """Whether the file ``name`` (a path in an archive) with the bytes ``data`` is a private key."""
    return name.rpartition("/")[2] in _KEY_NAMES or PRIVATE_KEY.search(data) is not None


def strip_sdist(path: Path) -> list[str]:
    """Take every private key out of the sdist ``path`` (a ``.tar.gz``); the names taken out, relative to the
    sdist's top folder."""
    import gzip
    import tarfile

    with tarfile.open(path, "r:gz") as tar:
        found = []
        for member in tar.getmembers():
            data = tar.extractfile(member) if member.isfile() and member.size <= SCAN_LIMIT else None
            if data is not None and holds_private_key(member.name, data.read()):
                found.append(member.name)
        if not found:
            return []
        with path.open("rb") as fh:
            mtime = int.from_bytes(fh.read(8)[4:8], "little")  # the gzip header's MTIME
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with (
                tmp.open("wb") as raw,
                gzip.GzipFile(filename=str(path), mode="wb", compresslevel=9, fileobj=raw, mtime=mtime) as gz,
                tarfile.TarFile(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as out,
            ):
                for member in tar.getmembers():
                    if member.name not in found:
                        out.addfile(member, tar.extractfile(member) if member.isfile() else None)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    return [name.partition("/")[2] or name for name in found]


def strip_wheel(path: Path) -> list[str]:
    """Take every private key out of the wheel ``path``, and its line out of the wheel's ``RECORD``; the names
    taken out."""
    import zipfile

    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        found = {
            i.filename
            for i in infos
            if not i.is_dir() and i.file_size <= SCAN_LIMIT and holds_private_key(i.filename, zf.read(i))
        }
        if not found:
            return []
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with zipfile.ZipFile(tmp, "w") as out:
                for info in infos:
                    if info.filename in found:
                        continue
                    data = zf.read(info)
                    if info.filename.endswith(".dist-info/RECORD"):
                        lines = data.decode("utf-8").splitlines(keepends=True)
                        data = "".join(x for x in lines if x.partition(",")[0] not in found).encode("utf-8")
                    out.writestr(info, data)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    return sorted(found)


def warn_left_out(names: list[str], what: str) -> None:
    """Warn of each private key taken out of the ``what`` (:mod:`r1build.build.keyfiles`)."""
    if not names:
        return
    from ..events import Note, emit
    from .boundary import frontend_boundary

    with frontend_boundary():
        for name in names:
            emit(
                Note(
                    "warning",
                    f"{name} holds a private key: left out of the {what}; keep keys out of the project folder "
                    "(and out of the repository)",
                )
            )
