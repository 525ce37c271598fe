"""Getting a candidate out of an R1 answer, and telling candidates apart.

Real R1 answers are prose around one or more fenced blocks: drafts, fragments, a usage example, and the final
answer last. Without a reasoning parser on the server, the whole chain of thought arrives in the content before
``</think>``, drafts included. So extraction:

1. drops everything up to the last ``</think>`` (an unclosed ``<think>`` means the answer is thinking only);
2. collects fenced blocks (backticks or tildes, any indentation, any info string; an unclosed last block counts),
   or, with no fence at all, takes an answer that opens with code (a preprocessor directive, a comment, a
   ``__global__`` or ``extern "C"`` definition) as the file itself;
3. takes CUDA / C++ blocks, and CUDA source held in a Python string (PyTorch ``load_inline`` answers);
4. picks the *last* block that defines the exported function, else the last block with a ``__global__`` kernel,
   else the last CUDA-looking block (the gate then says what is missing);
5. where the chosen block launches kernels it does not define (a final answer written as a kernel block, then a
   launcher block), puts before it the nearest block that defines each (before it, else after it), less that
   block's own definitions of the exported function (an earlier complete answer: the chosen block's launcher is
   the latest one, and a second definition would not compile).

Definitions, declarations and launches are found in the code with its comments and string and character literals
blanked (:func:`_masked`), so a ``;`` or a parenthesis in a parameter's comment, or code commented out, is not
read as code.

Candidates are compared by a normalized source digest (comments and whitespace runs removed, string literals
kept), so the same kernel in different layouts is evaluated once.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Literal

from ..convert import record
from ..keys import digest_bytes
from ..toolchain.cspans import spans
from ..toolchain.defines import define_problem

__all__ = [
    "MAX_VARIANTS",
    "Block",
    "Extraction",
    "ExtractionReason",
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
_NOT_SOURCE_LANGS = frozenset({"diff", "patch", "udiff", "console", "shell-session", "text", "txt", "log", "output"})
"""Tags of blocks that show code but are no source as they stand: a diff of a kernel (its lines start with + and
-), a terminal, plain text (the Python strings of a ``load_inline`` answer in such a block still count)."""
_PROSE_LANGS = frozenset({"markdown", "md", ""})
"""Tags of a block that may wrap other fenced blocks (:func:`fenced_blocks` looks inside)."""
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}(?!`)|~{3,}(?!~))[ \t]*(?P<info>(?:[^`\n \t][^`\n]*)?)$")
"""A fence line. The fence is the whole run of its character and the info string starts after the blanks (one
way to match only: trying each split of a long run of tildes, or of blanks, before a backtick took quadratic
time)."""
_GLUED_OPEN = re.compile(
    r"^(?P<lang>[^\s#/]*)[ \t]*(?P<code>(?:#[ \t]*(?:include|define|pragma|if|ifndef|ifdef)\b|//|/\*"
    r"|(?<!\S)(?:__global__|__device__|template\s*<|extern\s+\"C\")).*)$"
)
"""An info string that runs into the first line of code: ``cuda #include <cuda_runtime.h>``, a comment (``cuda //
@tunable BLOCK: 128, 256``) or a definition (``cuda __global__ void k(...) {``): that line was lost."""
_CODE_START = re.compile(
    r"#[ \t]*(?:include|define|undef|if|ifdef|ifndef|elif|else|endif|pragma|error|warning|line)\b|//|/\*"
    r"|(?:__global__|__device__|__host__)\b|template\s*<|extern\s+\"C\""
)
"""How an unfenced answer that is a bare file opens: any preprocessor directive (``#define``, ``#pragma``,
``# include``, a guard), a comment, or a definition. A markdown heading (``# Solution``, ``# Define the kernel``)
is none: a directive's name is lower case and whole."""
_BLANKED = re.compile(r"[^\n]")
_PREPROCESSOR_LINE = re.compile(r"^[ \t]*#(?:\\\n|[^\n])*", re.MULTILINE)
"""A preprocessor line, with its continuation lines."""
_BRACE = re.compile(r"[{}]")
_LINE_REST = re.compile(r"[ \t]*\n?")
"""Blanks and the line end after a definition."""
_PY_STRING = re.compile(r"(?P<prefix>\b[rRbBuUfF]{1,2})?(?P<q>\"\"\"|''')(?P<body>.*?)(?P=q)", re.S)
_PARAM_TOKEN = re.compile(r"[();{}]")
_MAX_SIGNATURE = 4000
"""Longest parameter list of the exported function looked at (a longer one is not a signature)."""
_MIN_OPENINGS = 64
"""Occurrences of a name looked at in any code: a short source that declares a function before defining it (or
names it in a comment) had only its first occurrence looked at, and its definition was not found."""
_LAUNCH = re.compile(r"\b(?P<name>[A-Za-z_]\w*)\s*(?:<[^<>;{}()]*>\s*)?<<<")
"""A kernel launch: ``name<<<``, or ``name<T, 4><<<`` for a template."""
_STATEMENT_END = re.compile(r"[;{}]")
_MAX_LAUNCHED = 16
"""Most kernels a chosen block launches that are looked for (in order of first launch): each is a pass over the
answer's blocks, so an answer launching thousands of names (a repetition loop) still costs linear time."""
_TUNABLE_DECL = re.compile(r"//\s*@tunable\s+(?P<name>[A-Za-z_]\w*)\s*[:=]\s*(?P<values>[^\n]+)")


@record(frozen=True)
class Block:
    """One fenced block of an answer."""

    lang: str
    """First word of the info string, lower case ("" when none)."""
    code: str
    """The block's text, its fence indentation removed."""
    closed: bool
    """Whether a closing fence was found."""


ExtractionReason = Literal["defines the export", "has a kernel", "cuda block", "no_code", "thinking_only", "empty"]
"""How a source was found (the first three), or why none was: the answer holds no CUDA code outside its thinking
(``no_code``), it is thinking only (an open ``<think>`` never closed), or it is empty."""


@record(frozen=True)
class Extraction:
    """What extraction found in one answer."""

    source: str | None
    """The chosen translation unit, or None."""
    reason: ExtractionReason
    """Why nothing was chosen (``no_code``, ``thinking_only``), or how the source was found."""
    blocks: int
    """Fenced blocks in the answer (after the thinking)."""


def strip_think(content: str) -> str:
    """The answer part of ``content``: after the first ``</think>`` (the end of the reasoning; a later one is the
    answer's own text, in its prose or a string of its code, and cutting there lost the code before it); empty
    when only an open ``<think>`` is there (the answer was all thinking)."""
    end = content.find("</think>")
    if end >= 0:
        return content[end + len("</think>") :]
    if content.lstrip().lstrip("\ufeff").lstrip().startswith("<think>"):
        return ""
    return content


def _lines(text: str) -> list[str]:
    """Lines split at LF (a CR before it dropped) only: ``str.splitlines`` would also split at form feeds,
    vertical tabs and Unicode separators, which can stand inside a comment or a string literal of the code."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _glued_close(line: str, fence: str) -> str | None:
    """The code of a line that ends with a closing fence glued to it (a brace then three backticks), else None."""
    stripped = line.rstrip()
    run = len(stripped) - len(stripped.rstrip(fence[0]))
    code = stripped[:-run] if run else ""
    return code if run >= len(fence) and code.strip() and code.rstrip()[-1] not in "`~" else None


def _parse(text: str) -> list[tuple[Block, int, int]]:
    """Each fenced block with the line of its opening fence and the line after its closing fence (for an unclosed
    block, the line that ends it: the next opening fence, else the number of lines)."""
    blocks: list[tuple[Block, int, int]] = []
    lines = _lines(text)
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        info = m.group("info").strip()
        body: list[str] = []
        glued = _GLUED_OPEN.match(info)
        if glued:
            info = glued.group("lang")
            body.append(glued.group("code"))
        lang = info.split()[0].lower().lstrip("{.").rstrip("}") if info else ""
        j = i + 1
        closed = False
        while j < len(lines):
            line = lines[j]
            stripped = line.strip()
            if stripped and stripped[0] == fence[0] and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                break
            opening = _FENCE.match(line)
            if opening and opening.group("info").strip() and len(opening.group("fence")) >= len(fence):
                j -= 1  # a new block opens (say ```cuda) before this one was closed: this one ends unclosed
                break
            last = _glued_close(line, fence)
            line = line if last is None else last
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            if last is not None:
                closed = True
                break
            j += 1
        blocks.append((Block(lang, "\n".join(body).strip("\n") + "\n", closed), i, min(j + 1, len(lines))))
        i = j + 1
    return blocks


def fenced_blocks(text: str, _depth: int = 0) -> list[Block]:
    """Fenced code blocks in order; an unclosed last block runs to the end of the text. A closing fence glued to
    the last line of code closes the block, and code on the opening fence's line (after the language) is the
    block's first line. A longer fence tagged as prose (``markdown``, or untagged) that wraps fenced blocks stands
    for the blocks inside it (an answer written as one ````` ````markdown ````` document), two levels deep."""
    out: list[Block] = []
    for block, _, _ in _parse(text):
        inner = fenced_blocks(block.code, _depth + 1) if block.lang in _PROSE_LANGS and _depth < 2 else []
        out += inner or [block]
    return out


def complete_part(content: str, name: str) -> str | None:
    """Of an answer cut off mid-stream, the part up to the last closing fence of the answer (after the
    thinking), when a closed block in it defines the exported function ``name`` (complete code); None otherwise.
    One pass over the answer, however many fences it holds."""
    answer = strip_think(content)
    closed = _closed_ends(answer)
    if not closed:
        return None
    kept = "\n".join(answer.split("\n")[: max(closed)])
    prefix = content[: len(content) - len(answer)] + kept + ("\n" if len(kept) < len(answer) else "")
    extraction = extract_source(prefix, name)
    return prefix if extraction.source is not None and extraction.reason == "defines the export" else None


def _closed_ends(text: str, _depth: int = 0) -> list[int]:
    """The line after each closing fence of a block in ``text``, with those of the blocks in an unclosed prose
    block, as :func:`fenced_blocks` takes them (an answer written as one ````` ````markdown ````` document, cut off
    after its code block, had no complete part)."""
    lines = text.split("\n")
    out: list[int] = []
    for block, start, end in _parse(text):
        if block.closed:
            out.append(end)
        elif block.lang in _PROSE_LANGS and _depth < 2:
            inner = "\n".join(lines[start + 1 : end])
            out += [start + 1 + e for e in _closed_ends(inner, _depth + 1)]
    return out


def _looks_like_cuda(code: str) -> bool:
    return "__global__" in code or "cudaStream_t" in code or "#include <cuda" in code


def _masked(code: str) -> str:
    """``code`` with each comment and string or character literal blanked (its characters spaces, its newlines
    kept), so that a ``;``, a parenthesis, a brace, a name or a launch in one is not read as code (a ``;`` in a
    parameter's comment ended the parameter list, and the definition was not found). Offsets are unchanged."""
    return "".join(code[a:b] if kind == "code" else _BLANKED.sub(" ", code[a:b]) for kind, a, b in spans(code))


def _defines_export(code: str, name: str) -> bool:
    """Whether ``code`` (:func:`_masked`) defines the function ``name``: ``name(...) {`` with any linkage spelled
    out (``extern "C"``, an ``extern "C" { }`` block, or none: the declaration the gate pre-includes gives it C
    linkage). One pass over the code, each parameter list looked at up to :data:`_MAX_SIGNATURE` characters, so a
    long or degenerate answer costs linear time: the occurrences looked at stop once their parameter lists could
    have covered the code four times (:func:`_openings`; an answer of the name 200,000 times took 23 s, a real
    one names it a few times)."""
    return any(_opens_body(code, m.end()) for m in _openings(code, name))


def _openings(code: str, name: str) -> Iterator[re.Match[str]]:
    """Where ``name(`` opens a parameter list in ``code``, in order, as many as those lists could cover the code
    four times (:data:`_MAX_SIGNATURE` characters each), so a degenerate answer costs linear time, and at least
    :data:`_MIN_OPENINGS`."""
    budget = 4 * len(code) + _MIN_OPENINGS * _MAX_SIGNATURE
    for m in re.finditer(rf"\b{re.escape(name)}\s*\(", code):
        budget -= _MAX_SIGNATURE
        if budget < 0:
            return
        yield m


def _opens_body(code: str, start: int) -> bool:
    """Whether the parameter list opened just before ``start`` closes and is followed by a function body."""
    return _body_start(code, start) is not None


def _body_start(code: str, start: int) -> int | None:
    """Where the function body opens (its ``{``) after the parameter list opened just before ``start``, or None
    where no body follows that list (a declaration, a call, no list)."""
    depth = 1
    for m in _PARAM_TOKEN.finditer(code, start, start + _MAX_SIGNATURE):
        token = m.group()
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
            if depth == 0:
                after = code[m.end() : m.end() + _MAX_SIGNATURE]
                body = m.end() + len(after) - len(after.lstrip())
                return body if code.startswith("{", body) else None
        else:
            return None
    return None


def _defines_kernel(code: str, kernel: str) -> bool:
    """Whether ``code`` (:func:`_masked`) defines the ``__global__`` function ``kernel`` (its body, not only a
    declaration), looking at :func:`_openings` of it."""
    for m in _openings(code, kernel):
        head = code[max(0, m.start() - 400) : m.start()]
        ends = [e.end() for e in _STATEMENT_END.finditer(head)]
        if "__global__" in head[ends[-1] if ends else 0 :] and _opens_body(code, m.end()):
            return True
    return False


def _with_kernels(pieces: list[str], masked: list[str], index: int, name: str) -> str:
    """``pieces[index]``, after the nearest other piece that defines each kernel it launches without defining it
    (before it where there is one, else after it), in answer order, each less its definitions of the exported
    function ``name`` (:func:`_without_definitions`). ``masked`` holds the pieces :func:`_masked`."""
    code = masked[index]
    launched = list(dict.fromkeys(m.group("name") for m in _LAUNCH.finditer(code) if m.group("name") != "__global__"))
    missing = [k for k in launched[:_MAX_LAUNCHED] if not _defines_kernel(code, k)]
    taken: set[int] = set()
    nearest = [*range(index - 1, -1, -1), *range(index + 1, len(pieces))]
    for kernel in missing:
        found = next((j for j in nearest if _defines_kernel(masked[j], kernel)), None)
        if found is not None:
            taken.add(found)
    if not taken:
        return pieces[index]
    before = (_without_definitions(pieces[j], masked[j], name).rstrip("\n") for j in sorted(taken))
    return "\n".join(before) + "\n\n" + pieces[index]


def _without_definitions(code: str, masked: str, name: str) -> str:
    """``code`` less each definition of the function ``name`` (:func:`_definition_span`), its declarations kept.
    A piece put before the chosen one for its kernels may be an earlier complete answer: the chosen piece defines
    the export (the latest launcher, the answer's final word), and a second definition would not compile."""
    kept: list[str] = []
    end = 0
    for m in _openings(masked, name):
        body = _body_start(masked, m.end()) if m.start() >= end else None
        if body is not None:
            start, stop = _definition_span(masked, m.start(), body)
            kept.append(code[end:start])
            end = stop
    return "".join(kept) + code[end:] if kept else code


def _definition_span(masked: str, at: int, body: int) -> tuple[int, int]:
    """The lines of the definition whose name starts at ``at`` and body at ``body`` in ``masked`` code: from its
    first specifier (after the last ``;``, brace or preprocessor line before it, comments before it kept) to its
    closing brace (the end of the code where it is not closed), with the blanks and the line end around it."""
    head = masked[max(0, at - 400) : at]
    ends = [e.end() for e in _STATEMENT_END.finditer(head)] + [p.end() for p in _PREPROCESSOR_LINE.finditer(head)]
    start = at - len(head[max(ends, default=0) :].lstrip())
    line = masked.rfind("\n", 0, start) + 1
    start = line if not masked[line:start].strip() else start
    depth = 0
    stop = len(masked)
    for m in _BRACE.finditer(masked, body):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            stop = m.end()
            break
    rest = _LINE_REST.match(masked, stop)
    return start, rest.end() if rest else stop


def _cuda_pieces(block: Block) -> list[str]:
    """The CUDA sources in a block: a CUDA / C++ block whole; otherwise the Python strings that hold a kernel
    (PyTorch ``load_inline`` answers, whatever the block's tag), else a block that looks like CUDA, untagged or
    tagged Python with no line only Python has."""
    if block.lang in _CUDA_LANGS:
        return [block.code]
    strings = [_py_string(m) for m in _PY_STRING.finditer(block.code) if "__global__" in m.group("body")]
    if strings:
        return [s.strip("\n") + "\n" for s in strings]
    if block.lang in _NOT_SOURCE_LANGS or "load_inline" in block.code or not _looks_like_cuda(block.code):
        return []
    if block.lang in _PY_LANGS and _PYTHON_LINE.search(block.code):
        return []  # Python that names CUDA outside strings (a comment, a docstring): not a source
    return [block.code]  # untagged, or CUDA tagged as Python by mistake


_PYTHON_LINE = re.compile(r"^[ \t]*(?:import [A-Za-z_]|from [A-Za-z_][\w.]* import |def [A-Za-z_]\w*\()", re.MULTILINE)
"""A line only Python has: an import or a function definition."""


def _py_string(m: re.Match[str]) -> str:
    """The text of a triple-quoted Python string as the program sees it where that differs for code: an
    f-string's doubled braces are single braces."""
    body = m.group("body")
    return body.replace("{{", "{").replace("}}", "}") if "f" in (m.group("prefix") or "").lower() else body


def extract_source(content: str, name: str) -> Extraction:
    """The candidate source in an answer's ``content`` for the exported function ``name``."""
    answer = strip_think(content)
    if not answer.strip():
        return Extraction(None, "thinking_only" if content.strip() else "empty", 0)
    blocks = fenced_blocks(answer)
    pieces = [piece for block in blocks for piece in _cuda_pieces(block) if piece.strip()]
    if not blocks and _looks_like_cuda(answer) and _CODE_START.match(answer.lstrip()):
        pieces = ["\n".join(_lines(answer)).strip("\n") + "\n"]
    masked = [_masked(code) for code in pieces]
    tiers: list[tuple[ExtractionReason, list[int]]] = [
        ("defines the export", [i for i, code in enumerate(masked) if _defines_export(code, name)]),
        ("has a kernel", [i for i, code in enumerate(pieces) if "__global__" in code]),
        ("cuda block", list(range(len(pieces)))),
    ]
    for how, chosen in tiers:
        if chosen:
            return Extraction(_with_kernels(pieces, masked, chosen[-1], name), how, len(blocks))
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

    for kind, a, b in spans(source):
        if kind == "literal":
            flush()
            out.append(source[a:b])
        else:
            code.append(" " if kind == "comment" else source[a:b])
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


def _declared_values(name: str, text: str) -> list[int | str]:
    """The values of one ``// @tunable NAME: v1, v2`` line that can be defines: each comma-separated part up to a
    remark (``256 (threads)`` is 256, ``2; wider spills`` is 2, a trailing ``//`` comment goes), kept when what
    is left is one plain number or identifier; ``"4"`` or ``1 << 8`` would reach the compile line, so they go."""
    out: list[int | str] = []
    for part in text.split("//", 1)[0].split(","):
        value = _parse_value(re.split(r"[;(]", part, maxsplit=1)[0])
        if value != "" and define_problem(name, value) is None:
            out.append(value)
    return out


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
        parsed = _declared_values(name, m.group("values"))
        if parsed and name not in values:
            values[name] = list(dict.fromkeys(parsed))
    for name, spec_values in spec_tunables.items():
        values[name] = list(spec_values)
    names = sorted(name for name in values if _guarded(source, name))
    if not names:
        return [{}]
    combos = itertools.islice(itertools.product(*(values[name] for name in names)), limit)
    return [dict(zip(names, combo, strict=True)) for combo in combos]
