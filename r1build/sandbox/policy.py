"""The sandbox policy: what a confined process may see (:class:`Confinement`), which sandbox confines it
(:class:`Sandbox`), and the one decision of whether a source is confined at all (:func:`sandbox_for`)."""

from __future__ import annotations

import errno
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol

from ..convert import record
from ..errors import SandboxUnavailableError
from ..events import Note, emit
from ..settings import SANDBOX_ENV, env_settings
from ..toolchain.runner import Runner, run_process
from .bwrap import Bubblewrap, find_bwrap, probe
from .environment import confined_environment

__all__ = [
    "Confinement",
    "Sandbox",
    "SandboxKind",
    "compile_confinement",
    "compile_memory",
    "confined",
    "run_confined",
    "runner_sandbox",
    "sandbox_for",
    "trusted_origin",
    "unconfined",
]

SandboxKind = Literal["bwrap", "off", "trusted"]
"""How a process runs: inside Bubblewrap, unconfined because ``R1BUILD_SANDBOX=off`` said so, or unconfined because
what it runs is the user's own source (``trusted``)."""

OFF_MEANING = (
    f"{SANDBOX_ENV}=off: model-written code is compiled and run unconfined, with every file this user can read "
    "and the network within its reach (a hostile answer can copy keys into a wheel or send them away)"
)
"""What turning the sandbox off means, said on every run that does."""


@record(frozen=True, kw_only=True)
class Confinement:
    """What one confined process may see besides the system's programs, libraries and headers and the toolkit."""

    workdir: Path
    """Its working directory, read-write (a compile's scratch folder, a worker's own folder)."""
    readable: tuple[Path, ...] = ()
    """Further folders or files it may read (the libraries under test, a tool's folder)."""
    writable: tuple[Path, ...] = ()
    """Further folders it may write."""
    python: bool = False
    """The Python that runs r1build (its prefixes and site-packages) and r1build's own package folder."""
    gpu: bool = False
    """The GPU's device nodes and the ``/sys`` entries the CUDA driver reads."""
    toolkit: str | None = None
    """The nvcc (or another toolkit program) whose toolkit folder it may read, where that is not under ``/usr``."""
    memory: int | None = None
    """The most address space each of its processes may map, in bytes (None: no limit; :func:`compile_confinement`
    sets one; never for a process that makes a CUDA context, which maps far more address space than it uses)."""
    file_size: int | None = None
    """The largest file each of its processes may write, in bytes, its output included: the output then goes to a
    file in ``workdir`` and only :data:`OUTPUT_KEPT` characters of it come back (None: no limit, output through a
    pipe; :func:`compile_confinement` sets :data:`COMPILE_FILE_SIZE`)."""


class Sandbox(Protocol):
    """Runs a command confined (or not, for trusted work)."""

    @property
    def kind(self) -> SandboxKind:
        """Which sandbox this is."""
        ...

    def command(self, argv: Sequence[str], confinement: Confinement) -> list[str]:
        """``argv`` as run inside the sandbox (the same list where nothing confines it)."""
        ...

    def environment(self, base: Mapping[str, str], confinement: Confinement) -> dict[str, str]:
        """The environment a confined command gets from ``base`` (scrubbed of credentials)."""
        ...


@record(frozen=True)
class _Unconfined:
    kind: SandboxKind

    def command(self, argv: Sequence[str], confinement: Confinement) -> list[str]:
        return list(argv)

    def environment(self, base: Mapping[str, str], confinement: Confinement) -> dict[str, str]:
        if self.kind == "trusted":
            return dict(base)
        return confined_environment(base, confinement)


def run_confined(
    sandbox: Sandbox,
    argv: Sequence[str],
    confinement: Confinement,
    *,
    timeout_s: float,
    runner: Runner = run_process,
    merge_stderr: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end inside ``sandbox`` for ``confinement`` with ``runner`` (:mod:`.runner`), in its
    working directory, with the environment the sandbox gives and no standard input; output captured as text.
    Raises what a runner raises (:class:`OSError`, :class:`subprocess.TimeoutExpired`)."""
    limited = sandbox.kind != "trusted"
    log: Path | None = None
    if limited and confinement.file_size is not None:
        # the output into a file of the working directory, held to the file size limit, so that a compile that
        # prints without end (a header including itself twice, printing a #warning each time: a gigabyte in
        # 20 seconds) stops there instead of filling this process's memory through the pipe
        if shutil.which(argv[0], path=os.environ.get("PATH", os.defpath)) is None:
            raise FileNotFoundError(errno.ENOENT, "no such program", argv[0])
        log = confinement.workdir / OUTPUT_NAME
        log.unlink(missing_ok=True)
        argv = ["/bin/sh", "-c", 'exec "$@" >"$0" 2>&1', OUTPUT_NAME, *argv]
    command = sandbox.command(argv, confinement)
    if limited and (confinement.memory is not None or confinement.file_size is not None):
        command = _limited(command, confinement.memory, confinement.file_size)
    try:
        done = runner(
            command,
            cwd=confinement.workdir,
            env=sandbox.environment(os.environ, confinement),
            timeout_s=timeout_s,
            merge_stderr=merge_stderr,
        )
    except subprocess.TimeoutExpired as stopped:
        if log is not None:
            said = stopped.output if isinstance(stopped.output, str) else ""
            stopped.output = said + _read_output(log)
        raise
    if log is None:
        return done
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout + done.stderr + _read_output(log), "")


OUTPUT_NAME = ".r1build-output"
"""The file in a confined compile's working directory its output goes to (:attr:`Confinement.file_size`)."""
OUTPUT_KEPT = 1 << 22
"""The most characters of a confined compile's output read back: its first and last halves, what lies between
left out and counted (a compile's own report is kilobytes; the gate keeps the last 4000 characters of a failure)."""


def _read_output(log: Path) -> str:
    """What a confined command wrote to ``log`` (never through a link), at most :data:`OUTPUT_KEPT` bytes of it,
    then ``log`` removed."""
    try:
        fd = os.open(log, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size <= OUTPUT_KEPT:
            data = f.read(OUTPUT_KEPT)
        else:
            head = f.read(OUTPUT_KEPT // 2)
            f.seek(size - OUTPUT_KEPT // 2)
            left_out = f"\n... ({size - OUTPUT_KEPT} bytes of output left out) ...\n".encode()
            data = head + left_out + f.read(OUTPUT_KEPT // 2)
    log.unlink(missing_ok=True)
    return data.decode("utf-8", errors="replace")


def compile_confinement(workdir: Path, toolkit: str, headers: Sequence[Path] = ()) -> Confinement:
    """The confinement of a compile (nvcc, a link) of a candidate: its folder, the toolkit, the folders of
    ``headers`` read-only (the manifest's include search paths: the user's own, which a hand-written kernel's
    compile sees too), :func:`compile_memory` of address space per process and files (its output among them) of
    at most :data:`COMPILE_FILE_SIZE` bytes."""
    return Confinement(
        workdir=workdir,
        readable=tuple(headers),
        toolkit=toolkit,
        memory=compile_memory(),
        file_size=COMPILE_FILE_SIZE,
    )


def reader_confinement(workdir: Path, program: str) -> Confinement:
    """The confinement of a program that reads a candidate's object (``nm``, ``objdump``, ``c++filt``): the object's
    folder, the system's programs and ``program``'s own folder, :func:`compile_memory` of address space; output
    through pipes (stdout and stderr apart: the gate parses the one and reports the other)."""
    own = program if Path(program).is_absolute() else None  # a bare name is found on the sandbox's PATH
    return Confinement(workdir=workdir, toolkit=own, memory=compile_memory())


COMPILE_FILE_SIZE = 1 << 30
"""The largest file a compile of a candidate may write (its object, nvcc's intermediates, its output): a model's
answer with ``asm(".fill 0x100000000, 1, 0")`` makes the assembler write a 4 GiB object in seconds and a few
megabytes of memory (16 GiB from one line with a fill size of 4), onto this machine's disk and then into the
gate's memory as it reads the object; it is stopped at this size (SIGXFSZ) instead. Objects of real kernels are
megabytes; a preprocessed translation unit tens of megabytes at most."""


@functools.lru_cache(maxsize=1)
def compile_memory() -> int:
    """The address space one compiler process of a candidate may map: half this machine's memory, between 2 and 8
    GiB. A preprocessor bomb in a model's answer (a macro doubling itself thirty times) then ends in a second with
    "out of memory" instead of growing a compiler to 22 GB until the kernel's OOM killer picks a process; the
    root's and the sample's kernels compile within 200 MB."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        physical = 16 << 30
    return int(min(8 << 30, max(2 << 30, physical // 2)))


def _limited(command: Sequence[str], memory: int | None, file_size: int | None) -> list[str]:
    """``command`` started with its address space limited to ``memory`` bytes and the files it writes to
    ``file_size`` bytes (None: unlimited), limits its children inherit, and no core files: through util-linux's
    ``prlimit`` where it is installed, else through this Python (either execs the command)."""
    infinity = -1
    tool = shutil.which("prlimit")
    if tool is not None:
        limits = [f"--as={memory}"] if memory is not None else []
        limits += [f"--fsize={file_size}"] if file_size is not None else []
        return [tool, *limits, "--core=0", "--", *command]
    numbers = [str(memory if memory is not None else infinity), str(file_size if file_size is not None else infinity)]
    return [sys.executable, "-c", _SET_LIMIT, *numbers, *command]


_SET_LIMIT = (
    "import os, resource, sys; m, f = (int(a) for a in sys.argv[1:3]); R = resource; "
    "m < 0 or R.setrlimit(R.RLIMIT_AS, (m, m)); f < 0 or R.setrlimit(R.RLIMIT_FSIZE, (f, f)); "
    "R.setrlimit(R.RLIMIT_CORE, (0, 0)); os.execvp(sys.argv[3], sys.argv[3:])"
)


def unconfined() -> Sandbox:
    """The sandbox of trusted work (the user's own sources): none; commands run as given."""
    return _Unconfined("trusted")


def trusted_origin(kind: str) -> bool:
    """Whether a candidate of this origin kind is the user's own source (``baseline``, ``file``), compiled and run
    as any source of the project; everything else (``generated``) is confined."""
    return kind in ("baseline", "file")


def sandbox_for(origin_kind: str) -> Sandbox:
    """The sandbox for a candidate of this origin kind: none for the user's own sources, else :func:`confined`."""
    return unconfined() if trusted_origin(origin_kind) else confined()


def confined(environ: Mapping[str, str] | None = None) -> Sandbox:
    """The sandbox for model-written code: Bubblewrap where it runs; unconfined with a warning where
    ``R1BUILD_SANDBOX=off``; else :class:`~r1build.errors.SandboxUnavailableError` saying why and what to do."""
    if env_settings(environ).sandbox == "off":
        _warn_off()
        return _Unconfined("off")
    exe = find_bwrap()
    problem = "bubblewrap (bwrap) is not installed" if exe is None else probe(exe)
    if exe is None or problem is not None:
        raise SandboxUnavailableError(
            f"model-written code is compiled and run only inside a sandbox, and none works here: {problem}. "
            "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; it needs unprivileged user "
            f"namespaces), or set {SANDBOX_ENV}=off to run model-written code unconfined"
        )
    return Bubblewrap(exe, python=python_places(), secrets=secret_places())


def runner_sandbox() -> Sandbox:
    """The sandbox of a process that loads candidate libraries (a GPU or check worker, a sanitizer or profiler run):
    :func:`confined`; where no sandbox works, none, since such a process then only ever gets the user's own sources
    (a model-written one cannot be built into a library without a sandbox: :func:`sandbox_for` refuses)."""
    try:
        return confined()
    except SandboxUnavailableError:
        return unconfined()


@functools.lru_cache(maxsize=1)
def _warn_off() -> None:
    emit(Note("warning", OFF_MEANING))


def python_places() -> tuple[Path, ...]:
    """What a confined Python needs to run r1build's worker: the interpreter's prefixes, the site-packages folders
    on ``sys.path``, the folders of ``PYTHONPATH`` and r1build's own package folder (never the folder above it, which
    may be a project checkout)."""
    places = {Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    places |= {Path(p) for p in sys.path if p and Path(p).name in ("site-packages", "dist-packages")}
    places |= {Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).is_absolute()}
    places.add(Path(__file__).resolve().parents[1])
    executable = Path(sys.executable)
    places.add(executable.parent)
    places.add(executable.resolve().parent)
    return tuple(sorted(p for p in places if p.exists()))


def secret_places() -> tuple[Path, ...]:
    """Folders never shown inside a sandbox even where a folder above them is (they are covered by an empty one):
    the home folder and the working directory (the project)."""
    out = {Path.home(), Path.cwd()}
    return tuple(sorted(p.resolve() for p in out if p.exists() and p != Path("/")))
