"""What the static gate reads in a generated candidate's text before compiling it.

Compiling is not harmless: the preprocessor and the host assembler read files at build time. A generated
candidate that ``#include``\\ s ``/etc/...``, ``/proc/self/environ`` or ``~/.ssh/...`` gets that file's text quoted
in the compiler's errors, which are cached and fed back to the model in the next prompt; one that includes
``/dev/stdin`` or a FIFO stalls the compile; an inline-assembly ``.incbin`` embeds a file of the build machine in
the object (and so in the library and a wheel built from it), and ``.include`` quotes it in the assembler's
errors. So, before any compile, a generated candidate is rejected, with the reason, when it:

* includes a header by an absolute path, a path with a ``..`` segment, a home (``~``) path or characters a
  header name does not need, or names it through a macro (a computed ``#include``), or uses ``#embed``; or asks
  ``__has_include`` or ``#pragma GCC dependency`` about such a path (the answer shows in what compiles, and so
  in the feedback);
* includes PyTorch's or Python's headers (``torch/extension.h``, ``ATen/``, ``c10/``, ``pybind11/``,
  ``Python.h``): the candidate contract is a plain CUDA translation unit, not a PyTorch extension;
* holds the assembler directives ``.incbin`` or ``.include`` (adjacent string literals joined first).

Directives are found the way the preprocessor finds them: after line splices, with comments removed, with the
``%:`` digraph and the ``??=`` trigraph read as ``#``, and with every blank GCC accepts inside a directive (space,
tab, form feed, vertical tab, carriage return). Assembler directives are looked for in the text as the assembler
gets it: string literals with their escapes decoded (``\x2e``, ``\056``, ``\u002e``...), adjacent literals and raw
strings joined; ``.file`` is refused with ``.incbin`` and ``.include``; ``__has_include`` and ``__has_embed`` of a
computed name are refused like a computed ``#include``.

This is the first, fast layer, and it is not the guarantee: a compile of a generated candidate runs in the sandbox
of :mod:`r1build.sandbox`, where no file of the user's is there to read, and its messages keep only lines about its
own file (:mod:`.messages`). The manifest's own sources are trusted (security guide) and not checked here: they may
include project headers through the manifest's ``-I`` flags. What the text check cannot see (an assembler directive
assembled by token pasting) the object checks of :mod:`.symbols` still bound: no call outside the allowlist, no
system-call instruction.
"""

from __future__ import annotations

import re

from ..toolchain.cspans import spans

__all__ = ["source_problems"]

_SAFE_HEADER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+-]*")
_BLANK = r"[ \t\f\v\r]"
_DIRECTIVE = re.compile(
    rf"^{_BLANK}*(?:#|%:){_BLANK}*(?P<name>include_next|include|import|embed)\b{_BLANK}*(?P<rest>[^\n]*)$", re.M
)
_HEADER = re.compile(r'(?:<(?P<angle>[^>\n]*)>|"(?P<quote>[^"\n]*)")[ \t\f\v\r]*$')
_PYTORCH = re.compile(r"(?:torch|ATen|c10|pybind11|caffe2)/.*|Python\.h|torch\.h", re.I)
_HAS_INCLUDE = re.compile(r'__has_(?:include|include_next|embed)\s*\(\s*(?:<(?P<angle>[^>\n]*)>|"(?P<quote>[^"\n]*)")')
_HAS_ANY = re.compile(r"__has_(?:include|include_next|embed)\b")
_DEPENDENCY = re.compile(r"\bGCC\s+dependency\b")
_ASM_FILE = re.compile(r"\.(?:incbin|include|file)\b", re.I)
_ADJACENT = re.compile(r'"\s*(?:(?:u8|[uUL])?R?)"')
_ESCAPE = re.compile(
    r"\\(?:x(?P<hex>[0-9A-Fa-f]+)|(?P<oct>[0-7]{1,3})|u(?P<u4>[0-9A-Fa-f]{4})|U(?P<u8>[0-9A-Fa-f]{8})|(?P<other>.))",
    re.S,
)
_RAW = re.compile(r'(?:u8|[uUL])?R"(?P<delim>[^()\\ \t\n]{0,16})\((?P<body>.*?)\)(?P=delim)"', re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "b": "\b", "e": "\x1b"}


def _without_comments(text: str) -> str:
    """``text`` with each comment replaced by one space (newlines inside block comments kept), string and
    character literals untouched."""
    return "".join(
        " " + "\n" * text.count("\n", a, b) if kind == "comment" else text[a:b] for kind, a, b in spans(text)
    )


def _decode_escape(m: re.Match[str]) -> str:
    number = m["hex"] or m["u4"] or m["u8"]
    value = int(number, 16) if number else int(m["oct"], 8) if m["oct"] else None
    if value is not None:
        return chr(value) if value < 0x110000 else "?"
    return _SIMPLE_ESCAPES.get(m["other"], m["other"])


def assembler_view(text: str) -> str:
    """``text`` as the assembler would get its strings: raw strings opened up, adjacent literals joined and every
    escape decoded (applied to the whole text, code too: an escape outside a literal is no C anyway)."""
    opened = _RAW.sub(lambda m: '"' + m["body"].replace("\\", "\\\\").replace('"', '\\"') + '"', text)
    return _ESCAPE.sub(_decode_escape, _ADJACENT.sub("", opened))


def _header_problem(name: str, header: str) -> str | None:
    if _PYTORCH.fullmatch(header):
        return (
            f"#{name} <{header}>: a candidate is a plain CUDA C++ translation unit under the candidate contract "
            '(an extern "C" launcher taking device pointers and a stream), not a PyTorch or Python extension; '
            "include only CUDA and C++ standard headers"
        )
    if header.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:", header):
        return (
            f"#{name} of {header!r}: an absolute or home path reads a file of the build machine; "
            "include headers by name"
        )
    if ".." in re.split(r"[/\\]", header):
        return f"#{name} of {header!r}: a '..' segment reaches outside the include directories"
    if not _SAFE_HEADER.fullmatch(header):
        return f"#{name} of {header!r}: a header name is letters, digits and _ . / + - only"
    return None


def source_problems(source: str) -> list[str]:
    """Why a generated candidate's text may not be compiled at all, one sentence each (fed back to the model);
    empty when the text is fine to compile."""
    text = source.replace("??=", "#").replace("??/", "\\")
    text = re.sub(r"\\[ \t\f\v]*(?:\r\n?|\n)", "", text)  # line splices, as translation phase 2 removes them
    text = _without_comments(text)
    problems: list[str] = []
    for m in _DIRECTIVE.finditer(text):
        name, rest = m.group("name"), m.group("rest").strip()
        if name == "embed":
            problems.append("#embed reads a file of the build machine into the program; write the data out")
            continue
        header = _HEADER.match(rest)
        if header is None:
            problems.append(
                f'#{name} {rest[:80]}: a computed include (a macro, not a <header> or "header" written out) '
                "can name any file; write the header's name literally"
            )
            continue
        problem = _header_problem(
            name, header.group("angle") if header.group("angle") is not None else header.group("quote")
        )
        if problem is not None:
            problems.append(problem)
    problems += _probe_problems(text)
    if _DEPENDENCY.search(text):
        problems.append("#pragma GCC dependency checks a file of the build machine while compiling; remove it")
    assembler = assembler_view(text)
    if _DEPENDENCY.search(assembler) and not _DEPENDENCY.search(text):
        problems.append("#pragma GCC dependency checks a file of the build machine while compiling; remove it")
    if _ASM_FILE.search(assembler):
        problems.append(
            "inline assembly uses .incbin, .include or .file, which read or name files of the build machine while "
            "compiling; device code needs none of them (use asm only for PTX instructions inside kernels)"
        )
    return list(dict.fromkeys(problems))


def _probe_problems(text: str) -> list[str]:
    """``__has_include`` / ``__has_embed`` asked about a path, or about a computed name (a macro can hold any
    path; the answer shows in what compiles, and so in the feedback)."""
    problems: list[str] = []
    literal = {m.start() for m in _HAS_INCLUDE.finditer(text)}
    for m in _HAS_INCLUDE.finditer(text):
        probed = m.group("angle") if m.group("angle") is not None else m.group("quote")
        problem = _header_problem("__has_include", probed)
        if problem is not None and not _PYTORCH.fullmatch(probed):  # asking whether PyTorch is there is harmless
            problems.append(problem.replace("reads a file", "probes for a file"))
    for m in _HAS_ANY.finditer(text):
        if m.start() not in literal:
            problems.append(
                f'{m.group(0)} of a computed name (a macro, not a <header> or "header" written out) can probe for '
                "any file; write the header's name literally"
            )
    return problems
