"""Every other place a build can name CMake's CUDA compiler, so that none names another nvcc than the gate's.

The backend hands CMake the nvcc the gate used as the config setting ``cmake.define.CMAKE_CUDA_COMPILER``, which
scikit-build-core writes into CMake's initial cache. A ``-DCMAKE_CUDA_COMPILER=...`` on CMake's command line
wins over that cache, and scikit-build-core puts there ``cmake.args`` (config setting, ``SKBUILD_CMAKE_ARGS``,
``[tool.scikit-build] cmake.args``) and the ``CMAKE_ARGS`` variable (conda-forge's way); ``SKBUILD_CMAKE_DEFINE``
and ``[tool.scikit-build] cmake.define`` name it too. Left alone, any of them would make CMake compile the
kernels with a compiler the gate never judged them with, silently. :func:`compiler_requests` lists them all.
The warm path (:func:`r1build.build.warm_kernel_settings`) imports none of this: it steps aside wherever one of
these places so much as mentions ``CMAKE_CUDA_COMPILER``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ARG_VARIABLES", "NAME", "compiler_requests"]

NAME = "CMAKE_CUDA_COMPILER"
ARG_VARIABLES = ("CMAKE_ARGS", "SKBUILD_CMAKE_ARGS", "SKBUILD_CMAKE_DEFINE")
"""The environment variables that can name it."""


def _defines(args: Sequence[str]) -> Iterator[str]:
    """The values of ``-DCMAKE_CUDA_COMPILER[:TYPE]=value`` (also as ``-D`` ``NAME=value``) among ``args``."""
    for i, arg in enumerate(args):
        if arg == "-D" and i + 1 < len(args):
            body = args[i + 1]
        elif arg.startswith("-D"):
            body = arg[2:]
        else:
            continue
        name, sep, value = body.strip().partition("=")
        if sep and name.partition(":")[0].strip() == NAME:
            yield value


def _as_args(value: Any) -> list[str]:
    if isinstance(value, str):
        return [part for part in value.split(";") if part]
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def _pyproject_cmake(project: Path) -> dict[str, Any]:
    from ..manifest.tomltext import TomlProblem, parse_toml

    try:
        data = parse_toml((project / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, TomlProblem):
        return {}  # scikit-build-core reports a pyproject.toml it cannot read
    section: Any = data
    for name in ("tool", "scikit-build", "cmake"):
        section = section.get(name, {}) if isinstance(section, dict) else {}
    return section if isinstance(section, dict) else {}


def compiler_requests(
    config_settings: Mapping[str, Any] | None, environ: Mapping[str, str], project: Path
) -> list[tuple[str, str]]:
    """Each ``(where, value)`` that names CMake's CUDA compiler for this build, other than the config setting
    ``cmake.define.CMAKE_CUDA_COMPILER`` (checked where it is handed over)."""
    found: list[tuple[str, str]] = []
    config = config_settings or {}
    found += [("CMAKE_ARGS", v) for v in _defines(shlex.split(environ.get("CMAKE_ARGS", "")))]
    found += [("SKBUILD_CMAKE_ARGS", v) for v in _defines(_as_args(environ.get("SKBUILD_CMAKE_ARGS", "")))]
    for part in _as_args(environ.get("SKBUILD_CMAKE_DEFINE", "")):
        name, sep, value = part.partition("=")
        if sep and name.partition(":")[0].strip() == NAME:
            found.append(("SKBUILD_CMAKE_DEFINE", value))
    found += [("config setting cmake.args", v) for v in _defines(_as_args(config.get("cmake.args")))]
    cmake = _pyproject_cmake(project)
    found += [("pyproject.toml [tool.scikit-build] cmake.args", v) for v in _defines(_as_args(cmake.get("args")))]
    define = cmake.get("define")
    if isinstance(define, dict) and NAME in define:
        found.append((f"pyproject.toml [tool.scikit-build] cmake.define.{NAME}", str(define[NAME])))
    return found
