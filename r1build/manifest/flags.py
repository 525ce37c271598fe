"""Which ``nvcc-flags`` a manifest may give: flags that shape code generation, not what r1build decides.

r1build chooses the archs (one ``-gencode`` per target arch, from ``archs``), the output files, the compile
mode and the compiler; flags that set any of those would make the gate judge a different compile than the
build runs, or break both. Each flag is one token without whitespace, quotes or CMake/shell metacharacters,
in the ``-flag=value`` form where it takes a value.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from ..digests import path_digest

__all__ = ["defined_macro", "flag_problem", "include_digest", "include_flag", "include_folders", "rooted_flags"]

_RESERVED_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        r"-arch|--gpu-architecture|-gencode|--generate-code|-code|--gpu-code|-arch-ls|--list-gpu-arch"
        r"|-code-ls|--list-gpu-code",
        "selects the GPU archs, which r1build sets from `archs` (one -gencode per target arch)",
    ),
    (
        r"-o|--output-file|-odir|--output-directory|-MF|--dependency-output|-MD|-MMD|-MP|-MT|--generate-dependencies"
        r"-with-compile|--generate-nonsystem-dependencies-with-compile|--dependency-target-name|-keep|--keep|-keep-dir"
        r"|--keep-dir|-save-temps|--save-temps|-time|--time|-fdevice-time-trace|--fdevice-time-trace",
        "names output or scratch files, which r1build chooses",
    ),
    (
        r"-c|--compile|-cubin|--cubin|-ptx|--ptx|-fatbin|--fatbin|-E|--preprocess|-M|--generate-dependencies"
        r"|-MM|-lib|--lib|-shared|--shared|-link|--link|-run|--run|-dlink|--device-link|-dryrun|--dryrun"
        r"|-x|--x|-V|--version|-h|--help|-optix-ir|--optix-ir|-lto-ir|-dc|--device-c|-dw|--device-w"
        r"|-rdc|--relocatable-device-code|-dlto|--dlink-time-opt|-ewp|--extensible-whole-program|-gen-opt-lto"
        r"|--gen-opt-lto",
        "changes what nvcc produces (r1build compiles each variant to an object and links them itself)",
    ),
    (
        r"-ccbin|--compiler-bindir|-allow-unsupported-compiler|--allow-unsupported-compiler",
        "changes the host compiler, which must be the one the build uses",
    ),
    (
        r"-optf|--options-file|-include|--pre-include",
        "reads flags or code from a file the manifest does not name as a candidate",
    ),
)
_RESERVED: tuple[tuple[frozenset[str], str], ...] = tuple(
    (frozenset(pattern.split("|")), why) for pattern, why in _RESERVED_PATTERNS
)
"""The names above, each alternation a set (membership, not a regex to compile: the first run after an edit
validates the flags)."""
_TOKEN = re.compile(r"-[A-Za-z0-9_+\-=.,:/@%]*")


def flag_problem(flag: str) -> str | None:
    """Why ``flag`` cannot be one of the manifest's ``nvcc-flags``, or None."""
    if not _TOKEN.fullmatch(flag) or flag in ("-", "--"):
        if not flag.startswith("-"):
            return f"{flag!r} is not a flag (give flags that take a value as one token: -maxrregcount=64, -Xptxas=-O3)"
        return f"{flag!r} holds whitespace, quotes or other characters a flag cannot have"
    name = flag.split("=", 1)[0]
    for names, why in _RESERVED:
        if name in names:
            return f"{name} {why}"
    if re.fullmatch(r"-(?:arch|code|gencode)\S*|--gpu-(?:architecture|code)\S*|--generate-code\S*", name):
        return f"{name} selects the GPU archs, which r1build sets from `archs`"
    return None


def defined_macro(flag: str) -> str | None:
    """The macro a ``-DNAME[=value]`` / ``-UNAME`` / ``--define-macro=NAME`` / ``--undefine-macro=NAME`` flag
    sets or removes, or None for other flags."""
    m = re.fullmatch(r"(?:-D|-U|--define-macro=|--undefine-macro=)([A-Za-z_][A-Za-z0-9_]*)(?:=.*)?", flag)
    return m.group(1) if m else None


_INCLUDE = re.compile(r"(-I=?|--include-path=|-isystem=|--system-include=)(.+)")


def include_flag(flag: str) -> tuple[str, list[str]] | None:
    """``(option, folders)`` of an include search path flag (``-Iinc``, ``--include-path=a,b``,
    ``-isystem=third_party``), or None for other flags."""
    m = _INCLUDE.fullmatch(flag)
    if m is None:
        return None
    return m.group(1), [part for part in m.group(2).split(",") if part]


def include_folders(flags: Sequence[str]) -> tuple[Path, ...]:
    """The absolute include search folders of ``flags`` (as :func:`rooted_flags` gives them), in order, once
    each: what a confined compile of a candidate may read besides the toolkit and the system."""
    found: dict[Path, None] = {}
    for flag in flags:
        parsed = include_flag(flag)
        for folder in parsed[1] if parsed is not None else ():
            if Path(folder).is_absolute():
                found.setdefault(Path(folder), None)
    return tuple(found)


def rooted_flags(flags: Sequence[str], root: Path) -> list[str]:
    """``flags`` as nvcc is given them: each relative include search path made absolute under ``root`` (the
    manifest's folder). The manifest's own flags stay as written (they are part of the decision key, which must
    not depend on where the project is checked out); a compile, which runs in a scratch folder, needs them
    rooted, or ``-Iinclude`` finds nothing."""
    out = []
    for flag in flags:
        found = include_flag(flag)
        if found is None:
            out.append(flag)
            continue
        option, folders = found
        out.append(option + ",".join(str(root / d) if not Path(d).is_absolute() else d for d in folders))
    return out


def include_digest(flags: Sequence[str], root: Path) -> str | None:
    """:func:`_include_digest`, once per process for the same flags and folder (a search keys hundreds of
    compiles; the headers are read once)."""
    return _include_digest(tuple(flags), root)


@functools.lru_cache(maxsize=16)
def _include_digest(flags: tuple[str, ...], root: Path) -> str | None:
    """sha256 of what the relative include folders of ``flags`` hold (names and contents, recursively, in flag
    order; an absent folder counts as absent; not the manifest's folder itself or one above it), or None where no
    flag names one. The same headers give the same
    digest in any checkout, so a compile's verdict can be keyed on them: a header edited, added or removed is a
    new compile, and a verdict found in one checkout holds in another only where the headers are the same."""
    h = hashlib.sha256()
    seen = False
    real_root = root.resolve()
    for flag in flags:
        for folder in (include_flag(flag) or ("", []))[1]:
            path = (root / folder).resolve()
            if Path(folder).is_absolute() or path == real_root or path in real_root.parents:
                continue  # a system folder, or the project itself (its build outputs change every build)
            seen = True
            h.update(f"{folder}\0{path_digest(root / folder) or '-'}\n".encode())
    return h.hexdigest() if seen else None
