"""What a warm locked wheel build runs before scikit-build-core: the stamp check, the config settings for
scikit-build-core, the fixed file date; and the names of the config settings every hook shares.

The standard library only (and :mod:`r1build.build.stamp`): importing anything more costs a warm build time.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from .stamp import read_warm_stamp

if TYPE_CHECKING:
    from .options import ConfigSettings

__all__ = [
    "COMPILER_DEFINE",
    "FIXED_EPOCH",
    "KERNELS_DEFINE",
    "PREFIX",
    "REUSED",
    "HookSettings",
    "compiler_path",
    "fixed_date",
    "may_name_a_compiler",
    "ours",
    "warm_kernel_settings",
]

PREFIX = "r1build."
"""Config settings under this prefix are r1build's (:mod:`r1build.build.options`); everything else is
scikit-build-core's."""
KERNELS_DEFINE = "cmake.define.R1BUILD_KERNELS_CMAKE"
"""The config setting that carries the generated CMake file to CMake as ``R1BUILD_KERNELS_CMAKE``."""
COMPILER_DEFINE = "cmake.define.CMAKE_CUDA_COMPILER"
"""The config setting that hands CMake the nvcc the gate used, so the gate and the build use one compiler."""
REUSED = "kernels and lock unchanged since the last locked build: using {}"
"""The note of a build that uses the generated files of the last locked build as they are."""

FIXED_EPOCH = 315_532_800
"""1980-01-01T00:00:00Z, the first date a zip can hold: the timestamp of every file of a wheel or sdist built
without ``SOURCE_DATE_EPOCH`` (scikit-build-core otherwise stamps a wheel's files with their modification
times, which differ between checkouts), so the same inputs give the same bytes. A user's ``SOURCE_DATE_EPOCH``
wins."""

HookSettings: TypeAlias = "Mapping[str, str | list[str]] | None"
"""Config settings as a frontend hands them to a hook."""


def ours(config_settings: HookSettings) -> dict[str, str | list[str]]:
    """r1build's config settings as given (``r1build.*``)."""
    return {k: v for k, v in (config_settings or {}).items() if k.startswith(PREFIX)}


def warm_kernel_settings(config_settings: HookSettings) -> ConfigSettings | None:
    """What :func:`kernel_settings` returns, when the stamp of the last locked build holds for these config
    settings in the working directory (:func:`~r1build.build.stamp.read_warm_stamp`); None otherwise, and then
    :func:`kernel_settings` decides. Nothing of r1build is imported here beyond the stamp."""
    if may_name_a_compiler(config_settings, Path.cwd()):  # the full path checks which (build.compiler)
        return None
    try:
        warm = read_warm_stamp(Path.cwd().resolve(), ours(config_settings))
    except OSError:
        return None
    if warm is None:
        return None
    cmake_file, nvcc = warm
    rest = {k: v for k, v in (config_settings or {}).items() if not k.startswith(PREFIX)}
    compiler = compiler_path(rest.get(COMPILER_DEFINE), nvcc)
    if compiler is None:  # another nvcc named for CMake: kernel_settings says so
        return None
    rest[COMPILER_DEFINE] = compiler
    rest[KERNELS_DEFINE] = cmake_file.resolve().as_posix()
    # the line StderrRenderer.line writes, without importing the boundary for it
    sys.stderr.write(f"r1build: {REUSED.format(cmake_file.parent)}\n")
    sys.stderr.flush()
    return rest


def compiler_path(given: str | list[str] | None, nvcc: str) -> str | None:
    """``nvcc`` as CMake's ``CMAKE_CUDA_COMPILER`` (an absolute path); None when the config setting ``given``
    names another compiler."""
    path = shutil.which(nvcc) or nvcc
    if given is not None:
        value = given if isinstance(given, str) else given[-1]
        if "\0" in value:  # names no file (and os.path would raise ValueError)
            return None
        if os.path.realpath(shutil.which(value) or value) != os.path.realpath(path):
            return None
    return str(Path(path).absolute())


def may_name_a_compiler(config_settings: HookSettings, project: Path) -> bool:
    """Whether the environment, the config setting ``cmake.args`` or pyproject.toml so much as mention
    ``CMAKE_CUDA_COMPILER`` (a string test: :mod:`r1build.build.compiler` reads them properly)."""
    name = "CMAKE_CUDA_COMPILER"
    if any(name in os.environ.get(var, "") for var in ("CMAKE_ARGS", "SKBUILD_CMAKE_ARGS", "SKBUILD_CMAKE_DEFINE")):
        return True
    if name in str((config_settings or {}).get("cmake.args", "")):
        return True
    try:
        return name.encode() in (project / "pyproject.toml").read_bytes()
    except OSError:
        return False


@contextmanager
def fixed_date() -> Iterator[None]:
    """``SOURCE_DATE_EPOCH`` set to :data:`FIXED_EPOCH` for the build (scikit-build-core, CMake and the compilers
    it runs) where the environment has none; restored after. A variable that is not r1build's, so read here
    where it is used (:mod:`r1build.settings`)."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        yield
        return
    before = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(FIXED_EPOCH)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = before
