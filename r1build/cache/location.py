"""Where the cache lives: the directory given, else ``$R1BUILD_CACHE_DIR``, else the platform's user cache
directory. Light on purpose (no diskcache): the CLI's warm path and the toolchain memo need the place only."""

from __future__ import annotations

from pathlib import Path

from ..settings import env_settings

__all__ = ["default_cache_dir", "resolve_cache_dir"]


def default_cache_dir() -> Path:
    """``$R1BUILD_CACHE_DIR`` or the platform's user cache directory (platformdirs)."""
    env = env_settings().cache_dir
    if env is not None:
        return env
    import platformdirs

    return Path(platformdirs.user_cache_dir("r1build", appauthor=False))


def resolve_cache_dir(flag: str | Path | None = None) -> Path:
    """The cache directory: ``flag`` (e.g. ``--cache-dir``) when given, else :func:`default_cache_dir`."""
    return Path(flag).expanduser() if flag else default_cache_dir()
