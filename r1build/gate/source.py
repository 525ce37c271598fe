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
``%:`` digraph and the ``??=`` trigraph read as ``#``. The manifest's own sources are trusted (README, Security)
and not checked here: they may include project headers through the manifest's ``-I`` flags. What the text check
cannot see (an assembler directive assembled by token pasting) the object checks of :mod:`.symbols` still
bound: no call outside the allowlist, no system-call instruction.
"""

from __future__ import annotations

import re

from ..cspans import spans

__all__ = ["source_problems"]

_SAFE_HEADER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+-]*")
_DIRECTIVE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(?P<name>include_next|include|import|embed)\b[ \t]*(?P<rest>.*)$", re.M)
_HEADER = re.compile(r'(?:<(?P<angle>[^>\n]*)>|"(?P<quote>[^"\n]*)")[ \t]*$')
_PYTORCH = re.compile(r"(?:torch|ATen|c10|pybind11|caffe2)/.*|Python\.h|torch\.h", re.I)
_HAS_INCLUDE = re.compile(r'__has_include(?:_next)?\s*\(\s*(?:<(?P<angle>[^>\n]*)>|"(?P<quote>[^"\n]*)")')
_DEPENDENCY = re.compile(r"\bGCC\s+dependency\b")
_ASM_FILE = re.compile(r"\.(?:incbin|include)\b", re.I)
_ADJACENT = re.compile(r'"[ \t\r\n]*(?:(?:u8|[uUL])?R?)"')


def _without_comments(text: str) -> str:
    """``text`` with each comment replaced by one space (newlines inside block comments kept), string and
    character literals untouched."""
    return "".join(
        " " + "\n" * text.count("\n", a, b) if kind == "comment" else text[a:b] for kind, a, b in spans(text)
    )


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
    text = re.sub(r"\\[ \t]*\r?\n", "", text)  # line splices, as translation phase 2 removes them
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
    for m in _HAS_INCLUDE.finditer(text):
        probed = m.group("angle") if m.group("angle") is not None else m.group("quote")
        problem = _header_problem("__has_include", probed)
        if problem is not None and not _PYTORCH.fullmatch(probed):  # asking whether PyTorch is there is harmless
            problems.append(problem.replace("reads a file", "probes for a file"))
    if _DEPENDENCY.search(text):
        problems.append("#pragma GCC dependency checks a file of the build machine while compiling; remove it")
    if _ASM_FILE.search(_ADJACENT.sub("", text)):
        problems.append(
            "inline assembly uses .incbin or .include, which read files of the build machine while compiling; "
            "device code needs neither (use asm only for PTX instructions inside kernels)"
        )
    return list(dict.fromkeys(problems))
