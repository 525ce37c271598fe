"""Attacks on a confined compile of model-written code that read no file: its environment, which it can read
(``/proc/self/environ``) and so put into an object, and its output and files, which a one-line answer can make
gigabytes of (onto this machine's disk and into the gate's memory). Each needs the real sandbox."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

from r1build.gate.link import Linked, check_and_link
from r1build.gate.nvcc import PIC_FLAGS, compile_variant
from r1build.gate.source import source_problems
from r1build.gate.symbols import LISTING_LIMIT, UnreadableObject
from r1build.sandbox import compile_confinement, confined, run_confined
from r1build.sandbox.policy import COMPILE_FILE_SIZE, OUTPUT_KEPT
from tests.sandbox.support import COMPILES, KERNEL, TOOLCHAIN

pytestmark = COMPILES


def test_a_compile_sees_none_of_the_host_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What a compile's processes can read of their environment: no setting of a GPU or Python process (``CUPY_*``,
    ``CUDA_VISIBLE_DEVICES``, ``R1BUILD_NVCC``), no credential, and no search path naming a host folder the sandbox
    hides (a home folder, a project, a relative entry): only what nvcc needs."""
    canary = f"R1BUILD-ENV-{secrets.token_hex(6)}"
    assert TOOLCHAIN is not None
    hidden = tmp_path / canary / "bin"
    hidden.mkdir(parents=True)
    for name in ("OPENAI_API_KEY", "CUPY_CACHE_IN_MEMORY", "CUDA_VISIBLE_DEVICES", "R1BUILD_NVCC", "PYTHONHOME"):
        monkeypatch.setenv(name, canary)
    monkeypatch.setenv("PATH", f"{hidden}:{canary}:{os.environ['PATH']}")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{hidden}:/usr/lib")
    work = tmp_path / "work"
    work.mkdir()
    done = run_confined(
        confined(),
        ["sh", "-c", "tr '\\0' '\\n' < /proc/self/environ"],
        compile_confinement(work, TOOLCHAIN.nvcc),
        timeout_s=60,
    )
    assert done.returncode == 0, done.stdout
    seen = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert canary not in done.stdout, seen
    assert "/usr/bin" in seen["PATH"].split(":") and seen["LD_LIBRARY_PATH"] == "/usr/lib"
    assert seen["HOME"] == str(work)


def test_a_fill_directive_stops_at_the_file_size_limit(tmp_path: Path) -> None:
    """One line of host assembly makes the assembler write an object of any size in seconds and megabytes of
    memory (the text checks let ``.fill`` through: it reads nothing): the file size limit stops it."""
    assert TOOLCHAIN is not None
    source = f'asm(".section .data\\n.fill {COMPILE_FILE_SIZE + (256 << 20)}, 1, 0x41\\n.previous");\n' + KERNEL
    assert not source_problems(source)
    work = tmp_path / "work"
    work.mkdir()
    done = compile_variant(
        source, {}, "sm_90", name="run", flags=[], toolchain=TOOLCHAIN, workdir=work, timeout_s=120, sandbox=confined()
    )
    assert not done.ok and done.object_path is None
    assert "File size limit exceeded" in done.output
    assert all(p.stat().st_size <= COMPILE_FILE_SIZE for p in work.iterdir())


def test_output_without_end_is_stopped_and_cut(tmp_path: Path) -> None:
    """A compile that prints without end (a header including itself twice with a ``#warning``: a gigabyte in 20 s)
    is stopped at the file size limit, and only :data:`OUTPUT_KEPT` characters of its output reach this process."""
    assert TOOLCHAIN is not None
    size = COMPILE_FILE_SIZE + (64 << 20)
    done = run_confined(
        confined(),
        ["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' A; echo unreachable"],
        compile_confinement(tmp_path, TOOLCHAIN.nvcc),
        timeout_s=120,
        merge_stderr=True,
    )
    assert len(done.stdout) <= OUTPUT_KEPT + 200 and "bytes of output left out" in done.stdout
    assert done.returncode != 0 or "unreachable" not in done.stdout
    assert not any(tmp_path.iterdir())  # the output's file is gone
    assert sys.getsizeof(done.stdout) < 2 * OUTPUT_KEPT


def test_the_object_readers_see_only_the_objects_folder(tmp_path: Path) -> None:
    """``nm``, ``objdump`` and ``c++filt`` parse a model-written object (hostile input to binutils): the gate runs
    them inside the sandbox with the object's folder only, so a parser bug that ran code would find no host file.
    Shown with a reader that reads a canary beside the folder: unconfined it can, as the gate runs them it cannot."""
    from r1build.gate.symbols import reader

    canary = tmp_path / "secret.txt"
    canary.write_text(f"R1BUILD-READER-{secrets.token_hex(6)}")
    work = tmp_path / "work"
    work.mkdir()
    obj = work / "candidate.o"
    obj.write_bytes(b"\x7fELF")
    assert reader(obj)(["cat", str(canary)]) == canary.read_text()  # the user's own object: as this process
    with pytest.raises(UnreadableObject, match="No such file"):
        reader(obj, confined())(["cat", str(canary)])
    assert reader(obj, confined())(["ls", str(work)]).split() == ["candidate.o"]


def _linked(source: str, work: Path, **link: Any) -> Linked:
    """The check-and-link verdict of a model-written ``source`` (exporting ``run``), compiled in ``work``; ``link``:
    more arguments of :func:`check_and_link` (its static memory ``limit``)."""
    assert TOOLCHAIN is not None
    work.mkdir()
    done = compile_variant(
        source,
        {},
        "sm_90",
        name="run",
        flags=list(PIC_FLAGS),
        toolchain=TOOLCHAIN,
        workdir=work,
        timeout_s=120,
        sandbox=confined(),
    )
    assert done.ok and done.object_path is not None, done.output
    return check_and_link(done.object_path, "run", toolchain=TOOLCHAIN, sandbox=confined(), timeout_s=120, **link)


def _calling(name: str) -> str:
    """:data:`KERNEL` calling an undefined function of the (mangled) name ``name``."""
    body = KERNEL.replace("return cudaGetLastError();", "hidden(); return cudaGetLastError();")
    return f'extern "C" void hidden() asm("{name}");\n{body}'


def test_a_symbol_name_too_long_for_a_command_line_is_a_rejection(tmp_path: Path) -> None:
    """An undefined symbol of 200,000 characters (one asm label) cannot be handed to ``c++filt`` (E2BIG): that
    aborted the whole gate with a ToolchainError. It is a rejection naming the symbol, cut."""
    linked = _linked(_calling("_Zlong" + "a" * 200_000), tmp_path / "work")
    assert linked.status == "rejected" and "may not use: _Zlongaaa" in linked.detail
    assert "(200006 characters)" in linked.detail and len(linked.detail) < 5_000


def test_a_demangling_that_doubles_is_cut_off(tmp_path: Path) -> None:
    """A 300-character mangled name whose template arguments double 22 times demangles to 140 MB (thirty times:
    gigabytes), all of which came back into this process and into the verdict. It is left mangled instead."""
    subs = ["S_", *(f"S{'0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ'[i]}_" for i in range(36))]
    name = "_Z1fI1AIiiE" + "".join(f"S0_I{subs[k + 2]}{subs[k + 2]}E" for k in range(22)) + "EvT_"
    linked = _linked(_calling(name), tmp_path / "work")
    assert linked.status == "rejected" and f"may not use: {name}." in linked.detail
    assert len(linked.detail) < 5_000


def test_a_listing_without_end_is_a_rejection(tmp_path: Path) -> None:
    """A ``.fill`` of ``nop``\\ s in the host code (8 MB here, up to the compile's file size limit) makes
    ``objdump -d`` print 14 bytes per byte, all of it into this process's memory (gigabytes, then a timeout that
    aborted the gate): the listing is held to :data:`LISTING_LIMIT` and the candidate rejected."""
    source = 'asm(".text\\n.fill 8000000, 1, 0x90\\n.previous");\n' + KERNEL
    assert not source_problems(source)
    linked = _linked(source, tmp_path / "work")
    assert linked.status == "rejected", linked.detail
    assert "objdump printed more than 64 MiB" in linked.detail
    assert LISTING_LIMIT == 64 << 20
    assert not (tmp_path / "work" / ".r1build-listing").exists()


def test_the_name_of_a_too_large_variable_is_demangled_confined(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The static memory check names a candidate's largest variable through ``c++filt``: the name is the
    candidate's (hostile input to binutils' parser, and a demangling bomb has no bound), so c++filt runs in the
    sandbox like every reader. Shown with a c++filt that prints a canary beside its folder: it ran unconfined."""
    canary = tmp_path / "secret.txt"
    canary.write_text(f"R1BUILD-CXXFILT-{secrets.token_hex(6)}")
    tools = tmp_path / "tools"  # not "bin": a reader shows the folder above a bin/ folder (a toolkit)
    tools.mkdir()
    (tools / "c++filt").write_text(f"#!/bin/sh\ncat {canary}\n")
    (tools / "c++filt").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    source = "namespace { __device__ char table[1 << 16]; }\n" + KERNEL.replace("1.0f", "table[threadIdx.x]")
    linked = _linked(source, tmp_path / "work", limit=1024)
    assert linked.status == "rejected" and "too much static memory" in linked.detail, linked.detail
    assert canary.read_text() not in linked.detail and "table" in linked.detail
