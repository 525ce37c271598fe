"""The PEP 517 build backend ``r1build.build``: scikit-build-core, with the kernels resolved before CMake runs.

A host project declares::

    [build-system]
    requires = ["r1build", "scikit-build-core>=0.10", "nanobind>=2"]
    build-backend = "r1build.build"

and its ``CMakeLists.txt`` needs two lines::

    include(${R1BUILD_KERNELS_CMAKE})
    target_link_libraries(my_ext PRIVATE r1build::kernels)

Before a wheel (or editable wheel) is built, :func:`r1build.resolve.prepare_build` resolves every kernel × arch
from the lock, the cache or the vendored sources, gates what it emits and writes ``.r1build/generated/``; the
generated CMake file reaches CMake as ``-DR1BUILD_KERNELS_CMAKE=...`` through the config setting
``cmake.define.R1BUILD_KERNELS_CMAKE``. Everything else is scikit-build-core's.

A build never calls an LLM endpoint unless the person building opts in (``R1BUILD_GENERATE=1`` or the config
setting ``r1build.generate``): installing a package never spends the installer's API key. Options: config
settings ``r1build.locked``, ``r1build.frozen``, ``r1build.generate``, ``r1build.offline``, ``r1build.evaluate``,
``r1build.cache-dir`` or the environment (``R1BUILD_LOCKED=1``, ``R1BUILD_FROZEN=1``, ``R1BUILD_GENERATE=1``,
``R1BUILD_OFFLINE=1``, ``R1BUILD_EVALUATE=1``, ``R1BUILD_CACHE_DIR``), see :mod:`r1build.build.options`.

Every hook stands alone: frontends may call each in a fresh process, so nothing is kept between them. This
module holds only the hooks, which delegate: :mod:`r1build.build.warm` (a warm locked build: the stamp check,
standard library only), :mod:`r1build.build.kernels` (the cold path: resolve and emit), :mod:`r1build.build.options`,
:mod:`r1build.build.keyfiles` and :mod:`r1build.build.boundary`. A warm locked ``build_wheel`` imports nothing of
r1build but :mod:`r1build.build.warm` and the stamp (:mod:`r1build.build.stamp`) until the stamp fails to hold:
what it adds to scikit-build-core's own rebuild is a millisecond or two.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from scikit_build_core import build as _skbuild

from .warm import COMPILER_DEFINE, FIXED_EPOCH, KERNELS_DEFINE, PREFIX, HookSettings, fixed_date, warm_kernel_settings

if TYPE_CHECKING:
    from .kernels import kernel_settings, prepare_kernels
    from .options import ConfigSettings

__all__ = [
    "COMPILER_DEFINE",
    "FIXED_EPOCH",
    "KERNELS_DEFINE",
    "PREFIX",
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "kernel_settings",
    "prepare_kernels",
    "warm_kernel_settings",
]


def __getattr__(name: str) -> Any:
    """The cold path's public functions (:mod:`r1build.build.kernels`), imported when first asked for: importing
    them with the hooks would cost every warm build their imports."""
    if name in ("kernel_settings", "prepare_kernels"):
        from . import kernels

        return getattr(kernels, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _plain(config_settings: HookSettings) -> ConfigSettings:
    """Config settings for the hooks that resolve nothing (:func:`~r1build.build.kernels.plain_settings`)."""
    from .boundary import frontend_boundary
    from .kernels import plain_settings

    with frontend_boundary():
        return plain_settings(config_settings)


def build_wheel(
    wheel_directory: str, config_settings: HookSettings = None, metadata_directory: str | None = None
) -> str:
    """PEP 517: resolve the kernels (unless a warm locked build's stamp holds), then build the wheel with
    scikit-build-core; returns its file name."""
    settings = warm_kernel_settings(config_settings)
    if settings is None:
        from .boundary import frontend_boundary
        from .kernels import kernel_settings

        with frontend_boundary():
            settings = kernel_settings(config_settings)
    with fixed_date():
        name = _skbuild.build_wheel(wheel_directory, settings, metadata_directory)
    from .keyfiles import strip_wheel, warn_left_out  # standard library only: a warm build stays a millisecond or two

    warn_left_out(strip_wheel(Path(wheel_directory) / name), "wheel")
    return name


def build_editable(
    wheel_directory: str, config_settings: HookSettings = None, metadata_directory: str | None = None
) -> str:
    """PEP 660: resolve the kernels, then build the editable wheel with scikit-build-core. CMake gets a wrapper
    that resolves the kernels again when their inputs change (:mod:`r1build.build.editable`), so a rebuild on
    import (scikit-build-core's ``editable.rebuild``) builds edited kernels too."""
    from .boundary import frontend_boundary
    from .editable import write_editable
    from .kernels import kernel_settings
    from .options import split_settings

    with frontend_boundary():
        settings = kernel_settings(config_settings, editable=True)
        options, _rest = split_settings(config_settings)
        cmake_file = Path(str(settings[KERNELS_DEFINE]))
        settings[KERNELS_DEFINE] = write_editable(Path.cwd().resolve(), options, cmake_file).as_posix()
    with fixed_date():
        return _skbuild.build_editable(wheel_directory, settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: HookSettings = None) -> str:
    """PEP 517: the sdist, carrying manifest, lock, references, sources and vendored winners, not ``.r1build/``."""
    from .boundary import frontend_boundary
    from .kernels import sdist_config_settings

    with frontend_boundary():
        settings = sdist_config_settings(config_settings)
    with fixed_date():
        name = _skbuild.build_sdist(sdist_directory, settings)
    from .keyfiles import strip_sdist, warn_left_out

    warn_left_out(strip_sdist(Path(sdist_directory) / name), "sdist")
    return name


def get_requires_for_build_wheel(config_settings: HookSettings = None) -> list[str]:
    """PEP 517: scikit-build-core's extra requirements (cmake / ninja where the system has none)."""
    settings = _plain(config_settings)
    return _skbuild.get_requires_for_build_wheel(settings)


def get_requires_for_build_editable(config_settings: HookSettings = None) -> list[str]:
    """PEP 660: as for a wheel."""
    settings = _plain(config_settings)
    return _skbuild.get_requires_for_build_editable(settings)


def get_requires_for_build_sdist(config_settings: HookSettings = None) -> list[str]:
    """PEP 517: scikit-build-core's requirements for an sdist."""
    settings = _plain(config_settings)
    return _skbuild.get_requires_for_build_sdist(settings)


# scikit-build-core leaves these out when a project's metadata can depend on the build's outcome; frontends
# then build the wheel instead, and so must we.
if hasattr(_skbuild, "prepare_metadata_for_build_wheel"):

    def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: HookSettings = None) -> str:
        """PEP 517: the wheel's metadata (no kernels needed); returns the ``.dist-info`` folder name."""
        settings = _plain(config_settings)
        return _skbuild.prepare_metadata_for_build_wheel(metadata_directory, settings)

    def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: HookSettings = None) -> str:
        """PEP 660: the editable wheel's metadata."""
        settings = _plain(config_settings)
        return _skbuild.prepare_metadata_for_build_editable(metadata_directory, settings)

    __all__ += ["prepare_metadata_for_build_editable", "prepare_metadata_for_build_wheel"]
