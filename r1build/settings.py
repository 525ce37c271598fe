"""r1build's own environment variables, read in this one place.

==========================  =============================================================================
variable                    meaning
==========================  =============================================================================
``R1BUILD_OFFLINE=1``       never call an LLM endpoint, in any command or build: ``resolve`` / ``lock`` as with
                            ``--offline``, ``generate`` refuses, ``doctor`` does not try the endpoint, a build
                            never generates (contradicts ``R1BUILD_GENERATE``); remote caches and clusters are
                            not LLM endpoints and are used as configured
``R1BUILD_GENERATE=1``      let a *build* (pip, build, uv) call the configured endpoint on a miss; builds
                            never do otherwise
``R1BUILD_LOCKED=1``        a build, and every command that reads the lock (``resolve``, ``lock``, ``check``,
                            ``status``, ``report``, ``export-dataset``, ``cache verify --remote``; ``vendor``
                            always does), fails unless ``kernels.lock`` is present and current (the CLI's
                            ``--locked``, a build's ``r1build.locked``); ``doctor`` calls a stale lock an error
``R1BUILD_FROZEN=1``        commands that read the lock, and builds, use ``kernels.lock`` as it is, without
                            requiring it to be current: a stale entry is used, but every entry is still
                            verified against the manifest (declared tunables and values, origin file and
                            its digest, winner digest, a key naming no other kernel's decision) and one
                            that fails is refused (the CLI's ``--frozen``, a build's ``r1build.frozen``);
                            wins over ``R1BUILD_LOCKED``
``R1BUILD_EVALUATE=1``      let a build measure on a local GPU on a miss
``R1BUILD_CACHE_DIR``       the cache directory (platformdirs' user cache folder otherwise); ``--cache-dir``
                            overrides it
``R1BUILD_VERBOSE=1``       build lines for every stage's end (gate registers, cache hits)
``R1BUILD_SIGNING_KEY``     the Ed25519 private key that signs exported decisions (PEM text or the base64 of
                            its 32 raw bytes; see :mod:`r1build.trust.signing`); ``--signing-key FILE`` overrides it
``R1BUILD_REMOTE_CACHE``    the remote cache URL (``http(s)://host/prefix`` or ``s3://bucket/prefix``);
                            ``--remote-cache`` overrides it, it overrides ``[cache] url``
``R1BUILD_REMOTE_WRITE=1``  publish new decisions (and the blobs they name) to the remote cache
                            (``--remote-write``)
``R1BUILD_REMOTE_TIMEOUT``  seconds one request to the remote cache may take; overrides the manifest's
                            ``[cache] timeout-s`` (5 when neither says)
``R1BUILD_REMOTE_TOKEN``    a bearer token sent to an ``http(s)://`` remote cache
``R1BUILD_REMOTE_HEADER``   a whole header (``Name: value``) sent to an ``http(s)://`` remote cache instead
``R1BUILD_BASE_URL``        the LLM endpoint's URL, overriding the provider profile's and the manifest's
``R1BUILD_NVCC``            the nvcc to gate and build with (before ``CUDACXX``, ``CUDA_HOME``, ``PATH``,
                            ``/usr/local/cuda/bin``)
``R1BUILD_COMPUTE_SANITIZER`` the compute-sanitizer the GPU evaluator runs (before ``PATH`` and nvcc's folder)
``R1BUILD_CLUSTER``         the Dask scheduler (``tls://host:8786``) whose workers ``r1build resolve`` measures
                            and compiles on; ``--cluster`` overrides it, it overrides ``[evaluation] cluster``
``R1BUILD_PERF_MODEL``      ``order`` or ``skip``: a search orders (and skips) GPU work by the performance model's
                            predictions (:mod:`r1build.perfmodel`); off when unset or ``off``
``R1BUILD_PERF_MODEL_SKIP`` with ``skip``: skip candidates predicted more than this many times slower than the
                            best measured so far (3 when unset)
``R1BUILD_NCU``             the Nsight Compute (``ncu``) that profiles a search's finalists (before ``PATH`` and
                            the CUDA folder); ``off`` turns profiling off
``R1BUILD_SANDBOX``         ``bwrap`` (when unset) compiles and runs model-written code only inside Bubblewrap and
                            refuses where it cannot run; ``off`` runs it unconfined, with every file this user can
                            read and the network in its reach (a warning says so on every run)
``R1BUILD_REFERENCE_TIMEOUT`` seconds one call of a kernel's numpy reference may take before it is reported as
                            hanging (``check``, the GPU checks' plans; 300 when unset)
==========================  =============================================================================

Flags accept 1/0, true/false, yes/no, on/off (any case); an empty variable is unset. Anything else is a
:class:`~r1build.errors.ConfigError` naming the variable. An ``R1BUILD_*`` variable that is none of these (a typo
reads as unset, say ``R1BUILD_OFLINE=1`` that would have kept a build offline) is named in a warning by every
command and build, with the closest one it may have meant (:func:`unknown_variables`); ``R1BUILD_TEST_*`` are the
test suite's own. Variables that are not r1build's are read where they
are used: the API keys by :mod:`r1build.generate.providers` (which receives the environment as a mapping),
``CUDACXX`` / ``CUDA_HOME`` / ``CUDA_PATH`` by :mod:`r1build.toolchain.nvcc`, ``SOURCE_DATE_EPOCH`` by
:mod:`r1build.build` (which sets it for a build where it is unset), and an ``s3://`` remote's credentials
and endpoint (``AWS_*``) by boto3's own chain.
"""

from __future__ import annotations

import os
import posixpath
import re
import sys
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Literal

from .convert import field, record
from .errors import ConfigError

__all__ = [
    "ANSWER_VARIABLES",
    "ANSWER_VARIABLE_PREFIXES",
    "BASE_URL_ENV",
    "SANDBOX_ENV",
    "VARIABLES",
    "WORKER_VARIABLES",
    "EnvSettings",
    "PerfModelMode",
    "SandboxSetting",
    "answer_environment",
    "cache_dir_path",
    "env_settings",
    "lock_mode",
    "parse_flag",
    "unknown_variables",
]

BASE_URL_ENV = "R1BUILD_BASE_URL"
"""The variable that overrides the LLM endpoint's URL of any provider profile (named in messages)."""

SANDBOX_ENV = "R1BUILD_SANDBOX"
"""The variable that turns the sandbox of model-written code off (named in messages)."""

SandboxSetting = Literal["bwrap", "off"]
"""How model-written code is confined (``R1BUILD_SANDBOX``): inside Bubblewrap, or not at all."""

PerfModelMode = Literal["order", "skip"]
"""How a search uses the performance model (``R1BUILD_PERF_MODEL``): ``order`` GPU work by its predictions, or also
``skip`` candidates predicted far slower than the best measured (:mod:`r1build.perfmodel`)."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

VARIABLES: tuple[str, ...] = tuple(re.findall(r"^``(R1BUILD_[A-Z_]+)", __doc__ or "", re.MULTILINE))
"""Every variable r1build reads (the table above: a test holds it to the code and the docs)."""

WORKER_VARIABLES: tuple[str, ...] = (
    "R1BUILD_NVCC",
    "R1BUILD_COMPUTE_SANITIZER",
    "R1BUILD_NCU",
    "R1BUILD_REFERENCE_TIMEOUT",
    "R1BUILD_VERBOSE",
)
"""The variables ``r1build worker`` keeps for its Dask workers (:mod:`r1build.cluster.workers`): what their tasks
read (the GPU evaluator's tools and limits). None is a credential: every other ``R1BUILD_*`` is dropped there."""


ANSWER_VARIABLE_PREFIXES: tuple[str, ...] = (
    "R1BUILD_",  # r1build's own (every one, the unknown ones too: each is named in a warning)
    "CUDA",  # CUDACXX, CUDA_HOME, CUDA_PATH (the toolchain lookup), CUDA_VISIBLE_DEVICES
    "NVIDIA_",
    "PYTHON",  # what Python imports and how it writes
    "LC_",
    "XDG_",  # where the cache and the key that signs records are
    "DASK_",
    "AWS_",
    "TERM",
    "CLICOLOR",
)
"""Variables that may change what a read-only command answers, by prefix (:func:`answer_environment`)."""

ANSWER_VARIABLES: frozenset[str] = frozenset(
    {"PATH", "HOME", "USER", "LANG", "LANGUAGE", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES"}
    | {"TZ", "TMPDIR", "LD_LIBRARY_PATH", "SOURCE_DATE_EPOCH"}
)
"""Variables that may change what a read-only command answers, by name (:func:`answer_environment`)."""


def answer_environment(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The variables of ``environ`` (the process environment when None) that may change what ``status``,
    ``resolve --locked`` or ``check --locked`` answer, sorted: r1build's own, the toolchain lookup's (``PATH``,
    ``CUDA*``), Python's, the locale, the terminal's, the folders' (``HOME``, ``XDG_*``), the cluster's and a
    remote's, and any LLM provider's key or endpoint (``*_API_KEY``, ``*_BASE_URL``). A replay record keys on
    these alone (:mod:`r1build.cli.fastpath`): a CI job's own variables (``CI_JOB_ID``) change no answer."""
    env = os.environ if environ is None else environ
    return sorted(
        (k, v)
        for k, v in env.items()
        if k in ANSWER_VARIABLES or k.startswith(ANSWER_VARIABLE_PREFIXES) or k.endswith(("_API_KEY", "_BASE_URL"))
    )


def user_state_dir() -> Path | None:
    """r1build's folder in the user's state folder as ``platformdirs.user_state_dir("r1build")`` names it, named
    here on Linux with an absolute ``$XDG_STATE_HOME`` or ``$HOME`` (importing platformdirs costs a first run some
    1.5 ms); None elsewhere, where the caller asks platformdirs."""
    if sys.platform == "linux" and "ANDROID_DATA" not in os.environ:
        xdg = os.environ.get("XDG_STATE_HOME", "")
        if posixpath.isabs(xdg):
            return Path(xdg, "r1build")
        if posixpath.isabs(os.environ.get("HOME", "")):
            return Path("~/.local/state", "r1build").expanduser()
    return None


def unknown_variables(environ: Mapping[str, str] | None = None, known: Collection[str] = ()) -> list[str]:
    """A warning for each ``R1BUILD_*`` variable set in ``environ`` (the process environment when None) that
    r1build does not read, naming the closest one it reads where one is close. ``known``: variables the
    manifest names (its ``api-key-env``), read too."""
    env = os.environ if environ is None else environ
    out = []
    for name in sorted(n for n in env if n.startswith("R1BUILD_") and n not in VARIABLES and n not in known):
        if name.removeprefix("R1BUILD_").startswith("TEST_"):  # the test suite's own
            continue
        import difflib  # here: a run with no unknown variable does without it

        close = difflib.get_close_matches(name, VARIABLES, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        shown = name if name.isprintable() and len(name) <= 80 else repr(name[:80])
        out.append(f"{shown} is set but r1build reads no such variable{hint}; it has no effect")
    return out


def parse_flag(name: str, value: str) -> bool:
    """A boolean setting's value; :class:`ConfigError` naming ``name`` when it is not one."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{name} must be one of 1/0, true/false, yes/no, on/off (got {value!r})")


@record(frozen=True, kw_only=True)
class EnvSettings:
    """r1build's environment variables, parsed. A flag that is unset is None, so callers can tell "not said"
    from "said no" (a config setting, or a command-line flag, may then decide)."""

    offline: bool | None = None
    """``R1BUILD_OFFLINE``: never call an LLM endpoint."""
    generate: bool | None = None
    """``R1BUILD_GENERATE``: a build may call the configured endpoint on a miss (builds never do otherwise)."""
    locked: bool | None = None
    """``R1BUILD_LOCKED``: a build, and every command that reads the lock, fails unless the lock is present and
    current."""
    frozen: bool | None = None
    """``R1BUILD_FROZEN``: commands and builds use the lock as it is, without requiring it to be current (each
    entry still verified against the manifest)."""
    evaluate: bool | None = None
    """``R1BUILD_EVALUATE``: a build may measure on a local GPU on a miss."""
    cache_dir: Path | None = None
    """``R1BUILD_CACHE_DIR``: the cache directory, as given (``~`` expanded)."""
    verbose: bool = False
    """``R1BUILD_VERBOSE``: build output shows each stage's closing line (unset: no)."""
    signing_key: str | None = field(default=None, repr=False)
    """``R1BUILD_SIGNING_KEY``: the private signing key's text, as given (parsed by
    :func:`r1build.trust.signing.load_private_key`); never shown in a repr."""
    remote_cache: str | None = None
    """``R1BUILD_REMOTE_CACHE``: the remote cache URL, as given."""
    remote_write: bool | None = None
    """``R1BUILD_REMOTE_WRITE``: publish new decisions to the remote cache (it is read-only otherwise)."""
    remote_timeout: float | None = None
    """``R1BUILD_REMOTE_TIMEOUT``: seconds one request to the remote cache may take."""
    remote_header: tuple[str, str] | None = field(default=None, repr=False)
    """The header sent to an http(s) remote: ``Authorization: Bearer <R1BUILD_REMOTE_TOKEN>``, or
    ``R1BUILD_REMOTE_HEADER`` split at its first colon. Never shown (``repr=False``)."""
    base_url: str | None = None
    """``R1BUILD_BASE_URL``: the LLM endpoint's URL, as given (checked by :mod:`r1build.generate.providers`)."""
    nvcc: str | None = None
    """``R1BUILD_NVCC``: the nvcc to use, as given."""
    compute_sanitizer: str | None = None
    """``R1BUILD_COMPUTE_SANITIZER``: the compute-sanitizer executable, as given."""
    cluster: str | None = None
    """``R1BUILD_CLUSTER``: the Dask scheduler address a resolve evaluates on, as given."""
    perf_model: PerfModelMode | None = None
    """``R1BUILD_PERF_MODEL``: how a search uses the performance model (None: not at all)."""
    perf_model_skip: float = 3.0
    """``R1BUILD_PERF_MODEL_SKIP``: the factor over the best measured time beyond which ``skip`` skips."""
    ncu: str | None = None
    """``R1BUILD_NCU``: the ncu executable that profiles finalists, as given (``off`` turns profiling off)."""
    reference_timeout: float = 300.0
    """``R1BUILD_REFERENCE_TIMEOUT``: seconds one call of a numpy reference may take."""
    sandbox: SandboxSetting = "bwrap"
    """``R1BUILD_SANDBOX``: ``bwrap`` confines model-written code (refusing where no sandbox works), ``off`` runs it
    unconfined."""


def _flag(environ: Mapping[str, str], name: str) -> bool | None:
    value = environ.get(name)
    if value is None or not value.strip():
        return None
    return parse_flag(name, value)


def _seconds(environ: Mapping[str, str], name: str, most: float) -> float | None:
    """Variable ``name`` as a number of seconds in (0, ``most``]; None when unset."""
    value = environ.get(name, "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= most:
        raise ConfigError(f"{name} must be a number of seconds in (0, {most:g}] (got {value!r})")
    return seconds


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP header name (RFC 9110's token)."""
_HEADER_VALUE = re.compile(r"[\x20-\x7e\x80-\xff]+")
"""An HTTP header value http.client sends: printable, no line break or other control character."""


def _remote_header(environ: Mapping[str, str]) -> tuple[str, str] | None:
    token = environ.get("R1BUILD_REMOTE_TOKEN", "").strip()
    header = environ.get("R1BUILD_REMOTE_HEADER", "").strip()
    if token and header:
        raise ConfigError("set R1BUILD_REMOTE_TOKEN or R1BUILD_REMOTE_HEADER, not both")
    if token:
        if not _HEADER_VALUE.fullmatch(token) or " " in token:
            raise ConfigError(
                "R1BUILD_REMOTE_TOKEN must be one printable word, with no spaces, line breaks or control characters "
                "(its value is not shown)"
            )
        return ("Authorization", f"Bearer {token}")
    if not header:
        return None
    name, colon, value = header.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not _HEADER_NAME.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
        raise ConfigError(
            "R1BUILD_REMOTE_HEADER must be one header, `Name: value`, on one line and with no control characters "
            "(its value is not shown)"
        )
    return (name, value)


def env_settings(environ: Mapping[str, str] | None = None) -> EnvSettings:
    """The settings in ``environ`` (the process environment when None), read now (never memoized: tests and
    frontends change the environment between calls)."""
    env = os.environ if environ is None else environ
    raw_dir = env.get("R1BUILD_CACHE_DIR", "").strip()
    return EnvSettings(
        offline=_flag(env, "R1BUILD_OFFLINE"),
        generate=_flag(env, "R1BUILD_GENERATE"),
        locked=_flag(env, "R1BUILD_LOCKED"),
        frozen=_flag(env, "R1BUILD_FROZEN"),
        evaluate=_flag(env, "R1BUILD_EVALUATE"),
        cache_dir=_cache_dir(raw_dir),
        verbose=bool(_flag(env, "R1BUILD_VERBOSE")),
        signing_key=env.get("R1BUILD_SIGNING_KEY", "").strip() or None,
        remote_cache=env.get("R1BUILD_REMOTE_CACHE", "").strip() or None,
        remote_write=_flag(env, "R1BUILD_REMOTE_WRITE"),
        remote_timeout=_seconds(env, "R1BUILD_REMOTE_TIMEOUT", 600),
        remote_header=_remote_header(env),
        base_url=env.get(BASE_URL_ENV) or None,
        nvcc=env.get("R1BUILD_NVCC") or None,
        compute_sanitizer=env.get("R1BUILD_COMPUTE_SANITIZER") or None,
        cluster=env.get("R1BUILD_CLUSTER", "").strip() or None,
        ncu=env.get("R1BUILD_NCU") or None,
        perf_model=_perf_model(env),
        perf_model_skip=_perf_model_skip(env),
        reference_timeout=_seconds(env, "R1BUILD_REFERENCE_TIMEOUT", 86400) or 300.0,
        sandbox=_sandbox(env),
    )


def _sandbox(environ: Mapping[str, str]) -> SandboxSetting:
    value = environ.get(SANDBOX_ENV, "").strip().lower()
    if value in ("", "bwrap", "on", "1", "yes", "true"):
        return "bwrap"
    if value in ("off", "0", "no", "false"):
        return "off"
    raise ConfigError(f"{SANDBOX_ENV} must be bwrap or off (got {value!r})")


def _cache_dir(raw: str) -> Path | None:
    """``R1BUILD_CACHE_DIR`` as a path (``~`` expanded); None when unset (:func:`cache_dir_path`)."""
    return cache_dir_path(raw, "R1BUILD_CACHE_DIR") if raw else None


def cache_dir_path(raw: str, name: str) -> Path:
    """A cache directory given as ``raw`` by ``name`` (``R1BUILD_CACHE_DIR``, the config setting
    ``r1build.cache-dir``), ``~`` expanded; :class:`ConfigError` naming ``name`` for one that can name no folder
    here: a NUL in it, a ``~user`` with no such user or a ``~`` with no home folder, a name in it longer than the
    file system takes."""
    from .filemode import path_length_problem

    if "\0" in raw:
        raise ConfigError(f"{name}: {raw!r} is not a usable path: it holds a NUL character")
    try:
        path = Path(raw).expanduser()
    except RuntimeError:  # pathlib's "Could not determine home directory."
        raise ConfigError(f"{name}: {raw!r} is not a usable path: its ~ names no home folder here") from None
    problem = path_length_problem(path)
    if problem is not None:
        raise ConfigError(f"{name}: {problem}")
    return path


def _perf_model(environ: Mapping[str, str]) -> PerfModelMode | None:
    value = environ.get("R1BUILD_PERF_MODEL", "").strip().lower()
    if value in ("", "off", "0", "no", "false"):
        return None
    if value == "order":
        return "order"
    if value == "skip":
        return "skip"
    raise ConfigError(f"R1BUILD_PERF_MODEL must be off, order or skip (got {value!r})")


def _perf_model_skip(environ: Mapping[str, str]) -> float:
    value = environ.get("R1BUILD_PERF_MODEL_SKIP", "").strip()
    if not value:
        return 3.0
    try:
        factor = float(value)
    except ValueError:
        factor = 0.0
    if not 1.0 < factor < 1e6:
        raise ConfigError(f"R1BUILD_PERF_MODEL_SKIP must be a factor above 1 (got {value!r})")
    return factor


def lock_mode(
    locked: bool | None, frozen: bool | None, env: EnvSettings, *, said: tuple[str, str] = ("--locked", "--frozen")
) -> tuple[bool, bool]:
    """``(locked, frozen)`` of a command or a build: what it was told (``locked`` / ``frozen``: the command
    line's flags or the build's config settings; None: not said, False: said no), else ``R1BUILD_LOCKED`` /
    ``R1BUILD_FROZEN``. Told both is a :class:`ConfigError` naming ``said``; what was told wins over the
    environment, and a frozen from the environment wins over a locked from it (the more particular ask)."""
    if locked and frozen:
        raise ConfigError(f"{said[0]} checks the lock and {said[1]} uses it without checking: choose one")
    if locked or frozen:
        return bool(locked), bool(frozen)
    env_frozen = bool(env.frozen) and frozen is None
    env_locked = bool(env.locked) and locked is None
    return env_locked and not env_frozen, env_frozen


def _markdown(rst: str) -> str:
    """One cell or paragraph of this module's docstring in Markdown: literals, roles and pipes."""

    def role(m: re.Match[str]) -> str:  # :mod:`r1build.x` -> `r1build.x`; :class:`~a.B` -> `B`
        return f"`{m.group(2).rpartition('.')[2] if m.group(1) else m.group(2)}`"

    text = re.sub(r":\w+:`(~?)([\w.]+)`", role, rst)
    return text.replace("``", "`").replace("|", "\\|")


def render_variables() -> str:
    """This module's table of variables, and the paragraph after it, as Markdown (the documentation's
    environment reference, written by ``python -m r1build.manifest.schema``)."""
    lines = (__doc__ or "").splitlines()
    rules = [i for i, line in enumerate(lines) if re.fullmatch(r"=+ +=+", line)]
    rows: list[list[str]] = []
    for line in lines[rules[1] + 1 : rules[2]]:
        if line.startswith("``"):
            name, _, meaning = line.partition(" ")
            rows.append([name, meaning.strip()])
        else:
            rows[-1][1] += " " + line.strip()
    table = ["| variable | meaning |", "| --- | --- |"]
    table += [f"| {_markdown(name)} | {_markdown(meaning)} |" for name, meaning in rows]
    return "\n".join([*table, "", _markdown(" ".join(" ".join(lines[rules[2] + 1 :]).split()))])
