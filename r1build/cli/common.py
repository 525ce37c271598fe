"""Arguments and set-up shared by the CLI's commands: finding the manifest, opening the cache, archs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..cache import Cache, open_usable
from ..errors import UsageError
from ..filemode import OutputKind, foreign_output, path_length_problem
from ..manifest import Manifest, find_manifest, load_manifest, parse_arch
from ..settings import env_settings
from . import fastpath

if TYPE_CHECKING:
    from ..trust.trusted import TrustedKeys

__all__ = [
    "add_cache_arg",
    "add_force_arg",
    "add_locked_arg",
    "add_manifest_arg",
    "given_path",
    "load_from_args",
    "open_cache",
    "parse_archs",
    "refuse_foreign_output",
    "refuse_overwriting",
    "require_current_lock",
]


def given_path(text: str) -> Path:
    """A path argument as argparse's ``type``: an empty one (``--out "$OUT"`` with OUT unset) is refused rather
    than taken as the current folder, where it would write or look for files the user never named."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (is the variable that should give it unset?)")
    problem = path_length_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def add_manifest_arg(parser: argparse.ArgumentParser) -> None:
    """``-m/--manifest``: a manifest file or a directory holding one."""
    parser.add_argument(
        "-m",
        "--manifest",
        type=given_path,
        default=None,
        metavar="PATH",
        help="kernels.toml, a pyproject.toml with [tool.r1build], or a folder with one (default: "
        "the nearest in the current folder or a folder above it)",
    )


def add_cache_arg(parser: argparse.ArgumentParser, *, remote: bool = False) -> None:
    """``--cache-dir``; with ``remote``, also ``--remote-cache URL`` and ``--remote-write``."""
    parser.add_argument(
        "--cache-dir",
        type=given_path,
        default=None,
        metavar="DIR",
        help="cache directory (default: $R1BUILD_CACHE_DIR or the user cache folder)",
    )
    if remote:
        parser.add_argument(
            "--remote-cache",
            metavar="URL",
            help="remote cache behind the local one: http(s)://host/prefix or s3://bucket/prefix "
            "(default: $R1BUILD_REMOTE_CACHE, else the manifest's [cache] url)",
        )
        parser.add_argument(
            "--remote-write",
            action="store_true",
            help="publish new decisions to the remote cache, signed with the team's key "
            "(also R1BUILD_REMOTE_WRITE=1); read-only otherwise",
        )
        parser.add_argument(
            "--signing-key",
            type=given_path,
            metavar="FILE",
            help="the team's Ed25519 private key that signs what --remote-write publishes "
            "(default: $R1BUILD_SIGNING_KEY)",
        )


def add_locked_arg(parser: argparse.ArgumentParser) -> None:
    """``--locked`` of a command that reads the lock without writing it: fail unless it is current."""
    parser.add_argument(
        "--locked",
        action="store_true",
        help="fail unless kernels.lock is present and current (also R1BUILD_LOCKED=1)",
    )


def add_cluster_args(parser: argparse.ArgumentParser, what: str) -> None:
    """``--cluster ADDRESS`` and ``--insecure-cluster`` (read by :func:`cluster_of`); ``what`` the cluster does."""
    parser.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help=f"{what} on the workers of this Dask scheduler (tls://host:8786) (default: $R1BUILD_CLUSTER, else "
        "the manifest's [evaluation] cluster)",
    )
    parser.add_argument(
        "--insecure-cluster",
        action="store_true",
        help="accept a plain tcp:// scheduler off this machine (unauthenticated: anyone who reaches it runs "
        "code on its workers, and whoever answers there on this machine)",
    )


def cluster_of(args: argparse.Namespace, manifest: Manifest) -> str | None:
    """The scheduler the command's GPU work goes to (``--cluster``, ``R1BUILD_CLUSTER`` or the manifest's), checked
    (:func:`r1build.cluster.cluster_address`); None for this machine's GPUs."""
    if not (args.cluster or env_settings().cluster or manifest.settings.evaluation.cluster):
        return None
    from ..cluster import cluster_address  # only where one is named: a local run never imports it

    return cluster_address(manifest, args.cluster, insecure=args.insecure_cluster)


def require_current_lock(args: argparse.Namespace, manifest: Manifest) -> None:
    """With ``--locked`` or ``R1BUILD_LOCKED`` (and no ``R1BUILD_FROZEN``, which uses the lock as it is), a
    :class:`~r1build.errors.StaleLockError` (exit 2) naming what is stale unless the lock is present and current:
    a command that reports from the lock does not report from a stale one."""
    from ..lock import load_lock, require_fresh
    from ..settings import env_settings, lock_mode

    locked, _frozen = lock_mode(getattr(args, "locked", False) or None, None, env_settings())
    if locked:
        require_fresh(manifest, load_lock(manifest))


def load_from_args(args: argparse.Namespace, *, check_references: bool = True) -> Manifest:
    """The manifest named by ``--manifest``; without it, the nearest one from the current folder up."""
    given: Path | None = args.manifest
    path = find_manifest(given, walk_up=False) if given is not None else find_manifest(Path.cwd(), walk_up=True)
    manifest = load_manifest(path, check_references=check_references)
    recorder = fastpath.active()
    if recorder is not None:
        recorder.seen_manifest(given, manifest)
    return manifest


def open_cache(args: argparse.Namespace, *, existing: bool = False, manifest: Manifest | None = None) -> Cache:
    """The cache named by ``--cache-dir`` (or the default), as project commands use it: damaged or unwritable,
    it costs a warning, not the command (:func:`~r1build.cache.open_usable`). ``existing``: the cache as
    maintenance commands need it, which must already exist and raise what is wrong with it. With ``manifest``,
    the remote cache it (or ``--remote-cache``, or the environment) configures sits behind it."""
    directory = getattr(args, "cache_dir", None)
    if manifest is None:
        return Cache(directory, create=False) if existing else open_usable(directory)
    layer = None
    url = getattr(args, "remote_cache", None)
    if url or env_settings().remote_cache or manifest.settings.cache.url:  # the remote's code only for a remote
        from ..cache.remote import remote_layer

        layer = remote_layer(
            manifest,
            url=url,
            write=True if getattr(args, "remote_write", False) else None,
            signing_key=getattr(args, "signing_key", None),
        )
    cache = Cache(directory, create=False) if existing else open_usable(directory)
    cache.remote = layer
    cache.trusted = _trusted(manifest)  # records kept for a key no longer trusted are not used
    recorder = fastpath.active()
    if recorder is not None:
        recorder.seen_cache(cache)
    return cache


def _trusted(manifest: Manifest) -> TrustedKeys:
    """The keys ``manifest`` trusts; the signing code only where it names one."""
    if not manifest.settings.cache.trusted_keys:
        from ..trust.trusted import TrustedKeys

        return TrustedKeys()
    from ..trust.signing import trusted_keys

    return trusted_keys(manifest)


def refuse_overwriting(option: str, output: Path, manifest: Manifest, cache: Cache) -> None:
    """A :class:`~r1build.errors.UsageError` when writing ``output`` would replace what the project is made of or
    what the cache holds: one of the files a resolution reads (the manifest, the lock, a reference module, a
    baseline or candidate source), a file already in one of its folders (the vendored winners, an include
    folder), or anything in the cache folder. ``-o kernels.toml`` replaced the manifest with the report."""
    from ..manifest.inputs import manifest_inputs

    target = output.parent.resolve() / output.name  # a link at ``output`` is replaced, not what it points at
    for path in manifest_inputs(manifest):
        if target == path or (path.is_dir() and path in target.parents and target.exists()):
            raise UsageError(
                f"{option} {output}: that is {path}, which the project {manifest.path} is made of; writing there "
                "would replace it (name another file)"
            )
    folder = cache.directory.resolve()
    if target == folder or folder in target.parents:
        raise UsageError(f"{option} {output}: that is inside the cache folder {folder} (name another file)")


def add_force_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """``--force``: replace a file at the output path that r1build did not write (``what`` it writes)."""
    parser.add_argument(
        "--force", action="store_true", help=f"replace a file at the output path that is not {what} r1build wrote"
    )


def refuse_foreign_output(option: str, output: Path, kind: OutputKind, *, force: bool) -> None:
    """A :class:`~r1build.errors.UsageError` when ``output`` holds a file that is not an r1build ``kind``
    (:func:`~r1build.filemode.foreign_output`) and ``--force`` was not given."""
    if not force and foreign_output(output, kind):
        what = "report page" if kind == "report" else "dataset"
        raise UsageError(
            f"{option} {output} exists and is not a {what} r1build wrote; use --force to replace it, or name "
            "another path"
        )


def parse_archs(values: list[str] | None) -> list[str] | None:
    """Canonical archs from ``--arch`` values (each may be comma separated)."""
    if not values:
        return None
    out: list[str] = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            try:
                arch = parse_arch(part)
            except ValueError as exc:
                raise UsageError(f"--arch: {exc}") from None
            if arch not in out:
                out.append(arch)
    if not out:
        raise UsageError("--arch: no arch given (an empty value would resolve every arch)")
    return out
