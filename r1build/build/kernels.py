"""The cold path of the hooks: resolve and emit the kernels of a project (:func:`kernel_settings`), reusing the
last locked build's generated files where its stamp holds (:func:`prepare_kernels`); the config settings of the
hooks that resolve nothing and of an sdist.

Everything beyond the standard library is imported inside the functions: only a cold build pays for it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from .warm import COMPILER_DEFINE, KERNELS_DEFINE, REUSED, HookSettings, compiler_path, ours

if TYPE_CHECKING:
    from ..records import ResolveOptions
    from .options import ConfigSettings

__all__ = ["kernel_settings", "one_compiler", "plain_settings", "prepare_kernels", "sdist_config_settings"]


def kernel_settings(
    config_settings: HookSettings, project_dir: Path | None = None, *, editable: bool = False
) -> ConfigSettings:
    """Resolve and emit the kernels of ``project_dir`` (the working directory); the config settings for
    scikit-build-core, with the generated CMake file defined and r1build's own keys taken out.

    A locked build whose inputs are all unchanged since the last locked build reuses its generated files (see
    :mod:`r1build.build.stamp`); every other build resolves.
    """
    from .fresh import fresh_if_nvcc_changed
    from .options import split_settings

    options, rest = split_settings(config_settings)
    project = (project_dir or Path.cwd()).resolve()
    compiler = rest[COMPILER_DEFINE] = one_compiler(rest.get(COMPILER_DEFINE), config_settings, project)
    cmake_file = prepare_kernels(project, options, ours(config_settings), editable=editable)
    fresh_if_nvcc_changed(project, compiler, rest)
    rest[KERNELS_DEFINE] = cmake_file.resolve().as_posix()
    return rest


def prepare_kernels(
    project: Path,
    options: ResolveOptions,
    given: Mapping[str, str | list[str]] | None = None,
    *,
    editable: bool = False,
) -> Path:
    """The generated CMake file of ``project``: the last locked build's where its stamp holds, else resolved and
    emitted now (``given``: the ``r1build.*`` config settings that parsed to ``options``, which a stamp keeps
    for :func:`build_wheel`'s warm path; ``editable``: an editable build's, which emits into the project
    always)."""
    from ..events import Note, emit
    from .stamp import read_valid_stamp

    cmake_file = read_valid_stamp(project, options)
    if cmake_file is not None:
        emit(Note("info", REUSED.format(cmake_file.parent)))
        return cmake_file
    return _prepare(project, options, given, editable=editable)


def one_compiler(
    given: str | list[str] | None, config_settings: HookSettings = None, project: Path | None = None
) -> str:
    """The nvcc the gate uses (:func:`r1build.toolchain.nvcc.find_nvcc`), to be CMake's ``CMAKE_CUDA_COMPILER`` too.

    Left to itself, CMake picks its CUDA compiler by its own rules (``CUDACXX``, then ``PATH``), which need not
    be the nvcc r1build found (``R1BUILD_NVCC``, ``CUDACXX``, ``CUDA_HOME``, then ``PATH``): the gate would
    judge code with one compiler and the build compile it with another. A ``CMAKE_CUDA_COMPILER`` given as a
    config setting, or anywhere else scikit-build-core hands CMake one (``CMAKE_ARGS``, ``cmake.args``,
    ``SKBUILD_CMAKE_DEFINE``, pyproject.toml: :func:`~r1build.build.compiler.compiler_requests` in ``project``),
    must name the same nvcc, else :class:`~r1build.errors.ConfigError`.
    """
    from ..errors import ConfigError
    from ..toolchain.nvcc import find_nvcc
    from .compiler import compiler_requests

    found = find_nvcc()
    value = given if isinstance(given, str) else (given or [""])[-1]
    requests = [(f"config setting {COMPILER_DEFINE}", value)] if given is not None else []
    requests += compiler_requests(config_settings, os.environ, project or Path.cwd())
    for where, named in requests:
        if compiler_path(named, found) is None:
            shown = named if named.isprintable() else repr(named)
            raise ConfigError(
                f"{where} names {shown} as CMake's CUDA compiler, which is not the nvcc r1build gates with "
                f"({shutil.which(found) or found}); set R1BUILD_NVCC (or CUDACXX) to it instead, so the gate and "
                "the build use one compiler"
            )
    compiler = compiler_path(given, found)
    assert compiler is not None  # checked above
    return compiler


def _elsewhere(project: Path) -> Path | None:
    """Where a wheel build writes its generated kernels when the project folder cannot be written (a read-only
    checkout or mount, from which scikit-build-core itself builds fine): a temporary folder, removed when the
    build's process ends (CMake has used it by then); None when ``.r1build/`` can be written."""
    import atexit
    import tempfile

    folder = where = project / ".r1build"
    try:
        folder.mkdir(exist_ok=True)
        for where in (folder, folder / "generated"):  # the latter where an earlier build made it (as another user)
            if where.is_dir():
                probe = where / f".probe-{os.getpid()}"
                probe.write_bytes(b"")
                probe.unlink()
        return None
    except OSError as exc:
        why = exc.strerror or str(exc)
    from ..events import Note, emit

    out = Path(tempfile.mkdtemp(prefix="r1build-generated-"))
    atexit.register(shutil.rmtree, out, True)
    emit(Note("info", f"{where} cannot be written ({why}): the generated kernels go to {out}, for this build only"))
    return out


def _remove_empty(folder: Path) -> None:
    """``folder`` and the folders in it, where nothing else is in them (a failed build made them and wrote
    nothing)."""
    with suppress(OSError):
        for below in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            below.rmdir()
        folder.rmdir()


def _prepare(
    project: Path, options: ResolveOptions, given: Mapping[str, str | list[str]] | None, *, editable: bool = False
) -> Path:
    """Resolve and emit; after a locked success, stamp the inputs so the next warm locked build can skip this.
    A wheel build of a project folder that cannot be written emits into a temporary folder and stamps nothing
    (:func:`_elsewhere`); an editable one needs its folder, and fails saying so."""
    from ..resolve import prepare_build
    from .stamp import forget_stamp, write_stamp

    folder = project / ".r1build"
    made = not folder.exists()  # by this build: a failure leaves no empty folder behind
    out_dir = None if editable else _elsewhere(project)
    if out_dir is None:
        forget_stamp(project)
    try:
        cmake_file = prepare_build(project, options, out_dir=out_dir)
    except BaseException:
        if made:
            _remove_empty(folder)
        raise
    if options.locked and out_dir is None:
        from ..manifest import find_manifest, load_manifest
        from ..manifest.inputs import manifest_inputs
        from ..toolchain.nvcc import find_nvcc, nvcc_lookup

        inputs = manifest_inputs(load_manifest(find_manifest(project), check_references=False))
        write_stamp(project, options, given, inputs, cmake_file, (find_nvcc(), nvcc_lookup()))
    return cmake_file


def plain_settings(config_settings: HookSettings) -> ConfigSettings:
    """Config settings for hooks that resolve nothing: r1build's keys checked and taken out."""
    from .options import split_settings

    _options, rest = split_settings(config_settings)
    return rest


def sdist_config_settings(config_settings: HookSettings) -> ConfigSettings:
    """The config settings of an sdist build (:func:`~r1build.build.sdist.sdist_settings`), after checking that
    the project builds offline from what it carries."""
    from ..cache import resolve_cache_dir
    from ..manifest import find_manifest, load_manifest
    from .options import split_settings
    from .sdist import check_offline_buildable, sdist_settings

    project = Path.cwd()
    options, settings = split_settings(config_settings)
    manifest = load_manifest(find_manifest(project), check_references=False)
    check_offline_buildable(project, manifest)
    return sdist_settings(project, manifest, settings, cache_dir=resolve_cache_dir(options.cache_dir))
