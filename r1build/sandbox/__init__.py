"""Confinement of model-written code: every compile, link, object read and run of a source the user did not write
goes through :func:`confined` and runs inside a sandbox.

Why a sandbox and not patterns: a compile reads files (``#include`` in any spelling, ``__has_include``,
``#embed``, the assembler's ``.incbin`` and ``.include`` with escapes in their strings) and a loaded library's host
code makes system calls of its own choosing. No text check can list every way to name a file, so the text checks of
:mod:`r1build.gate.source` are only a first, fast layer; the guarantee is that the process doing the work sees no
file worth reading and has no network:

* **compiles and tools** (nvcc, the shared-library link, the object readers): the toolkit, the system's
  programs, libraries and headers (``/usr``), and one scratch folder holding the candidate, nothing else;
* **runs** (GPU workers, check workers, sanitizer runs, profiler runs): the same plus the Python that runs
  r1build's worker, r1build's own package folder, the libraries under test (read-only), the worker's own folder and
  the GPU's device nodes.

Neither sees a home folder, the project, the cache, key files, the host's ``/tmp`` or the ``/proc`` of other
processes; each runs in new user, PID, IPC, UTS, cgroup and network namespaces with no capabilities, a scrubbed
environment and a session keyring of its own, may make no user namespace of its own, has memory folders of a size
(``/tmp``, ``/dev/shm``; its root and ``/dev`` read-only), and dies with its parent.

What a run leaves in its folder is read by the evaluator while the run goes on, so the evaluator reads it only
beneath that folder and through no link (:mod:`.files`), and keeps what it writes for a run, and anything an
unconfined process of it imports or writes, outside every folder a run may write
(:func:`r1build.evaluate.slots.make_slot`).

The sandbox is Bubblewrap (``bwrap``, :mod:`.bwrap`): the unprivileged sandbox Flatpak is built on, packaged by
every Linux distribution, a single small setuid-free program that takes the whole policy on its command line. Where
it cannot run (no user namespaces, macOS, a locked-down container), model-written code is not compiled or run at
all (:class:`~r1build.errors.SandboxUnavailableError`, exit 2) unless ``R1BUILD_SANDBOX=off`` says to run it
unconfined, with a warning on every run. The user's own sources (the baseline, ``candidates`` files and their tuned
values) are trusted and compiled as any source of the project.
"""

from __future__ import annotations

from ..toolchain.runner import Runner, run_process
from .environment import scrubbed_environment
from .policy import (
    Confinement,
    Sandbox,
    compile_confinement,
    compile_memory,
    confined,
    reader_confinement,
    run_confined,
    runner_sandbox,
    sandbox_for,
    trusted_origin,
    unconfined,
)

__all__ = [
    "Confinement",
    "Runner",
    "Sandbox",
    "compile_confinement",
    "compile_memory",
    "confined",
    "reader_confinement",
    "run_confined",
    "run_process",
    "runner_sandbox",
    "sandbox_for",
    "scrubbed_environment",
    "trusted_origin",
    "unconfined",
]
