"""Getting a candidate out of an R1 answer, and telling candidates apart.

Real R1 answers are prose around one or more fenced blocks: drafts, fragments, a usage example, and the final
answer last. Without a reasoning parser on the server, the whole chain of thought arrives in the content before
``</think>``, drafts included. So extraction:

1. drops everything up to the last ``</think>`` (an unclosed ``<think>`` means the answer is thinking only);
2. collects fenced blocks (backticks or tildes, any indentation, any info string; an unclosed last block counts);
3. takes CUDA / C++ blocks, and CUDA source held in a Python string (PyTorch ``load_inline`` answers);
4. picks the *last* block that defines the exported function, else the last block with a ``__global__`` kernel,
   else the last CUDA-looking block (the gate then says what is missing).

Candidates are compared by a normalized source digest (comments and whitespace runs removed, string literals
kept), so the same kernel in different layouts is evaluated once.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..keys import digest_bytes

__all__ = [
    "MAX_VARIANTS",
    "Block",
    "Extraction",
    "complete_part",
    "extract_source",
    "fenced_blocks",
    "normalized_digest",
    "strip_think",
    "tunable_variants",
]

MAX_VARIANTS = 8
"""Most tunable value sets tried for one generated source."""

_CUDA_LANGS = frozenset({"cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp", "nvcc"})
_PY_LANGS = frozenset({"python", "py", "python3"})
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_PY_STRING = re.compile(r"(?P<q>\"\"\"|''')(?P<body>.*?)(?P=q)", re.S)
_TUNABLE_DECL = re.compile(r"//\s*@tunable\s+(?P<name>[A-Za-z_]\w*)\s*[:=]\s*(?P<values>[^\n]+)")


@dataclass(frozen=True)
class Block:
    """One fenced block of an answer."""

    lang: str
    """First word of the info string, lower case ("" when none)."""
    code: str
    """The block's text, its fence indentation removed."""
    closed: bool
    """Whether a closing fence was found."""


@dataclass(frozen=True)
class Extraction:
    """What extraction found in one answer."""

    source: str | None
    """The chosen translation unit, or None."""
    reason: str
    """Why nothing was chosen (``no_code``, ``thinking_only``), or how the source was found."""
    blocks: int
    """Fenced blocks in the answer (after the thinking)."""


def strip_think(content: str) -> str:
    """The answer part of ``content``: after the last ``</think>``; empty when only an open ``<think>`` is
    there (the answer was all thinking)."""
    end = content.rfind("</think>")
    if end >= 0:
        return content[end + len("</think>") :]
    if content.lstrip().startswith("<think>"):
        return ""
    return content


def fenced_blocks(text: str) -> list[Block]:
    """Fenced code blocks in order; an unclosed last block runs to the end of the text."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        info = m.group("info").strip()
        lang = info.split()[0].lower().lstrip("{.").rstrip("}") if info else ""
        body: list[str] = []
        j = i + 1
        closed = False
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped and stripped[0] == fence[0] and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                break
            line = lines[j]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            j += 1
        blocks.append(Block(lang, "\n".join(body).strip("\n") + "\n", closed))
        i = j + 1
    return blocks


def complete_part(content: str, name: str) -> str | None:
    """Of an answer cut off mid-stream, the part up to the last closing fence, when a closed block in it
    defines the exported function ``name`` (complete code); None otherwise."""
    lines = content.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        if not _FENCE.match(lines[i].rstrip("\r\n")):
            continue
        prefix = "".join(lines[: i + 1])
        blocks = fenced_blocks(strip_think(prefix))
        if not blocks or not blocks[-1].closed:
            continue
        extraction = extract_source(prefix, name)
        return prefix if extraction.source is not None and extraction.reason == "defines the export" else None
    return None


def _looks_like_cuda(code: str) -> bool:
    return "__global__" in code or "cudaStream_t" in code or "#include <cuda" in code


def _defines_export(code: str, name: str) -> bool:
    pattern = rf'extern\s+"C"[^;{{]*?\b{re.escape(name)}\s*\([^;]*?\)\s*\{{'
    return re.search(pattern, code, re.S) is not None


def _cuda_pieces(block: Block) -> list[str]:
    if block.lang in _CUDA_LANGS or (block.lang not in _PY_LANGS and _looks_like_cuda(block.code)):
        return [block.code]
    if block.lang in _PY_LANGS or "load_inline" in block.code:
        strings = [m.group("body") for m in _PY_STRING.finditer(block.code) if "__global__" in m.group("body")]
        return [s.strip("\n") + "\n" for s in strings]
    return []


def extract_source(content: str, name: str) -> Extraction:
    """The candidate source in an answer's ``content`` for the exported function ``name``."""
    answer = strip_think(content)
    if not answer.strip():
        return Extraction(None, "thinking_only" if content.strip() else "empty", 0)
    blocks = fenced_blocks(answer)
    pieces = [piece for block in blocks for piece in _cuda_pieces(block)]
    if not blocks and _looks_like_cuda(answer) and answer.lstrip().startswith(("#include", "//", "/*")):
        pieces = [answer.strip("\n") + "\n"]
    tiers: list[tuple[str, list[str]]] = [
        ("defines the export", [code for code in pieces if _defines_export(code, name)]),
        ("has a kernel", [code for code in pieces if "__global__" in code]),
        ("cuda block", pieces),
    ]
    for how, chosen in tiers:
        if chosen:
            return Extraction(chosen[-1], how, len(blocks))
    return Extraction(None, "no_code", len(blocks))


def _normalized_text(source: str) -> str:
    """Comments removed, whitespace runs outside string and character literals made one space."""
    out: list[str] = []
    code: list[str] = []

    def flush() -> None:
        text = " ".join("".join(code).split())
        if text:
            out.append(text)
        code.clear()

    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            flush()
            out.append(source[i : j + 1])
            i = j + 1
        elif source.startswith("//", i):
            j = source.find("\n", i)
            code.append(" ")
            i = n if j < 0 else j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            code.append(" ")
            i = n if j < 0 else j + 2
        else:
            code.append(c)
            i += 1
    flush()
    return " ".join(out)


def normalized_digest(source: str) -> str:
    """sha256 of the source with comments removed and every run of whitespace outside literals made one
    space."""
    return digest_bytes(_normalized_text(source.replace("\r\n", "\n")).encode())


def _parse_value(text: str) -> int | str:
    text = text.strip()
    try:
        return int(text, 0)
    except ValueError:
        return text


def _guarded(source: str, name: str) -> bool:
    return re.search(rf"#\s*(?:ifndef\s+{name}\b|if\s+!\s*defined\s*\(?\s*{name}\b)", source) is not None


def tunable_variants(
    source: str, spec_tunables: Mapping[str, list[int | str]], limit: int = MAX_VARIANTS
) -> list[dict[str, int | str]]:
    """Value sets to try for a generated source: the kernel's tunables and those the source declares with
    ``// @tunable NAME: v1, v2``, each only where the source guards the macro with ``#ifndef NAME``. At most
    ``limit`` sets; ``[{}]`` when there is nothing to tune."""
    values: dict[str, list[int | str]] = {}
    for m in _TUNABLE_DECL.finditer(source):
        name = m.group("name")
        parsed = [_parse_value(v) for v in m.group("values").split(",") if v.strip()]
        if parsed and name not in values:
            values[name] = list(dict.fromkeys(parsed))
    for name, spec_values in spec_tunables.items():
        values[name] = list(spec_values)
    names = sorted(name for name in values if _guarded(source, name))
    if not names:
        return [{}]
    combos = itertools.islice(itertools.product(*(values[name] for name in names)), limit)
    return [dict(zip(names, combo, strict=True)) for combo in combos]
