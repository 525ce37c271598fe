"""The exception tree of r1build.

One base, one subclass per domain. User errors (bad input: manifest, lock, cache bundle, command line) map to
exit code 2 at the CLI / PEP 517 boundary; everything else to exit code 1::

    R1BuildError
    ├── UserError                      exit 2
    │   ├── ManifestError              kernels.toml / [tool.r1build]: file, line, key
    │   ├── LockError                  kernels.lock missing, stale, corrupt
    │   │   └── StaleLockError         --locked and the lock does not match the manifest
    │   ├── BundleError                a cache bundle that is malformed or tampered with
    │   ├── ConfigError                settings / environment (missing API key, bad endpoint, bad signing key)
    │   │   ├── MissingExtraError      an optional dependency a command needs is not installed (names the extra)
    │   │   └── SandboxUnavailableError  model-written code must be confined and no sandbox works here
    │   ├── SignatureError             a signed decision or bundle entry that is unsigned, malformed, signed by
    │   │                                  an untrusted key, or altered (names the key id)
    │   └── UsageError                 command-line misuse
    ├── CacheError                     the cache directory is unusable
    │   ├── CacheLocationError         ... because of where it points (a file, a folder of other files, no cache
    │   │                                  where one must be): exit 2
    │   ├── CacheDamagedError          ... because its index (cache.db) is damaged: `r1build cache repair`
    │   └── RemoteCacheError           a remote cache that `cache push` / `cache verify --remote` needs failed
    ├── ToolchainError                 nvcc missing or unusable
    │   └── NvccSettingError           ... where R1BUILD_NVCC / CUDACXX names it: exit 2, naming the variable
    ├── CompileError                   a compile that had to succeed failed (subprocess output attached)
    ├── ResolveError                   no winner, no baseline: nothing to emit for a kernel
    │   └── NoWinnerError              no candidate of a kernel × arch may win (the table of why, as data)
    ├── GenerationError                the LLM provider failed in a way that ends the run (401, 402, ...)
    │   └── EndpointSilentError        ... or never answered (5xx, cut streams, timeouts): a build goes on
    ├── EvaluationError                the GPU evaluator could not run at all
    │   └── CandidateProfileError      ... one candidate's profiling run failed by its own doing (its harness
    │                                      failed, printed without end, hung): that candidate goes unprofiled
    ├── OutputError                    standard output cannot be written (its reader went away, a full disk)
    └── ClusterError                   the Dask cluster of a `--cluster` resolve was lost mid-run, or lost a job
        └── ClusterRefusedError        ... is unreachable at the start, or its workers run another r1build or
                                           CUDA version: exit 2
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .records import Unresolved

__all__ = [
    "BundleError",
    "CacheDamagedError",
    "CacheError",
    "CacheLocationError",
    "CandidateProfileError",
    "ClusterError",
    "ClusterRefusedError",
    "CompileError",
    "ConfigError",
    "EndpointSilentError",
    "EvaluationError",
    "GenerationError",
    "LockError",
    "ManifestError",
    "MissingExtraError",
    "NoWinnerError",
    "NvccSettingError",
    "OutputError",
    "R1BuildError",
    "RemoteCacheError",
    "ResolveError",
    "SandboxUnavailableError",
    "SignatureError",
    "StaleLockError",
    "ToolchainError",
    "UsageError",
    "UserError",
    "format_subprocess_failure",
]


class R1BuildError(Exception):
    """Base of every error r1build raises on purpose."""

    exit_code: int = 1


class UserError(R1BuildError):
    """Bad input from the user: exit code 2, no traceback."""

    exit_code = 2


class ManifestError(UserError):
    """A problem in a manifest, located by file, line and key."""

    def __init__(
        self, message: str, *, file: str | None = None, line: int | None = None, key: str | None = None
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        super().__init__(self._render())

    def _render(self) -> str:
        where = self.file or "<manifest>"
        if self.line is not None:
            where += f":{self.line}"
        if self.key:
            where += f": {self.key}"
        return f"{where}: {self.message}"


class LockError(UserError):
    """kernels.lock is missing, corrupt, or cannot be used."""


class StaleLockError(LockError):
    """``--locked`` and the lock does not match the manifest."""


class BundleError(UserError):
    """A cache bundle that is malformed or was tampered with."""


class ConfigError(UserError):
    """Settings or environment: a missing API key, an unknown provider."""


class SandboxUnavailableError(ConfigError):
    """Model-written code is compiled and run only inside a sandbox (:mod:`r1build.sandbox`), and none works here;
    the message says why and what to install, or how to run such code unconfined on purpose."""


class MissingExtraError(ConfigError):
    """A command needs an optional dependency that is not installed: openai to generate, numpy to check the
    references, cupy to measure on a GPU. The message names the extra that installs it
    (:mod:`r1build.toolchain.extras`)."""

    def __init__(self, message: str, *, extra: str) -> None:
        self.extra = extra
        """The extra of r1build that installs what is missing (``generate``, ``cuda13`` ...)."""
        super().__init__(message)


class SignatureError(UserError):
    """A signature that cannot be trusted: absent, malformed, by a key the project does not list, or not matching
    what it signs. Remote decisions and bundle entries that fail are refused (a warning each), not fatal."""

    def __init__(
        self,
        message: str,
        *,
        reason: Literal["unsigned", "malformed", "untrusted", "invalid"],
        key_id: str | None = None,
    ) -> None:
        self.reason = reason
        """Which check failed: ``unsigned``, ``malformed``, ``untrusted`` (key not listed) or ``invalid`` (the
        signature does not match)."""
        self.key_id = key_id
        """The signing key's id, where the signature names one."""
        super().__init__(message)


class UsageError(UserError):
    """Command-line misuse."""


class CacheError(R1BuildError):
    """The cache directory cannot be used."""


class CacheLocationError(CacheError, UserError):
    """The cache location given (flag or ``R1BUILD_CACHE_DIR``) is a file, a folder of other files, or holds no
    cache where a command needs an existing one."""


class RemoteCacheError(CacheError):
    """A remote cache that a maintenance command (``cache push``, ``cache verify --remote``) needs is unavailable.
    Builds and project commands never raise it: there a remote that fails costs one warning."""


class CacheDamagedError(CacheError):
    """The cache's index (``cache.db``) is damaged: not a database, truncated, malformed."""

    reason: str = ""
    """What SQLite said about it."""


class ToolchainError(R1BuildError):
    """nvcc is missing or unusable."""


class NvccSettingError(ToolchainError, UserError):
    """The nvcc that ``R1BUILD_NVCC`` or ``CUDACXX`` names cannot be run or is no nvcc: the setting is wrong."""


class CompileError(R1BuildError):
    """A compile that had to succeed failed."""


class ResolveError(R1BuildError):
    """Nothing to emit for a kernel: no winner and no baseline."""


class NoWinnerError(ResolveError):
    """Kernel × archs where no candidate may win: every one was rejected, or the only ones that passed are
    generated and wait for a GPU. ``unresolved`` holds each candidate's standing for a renderer's table; the
    message is the same table in plain text."""

    def __init__(self, unresolved: Sequence[Unresolved]) -> None:
        self.unresolved = list(unresolved)
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        for u in self.unresolved:
            parts.append(f"{u.kernel}/{u.arch}: no candidate may win; nothing is emitted or locked for it")
            for o in u.outcomes:
                parts.append(
                    f"  {o.candidate[:12]} {o.provenance} ({o.origin}): {o.validation} by "
                    f"{o.stage or '-'} ({o.status or '-'}): {o.reason}"
                )
            parts.append(f"  fix: {u.fix}")
        return "\n".join(parts)


class GenerationError(R1BuildError):
    """The LLM provider failed in a way that ends the run (bad key, no credit, bad request)."""


class EndpointSilentError(GenerationError):
    """No request of a search got an answer (server errors, cut streams, timeouts, a breaker that opened): the
    endpoint is down in all but name. ``r1build resolve`` fails with it; a build goes on without generating."""


class EvaluationError(R1BuildError):
    """The GPU evaluator could not run at all."""


class CandidateProfileError(EvaluationError):
    """One candidate's profiling run failed by its own doing (its harness reported an error, printed without end or
    ran past the time limit): that candidate goes unprofiled, the profiler stays on for the others."""


class OutputError(R1BuildError):
    """Standard output cannot be written: its reader went away (``r1build cache ls | head -1``) or its device is
    full. ``cause`` is what the write raised; the CLI says nothing for a reader that went away (EPIPE), as a
    filter says nothing then."""

    def __init__(self, cause: OSError) -> None:
        self.cause = cause
        """The :class:`OSError` the write raised."""
        super().__init__(f"cannot write the output: {cause.strerror or cause}")


class ClusterError(R1BuildError):
    """The Dask cluster of a ``--cluster`` resolve failed during the run: the scheduler was lost, or a job was lost
    with the workers that ran it. What was measured before is cached, so a re-run continues."""


class ClusterRefusedError(ClusterError, UserError):
    """The cluster cannot be used at all: its scheduler is unreachable at the start, the address is malformed, the
    ``cluster`` extra is missing, or its workers run another r1build or CUDA version than this one."""


def format_subprocess_failure(cmd: Sequence[str], returncode: int, output: str, *, limit: int = 4000) -> str:
    """Command, return code and indented output, the output cut to ``limit`` characters from its end."""
    text = output if len(output) <= limit else "...\n" + output[-limit:]
    import shlex
    import textwrap

    body = textwrap.indent(text.rstrip() or "(no output)", "    ")
    return f"command: {shlex.join(cmd)}\nreturn code: {returncode}\noutput:\n{body}"
