"""Model-written sources are compiled in the real sandbox (Bubblewrap): a canary file of the building machine is
never read into an object, a compiler message, a cached verdict, or a probe's answer, whatever the spelling; the
sandbox alone holds (the text checks are bypassed here on purpose), and the gate's two layers together hold."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.errors import SandboxUnavailableError
from r1build.gate import StaticGate
from r1build.gate.nvcc import compile_variant
from r1build.gate.source import source_problems
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin
from r1build.sandbox import Confinement, Sandbox, confined, sandbox_for, unconfined
from tests.sandbox.support import COMPILES, KERNEL, TOOLCHAIN

ROOT = Path(__file__).resolve().parents[2]
CANARY = "R1BUILD-CANARY-7f3a91"

pytestmark = COMPILES


def attacks(secret: Path) -> dict[str, str]:
    """One extra line (or few) per spelling that reads ``secret`` at compile time."""
    p = str(secret)
    octal = "".join(f"\\{ord(c):03o}" for c in ".incbin")
    return {
        "form feed include": f'#\finclude "{p}"\n',
        "vertical tab include": f"#\vinclude <{p}>\n",
        "digraph and splice": f'%:inc\\\nlude "{p}"\n',
        "computed include": f'#define P "{p}"\n#include P\n',
        "asm hex include": f'asm("\\x2einclude \\"{p}\\"");\n',
        "asm octal incbin": f'asm("{octal} \\"{p}\\"");\n',
        "asm unicode incbin": f'asm("\\u002eincbin \\"{p}\\"");\n',
        "asm raw string incbin": f'asm(R"x(.incbin "{p}")x");\n',
        "asm split incbin": f'asm(".inc" "bin \\"{p}\\"");\n',
        "pragma dependency": f'_Pragma("GCC dependency \\"{p}\\"")\n',
        "embed": f'const unsigned char blob[] = {{\n#embed "{p}"\n}};\n',
        PASTED: (
            "#define CAT(a, b) a##b\n#define STR(x) #x\n#define XSTR(x) STR(x)\n"
            f'asm(".section .rodata\\n" XSTR(CAT(.inc, bin)) " \\"{p}\\"\\n.previous");\n'
        ),
    }


PASTED = "asm incbin by token pasting"
"""The spelling the text checks do not see (the directive's name is pasted together by the preprocessor)."""


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "home" / "team.pem"
    path.parent.mkdir()
    path.write_text(f"{CANARY} first line\n{CANARY} second line\n")
    return path


def _compile(source: str, workdir: Path, *, sandbox: Sandbox) -> tuple[str, bytes, bool]:
    assert TOOLCHAIN is not None
    workdir.mkdir()
    done = compile_variant(
        source,
        {},
        "sm_90",
        name="run",
        flags=[],
        toolchain=TOOLCHAIN,
        workdir=workdir,
        timeout_s=120,
        sandbox=sandbox,
    )
    made = done.object_path.read_bytes() if done.object_path is not None else b""
    return done.output, made, done.ok


@pytest.mark.parametrize("name", list(attacks(Path("/x"))))
def test_the_sandbox_alone_keeps_every_spelling_away_from_the_file(name: str, secret: Path, tmp_path: Path) -> None:
    source = attacks(secret)[name] + KERNEL
    output, made, _ = _compile(source, tmp_path / "work", sandbox=confined())
    assert CANARY not in output
    assert CANARY.encode() not in made
    # the text checks see every one of these too, but the pasted one: the first layer, not the guarantee
    assert bool(source_problems(source)) == (name != PASTED), name


@pytest.mark.parametrize("name", ["asm octal incbin", PASTED])
def test_unconfined_the_same_spelling_reads_the_file(name: str, secret: Path, tmp_path: Path) -> None:
    """The control: without the sandbox, the octal-escaped .incbin (which passed the old text checks) and the
    pasted one (which passes today's) put the file into the object, so the test above would see it if the sandbox
    let it through."""
    source = attacks(secret)[name] + KERNEL
    _, made, ok = _compile(source, tmp_path / "work", sandbox=unconfined())
    assert ok and CANARY.encode() in made


def test_a_probe_finds_nothing_of_the_host(secret: Path, tmp_path: Path) -> None:
    probe_source = f'#if __has_include("{secret}") || __has_include("/etc/hostname")\n#error FOUND\n#endif\n'
    output, _, ok = _compile(probe_source + KERNEL, tmp_path / "confined", sandbox=confined())
    assert ok, output
    output, _, ok = _compile(probe_source + KERNEL, tmp_path / "plain", sandbox=unconfined())
    assert not ok and "FOUND" in output  # the control: the probe does answer where nothing confines it


def test_messages_keep_only_lines_about_the_candidate(tmp_path: Path) -> None:
    """A header that is in reach (a system header) is still not quoted back: a macro that breaks it makes errors
    located in the header, which unconfined quote its lines, and a confined compile leaves them out, counted."""
    source = "#define size_t SECRET_LOOKING_TOKEN\n#include <stdio.h>\n" + KERNEL
    plain, _, _ = _compile(source, tmp_path / "plain", sandbox=unconfined())
    assert "/usr/include/" in plain  # the control: the errors are the header's
    output, _, ok = _compile(source, tmp_path / "confined", sandbox=confined())
    assert not ok and "/usr/include/" not in output
    assert "compiler message(s) about other files left out" in output


def test_the_gate_never_caches_or_reports_the_canary(secret: Path, tmp_path: Path) -> None:
    """Through the whole static gate (text checks, sandboxed nvcc, object checks, the cache): no verdict holds it."""
    assert TOOLCHAIN is not None
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = manifest.kernel("silu_mul")
    cache = Cache(tmp_path / "cache")
    gate = StaticGate(cache, toolchain=TOOLCHAIN)
    baseline = (ROOT / "kernels" / "silu_mul.cu").read_text()
    pairs = [
        ("sm_90", Candidate(extra + baseline, Origin("generated", model="t"))) for extra in attacks(secret).values()
    ]
    results = gate.judge(manifest, spec, pairs)
    assert all(r.status != "passed" for r in results)
    assert all(CANARY not in r.detail for r in results)
    stored = b"".join(p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert CANARY.encode() not in stored


def test_a_toolkit_the_sandbox_does_not_show_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    """An nvcc wrapper that runs a compiler from a folder the sandbox does not show fails every confined compile:
    that is the sandbox's failure, said as such (exit 2's error), never cached as the candidate's compile error."""
    assert TOOLCHAIN is not None
    hidden = tmp_path / "hidden" / "nvcc"
    hidden.parent.mkdir()
    hidden.write_text(f'#!/bin/sh\nexec "{Path(TOOLCHAIN.nvcc).resolve()}" "$@"\n')
    wrapper = tmp_path / "wrapper" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{hidden}" "$@"\n')
    for script in (hidden, wrapper):
        script.chmod(0o755)
    odd = dataclasses.replace(TOOLCHAIN, nvcc=str(wrapper))
    manifest = load_manifest(ROOT / "kernels.toml")
    candidate = Candidate((ROOT / "kernels" / "silu_mul.cu").read_text() + "\n// a\n", Origin("generated", model="t"))
    with Cache(tmp_path / "cache") as cache:
        gate = StaticGate(cache, toolchain=odd)
        with pytest.raises(SandboxUnavailableError, match="cannot compile inside the sandbox"):
            gate.judge(manifest, manifest.kernel("silu_mul"), [("sm_90", candidate)])
        assert (
            StaticGate(cache, toolchain=TOOLCHAIN)
            .judge(
                manifest,
                manifest.kernel("silu_mul"),
                [("sm_90", dataclasses.replace(candidate, origin=Origin("file")))],
            )[0]
            .ok
        )  # the same wrapper's compiles of the user's own sources run as before (here: the real nvcc)


def test_no_sandbox_means_no_model_written_compile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where bubblewrap cannot run, a generated source is not compiled at all (exit 2's error, saying what to do);
    the user's own sources still are; R1BUILD_SANDBOX=off runs it unconfined."""
    monkeypatch.delenv("R1BUILD_SANDBOX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH, and /usr/bin/bwrap hidden below
    monkeypatch.setattr("r1build.sandbox.policy.find_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailableError, match="bubblewrap") as raised:
        sandbox_for("generated")
    assert raised.value.exit_code == 2 and "R1BUILD_SANDBOX=off" in str(raised.value)
    assert sandbox_for("baseline").kind == "trusted" and sandbox_for("file").kind == "trusted"
    monkeypatch.setenv("R1BUILD_SANDBOX", "off")
    assert sandbox_for("generated").kind == "off"


def test_a_model_written_candidate_gets_a_scrubbed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CANARY)
    env = confined().environment(dict(os.environ), Confinement(workdir=Path("/w")))
    assert CANARY not in repr(env) and env["HOME"] == "/w"
