"""Profiler feedback: a round's finalists run under Nsight Compute (``ncu``) with a small fixed metric set.

Where ncu is found (``R1BUILD_NCU``, else ``PATH``, else the CUDA toolkit's folder) and a local GPU measures a
search, :class:`Profiler` compiles a small host program around a finalist (:mod:`.harness`: the candidate's
object, built as the gate builds it, linked with a ``main`` that calls it at the first benchmark shape), runs it
under ncu (:func:`.ncu.ncu_command`) and reads the CSV into a :class:`~r1build.records.Profile`
(:func:`.ncu.parse_ncu_csv`), stored with the candidate's result. :func:`.summary.profile_summary` turns it into
the line the next round's feedback and the report show. Where ncu is missing, nothing is profiled and one note
says so; ``R1BUILD_NCU=off`` turns it off.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..errors import CandidateProfileError, EvaluationError
from ..gate.nvcc import compile_variant, gencode
from ..manifest.cdecl import declaration
from ..manifest.flags import rooted_flags
from ..manifest.model import KernelSpec, Manifest
from ..records import Candidate, Profile
from ..sandbox import Confinement, Sandbox, compile_confinement, run_confined, run_process, sandbox_for
from ..settings import env_settings
from ..toolchain.nvcc import toolchain
from .harness import HARNESS_ERRORS, harness_source
from .ncu import ncu_command, parse_ncu_csv
from .summary import profile_summary

__all__ = ["Profiler", "find_ncu", "ncu_places", "profile_summary"]

_OFF = frozenset({"0", "off", "false", "no"})


def find_ncu(environ: Mapping[str, str] | None = None) -> str | None:
    """The ncu to profile with: ``R1BUILD_NCU`` (``off`` turns profiling off), else ``PATH``, else
    ``$CUDA_HOME/bin`` or ``/usr/local/cuda/bin``; None when there is none."""
    env = os.environ if environ is None else environ
    given = env_settings(env).ncu
    if given is not None:
        return None if given.strip().lower() in _OFF else given
    found = shutil.which("ncu")
    if found:
        return found
    for home in (env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "ncu").is_file():
            return str(Path(home) / "bin" / "ncu")
    return None


PROFILE_FILE_SIZE = 1 << 30
"""The largest file a profiling run of a model's candidate may write, its output among them (ncu's table is
kilobytes): a finalist whose host code prints without end is stopped there (SIGXFSZ) instead of filling this
process's memory through a pipe until the time limit."""

NSIGHT_HOMES = (Path("/opt/nvidia"),)
"""Where Nsight Compute installs itself outside a CUDA toolkit (the launcher ``<toolkit>/bin/ncu`` looks there and
beside the toolkit)."""


def ncu_places(ncu: str, homes: tuple[Path, ...] = NSIGHT_HOMES) -> tuple[Path, ...]:
    """The Nsight Compute folders a confined ncu must see: a toolkit's ``bin/ncu`` is a launcher that runs the
    ``nsight-compute*`` folder beside the toolkit or under ``/opt/nvidia`` (seen on an H100 image: the sandbox showed
    neither, and every profile of a generated candidate failed with "Nsight Compute is not installed")."""
    root = Path(ncu).resolve().parent.parent
    found = [p for home in (root, *homes) if home.is_dir() for p in sorted(home.glob("nsight-compute*"))]
    return tuple(p for p in found if p.is_dir())


@functools.lru_cache(maxsize=4)
def _version(ncu: str) -> str:
    try:
        out = run_process([ncu, "--version"], timeout_s=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EvaluationError(f"cannot run {ncu}: {exc}") from None
    m = re.search(r"Version (\S+)", out)
    return f"ncu {m.group(1)}" if m else "ncu"


class Profiler:
    """Profiles one candidate at a time under ncu (see the module docstring)."""

    def __init__(self, ncu: str, *, timeout_s: float = 300.0) -> None:
        self.ncu = ncu
        self.timeout_s = timeout_s

    @property
    def tool(self) -> str:
        """The ncu version, as recorded with every profile."""
        return _version(self.ncu)

    def profile(self, manifest: Manifest, spec: KernelSpec, arch: str, candidate: Candidate) -> Profile:
        """Nsight Compute's findings for one call of ``candidate`` at the spec's first benchmark shape;
        :class:`~r1build.errors.EvaluationError` naming what failed."""
        shape = (spec.bench_shapes or spec.test_shapes)[0]
        tc = toolchain()
        flags = rooted_flags(manifest.settings.nvcc_flags, manifest.root)
        with tempfile.TemporaryDirectory(prefix="r1build-ncu-") as tmp:
            work = Path(tmp)
            built = compile_variant(
                candidate.source,
                candidate.defines,
                arch,
                name="candidate",
                flags=flags,
                toolchain=tc,
                workdir=work,
                timeout_s=self.timeout_s,
                declaration=declaration(spec),
                sandbox=sandbox_for(candidate.origin.kind),
            )
            if not built.ok:
                raise EvaluationError(f"the candidate did not compile for profiling: {built.output[-500:]}")
            (work / "harness.cu").write_text(harness_source(spec, shape), encoding="utf-8")
            link = [tc.nvcc, *flags, "-gencode", gencode(arch), "harness.cu", "candidate.o", "-o", "harness"]
            sandbox, confinement = sandbox_for(candidate.origin.kind), compile_confinement(work, tc.nvcc)
            try:
                made = run_confined(sandbox, link, confinement, timeout_s=self.timeout_s)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise EvaluationError(f"the profiling harness did not build: {exc}") from None
            if made.returncode != 0:
                raise EvaluationError(f"the profiling harness did not build: {(made.stdout + made.stderr)[-500:]}")
            output = self._run_ncu(sandbox, work)
        try:
            kernels = parse_ncu_csv(output)
        except ValueError as exc:
            raise EvaluationError(f"ncu's output could not be read: {exc}: {_tail(output, 300)}") from None
        return Profile(tool=self.tool, kernels=kernels)

    def _run_ncu(self, sandbox: Sandbox, work: Path) -> str:
        """ncu's output (and the harness's) over the harness built in ``work``, in ``sandbox``;
        :class:`~r1build.errors.EvaluationError` naming what failed: a harness error, a run past the time limit, or
        output past :data:`PROFILE_FILE_SIZE` (a confined run's output goes to a file of that size at most)."""
        confinement = Confinement(
            workdir=work, toolkit=self.ncu, gpu=True, readable=ncu_places(self.ncu), file_size=PROFILE_FILE_SIZE
        )
        try:
            run = run_confined(sandbox, ncu_command(self.ncu, ["./harness"]), confinement, timeout_s=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise CandidateProfileError(f"profiling did not finish within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise EvaluationError(f"profiling could not start {self.ncu}: {exc}") from None
        if run.returncode != 0:
            said = _tail(run.stderr or run.stdout, 500)
            if run.returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
                raise CandidateProfileError(f"profiling failed (its output passed {PROFILE_FILE_SIZE} bytes): {said}")
            if run.returncode in HARNESS_ERRORS:
                raise CandidateProfileError(f"profiling failed ({HARNESS_ERRORS[run.returncode]}): {said}")
            raise EvaluationError(f"profiling failed (ncu exited with {run.returncode}): {said}")
        return run.stdout


def _tail(output: str, limit: int) -> str:
    """The last ``limit`` characters of a run's output for a message, what would not print (a candidate's bytes)
    shown as ``?``."""
    return "".join(c if c.isprintable() or c == "\n" else "?" for c in output[-limit:].strip())
