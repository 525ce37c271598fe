"""The compiler messages of a model-written candidate that may be kept: those about its own file.

Whatever a compile prints about another file may quote that file (the source line under an error, an assembler's
listing), and compile output reaches the cache, the report and the next prompt. So the output of a confined
compile keeps only messages whose first line names one of the candidate's own files, r1build's pre-included
declaration, the compile's own temporary files (the host assembly of the candidate), or no file at all (nvcc's
and ptxas's own lines, the resource report, the closing count); a message about any other file is left out with
its continuation lines, and one line at the end says how many were. The sandbox (:mod:`r1build.sandbox`) is what
keeps other files out of reach; this keeps a file that is in reach (a system header, say) out of the feedback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["own_messages"]

_LOCATED = re.compile(r"^(?P<file>[^\s(:][^(:]*?)(?:\(\d+\)|:\d+(?::\d+)?)?:\s")
"""The start of a message that names a file: ``file(12): error``, ``file:12:3: error``, ``file: In function``."""
_FILE_MENTION = re.compile(r"(?:In file included from|from)\s+(?P<file>\S+?)(?::\d+)*[:,]?$")
_TOOL = re.compile(r"^(?:ptxas|nvcc|nvlink|fatbinary|cicc|cudafe\+\+|gcc|g\+\+|cc1plus|ld|collect2)\b", re.I)
_CONTINUATION = re.compile(r"^(?:\s|\^|$)")
_TEMPORARY = re.compile(r"(?:/[^\s:]*/)?(?:cc\w+\.s|tmpxft_[\w.-]+)")
"""The compile's own temporary files (the host assembly, nvcc's intermediates): what they hold is the candidate's."""


def own_messages(output: str, own: Sequence[str]) -> str:
    """``output`` with every message about a file other than ``own`` (file names as the compile saw them) left
    out, and one closing line counting them where any were."""
    kept: list[str] = []
    dropped = 0
    keeping = True
    for line in output.split("\n"):
        if _CONTINUATION.match(line) and not _FILE_MENTION.search(line.strip()):
            if keeping:
                kept.append(line)
            continue
        keeping = _about_own(line, own)
        if keeping:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        kept.append(f"({dropped} compiler message(s) about other files left out)")
    return "\n".join(kept)


def _about_own(line: str, own: Sequence[str]) -> bool:
    """Whether a message's first line is about one of ``own`` or about no file."""
    mention = _FILE_MENTION.search(line.strip())
    if mention is not None:
        return _own_name(mention["file"], own)
    if _TOOL.match(line):
        return True
    located = _LOCATED.match(line)
    if located is None:
        return True  # nvcc's own sentences ("1 error detected in the compilation of ...")
    return _own_name(located["file"].strip(), own)


def _own_name(name: str, own: Sequence[str]) -> bool:
    name = name.strip().strip('"')
    return name in own or name.startswith(tuple(f"{o}(" for o in own)) or _TEMPORARY.fullmatch(name) is not None
