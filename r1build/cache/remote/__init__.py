"""The shared remote cache: a second layer behind the local cache (see :mod:`.layer` for the rules).

:func:`attach_remote` reads the configuration (``--remote-cache`` / ``R1BUILD_REMOTE_CACHE`` / the manifest's
``[cache] url``; ``--remote-write`` / ``R1BUILD_REMOTE_WRITE``) and puts a :class:`RemoteLayer` behind a cache.
Backends (:mod:`.http`, :mod:`.s3`) are imported only when a URL of theirs is used.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from ...errors import ConfigError
from ...manifest import Manifest
from ...manifest.addresses import remote_url_problem
from ...settings import env_settings
from ..store import Cache
from .layer import RECORD_KINDS, ROOT, RemoteLayer, RemoteProblem, blob_key, record_key
from .store import RemoteStore, RemoteUnavailable

__all__ = [
    "RECORD_KINDS",
    "ROOT",
    "RemoteLayer",
    "RemoteProblem",
    "RemoteStore",
    "RemoteUnavailable",
    "attach_remote",
    "blob_key",
    "open_store",
    "record_key",
    "remote_layer",
]


def remote_layer(
    manifest: Manifest, *, url: str | None = None, write: bool | None = None, signing_key: Path | None = None
) -> RemoteLayer | None:
    """The remote layer this run uses, or None when no remote is configured.

    ``url``, ``write`` and ``signing_key`` (a key file) are the command line's (None: not given); then the
    environment, then the manifest. Writing needs the team's signing key (``signing_key`` or
    ``R1BUILD_SIGNING_KEY``, :func:`r1build.trust.signing.load_private_key`): without one it is a
    :class:`~r1build.errors.ConfigError`, before anything runs.
    """
    from ...trust.signing import load_private_key, trusted_keys

    env = env_settings()
    chosen = url or env.remote_cache or manifest.settings.cache.url
    if not chosen:
        return None
    given = "--remote-cache" if url else "R1BUILD_REMOTE_CACHE" if env.remote_cache else None
    problem = remote_url_problem(chosen) if given else None  # the manifest's was checked when it was loaded
    if problem is not None:
        raise ConfigError(f"{given}: {problem}")
    writing = write if write is not None else bool(env.remote_write)
    timeout = env.remote_timeout or manifest.settings.cache.timeout_s
    store = open_store(chosen, timeout=timeout, header=env.remote_header)
    key = None
    if writing:
        key = load_private_key(signing_key)
        if key is None:
            raise ConfigError(
                f"writing to the remote cache {chosen} needs the team's signing key: --signing-key "
                "FILE or R1BUILD_SIGNING_KEY (`r1build key generate` makes one); without it the remote "
                "is only read"
            )
    return RemoteLayer(store, trusted=trusted_keys(manifest), signing_key=key)


def attach_remote(
    cache: Cache,
    manifest: Manifest,
    *,
    url: str | None = None,
    write: bool | None = None,
    signing_key: Path | None = None,
) -> Cache:
    """``cache`` with the configured remote layer behind it (none when none is configured), and the manifest's
    trusted keys as the keys it trusts (:attr:`~r1build.cache.storage.Storage.trusted`)."""
    from ...trust.signing import trusted_keys

    cache.remote = remote_layer(manifest, url=url, write=write, signing_key=signing_key)
    cache.trusted = trusted_keys(manifest)
    return cache


def open_store(url: str, *, timeout: float, header: tuple[str, str] | None) -> RemoteStore:
    """The backend for ``url``: :class:`~.http.HttpStore` for http(s), :class:`~.s3.S3Store` for s3 (needs the
    ``s3`` extra). :class:`~r1build.errors.ConfigError` for a URL that is neither."""
    problem = remote_url_problem(url)
    if problem is not None:
        raise ConfigError(f"remote cache: {problem}")
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme == "s3":
        from .s3 import S3Store

        return S3Store(url, timeout=timeout)
    from .http import HttpStore

    return HttpStore(url, timeout=timeout, header=header)
