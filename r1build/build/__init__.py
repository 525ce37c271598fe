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

Every hook stands alone: frontends may call each in a fresh process, so nothing is kept between them. A warm
locked ``build_wheel`` imports nothing of r1build but the warm-build stamp (:mod:`r1build.build.stamp`) until
the stamp fails to hold: what it adds to scikit-build-core's own rebuild is a millisecond or two.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from scikit_build_core import build as _skbuild

from .stamp import read_warm_stamp

if TYPE_CHECKING:
    from .options import BuildOptions, ConfigSettings

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


def _ours(config_settings: HookSettings) -> dict[str, str | list[str]]:
    """r1build's config settings as given (``r1build.*``)."""
    return {k: v for k, v in (config_settings or {}).items() if k.startswith(PREFIX)}


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
    compiler = rest[COMPILER_DEFINE] = _one_compiler(rest.get(COMPILER_DEFINE), config_settings, project)
    cmake_file = prepare_kernels(project, options, _ours(config_settings), editable=editable)
    fresh_if_nvcc_changed(project, compiler, rest)
    rest[KERNELS_DEFINE] = cmake_file.resolve().as_posix()
    return rest


def warm_kernel_settings(config_settings: HookSettings) -> ConfigSettings | None:
    """What :func:`kernel_settings` returns, when the stamp of the last locked build holds for these config
    settings in the working directory (:func:`~r1build.build.stamp.read_warm_stamp`); None otherwise, and then
    :func:`kernel_settings` decides. Nothing of r1build is imported here beyond the stamp."""
    if _may_name_a_compiler(config_settings, Path.cwd()):  # the full path checks which (build.compiler)
        return None
    try:
        warm = read_warm_stamp(Path.cwd().resolve(), _ours(config_settings))
    except OSError:
        return None
    if warm is None:
        return None
    cmake_file, nvcc = warm
    rest = {k: v for k, v in (config_settings or {}).items() if not k.startswith(PREFIX)}
    compiler = _compiler(rest.get(COMPILER_DEFINE), nvcc)
    if compiler is None:  # another nvcc named for CMake: kernel_settings says so
        return None
    rest[COMPILER_DEFINE] = compiler
    rest[KERNELS_DEFINE] = cmake_file.resolve().as_posix()
    # the line StderrRenderer.line writes, without importing the boundary for it
    sys.stderr.write(f"r1build: {REUSED.format(cmake_file.parent)}\n")
    sys.stderr.flush()
    return rest


def prepare_kernels(
    project: Path,
    options: BuildOptions,
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


def _compiler(given: str | list[str] | None, nvcc: str) -> str | None:
    """``nvcc`` as CMake's ``CMAKE_CUDA_COMPILER`` (an absolute path); None when the config setting ``given``
    names another compiler."""
    path = shutil.which(nvcc) or nvcc
    if given is not None:
        value = given if isinstance(given, str) else given[-1]
        if os.path.realpath(shutil.which(value) or value) != os.path.realpath(path):
            return None
    return str(Path(path).absolute())


def _may_name_a_compiler(config_settings: HookSettings, project: Path) -> bool:
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


def _one_compiler(
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
        if _compiler(named, found) is None:
            raise ConfigError(
                f"{where} names {named} as CMake's CUDA compiler, which is not the nvcc r1build gates with "
                f"({shutil.which(found) or found}); set R1BUILD_NVCC (or CUDACXX) to it instead, so the gate and "
                "the build use one compiler"
            )
    compiler = _compiler(given, found)
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
    project: Path, options: BuildOptions, given: Mapping[str, str | list[str]] | None, *, editable: bool = False
) -> Path:
    """Resolve and emit; after a locked success, stamp the inputs so the next warm locked build can skip this.
    A wheel build of a project folder that cannot be written emits into a temporary folder and stamps nothing
    (:func:`_elsewhere`); an editable one needs its folder, and fails saying so."""
    from ..resolve import prepare_build
    from .stamp import forget_stamp, write_stamp

    ours = project / ".r1build"
    made = not ours.exists()  # by this build: a failure leaves no empty folder behind
    out_dir = None if editable else _elsewhere(project)
    if out_dir is None:
        forget_stamp(project)
    try:
        cmake_file = prepare_build(
            project,
            locked=options.locked,
            frozen=options.frozen,
            generate=options.generate,
            evaluate=options.evaluate,
            cache_dir=options.cache_dir,
            remote_cache=options.remote_cache,
            out_dir=out_dir,
        )
    except BaseException:
        if made:
            _remove_empty(ours)
        raise
    if options.locked and out_dir is None:
        from ..manifest import find_manifest, load_manifest
        from ..manifest.inputs import manifest_inputs
        from ..toolchain.nvcc import find_nvcc, nvcc_lookup

        inputs = manifest_inputs(load_manifest(find_manifest(project), check_references=False))
        write_stamp(project, options, given, inputs, cmake_file, (find_nvcc(), nvcc_lookup()))
    return cmake_file


def _boundary() -> AbstractContextManager[object]:
    """:func:`~r1build.build.boundary.frontend_boundary`, imported when a hook needs it."""
    from .boundary import frontend_boundary

    return frontend_boundary()


def _plain_settings(config_settings: HookSettings) -> ConfigSettings:
    """Config settings for hooks that resolve nothing: r1build's keys checked and taken out."""
    from .options import split_settings

    _options, rest = split_settings(config_settings)
    return rest


@contextmanager
def _fixed_date() -> Iterator[None]:
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


def _keys_left_out(names: list[str], what: str) -> None:
    """Warn of each private key taken out of the ``what`` (:mod:`r1build.build.keyfiles`)."""
    if not names:
        return
    from ..events import Note, emit

    with _boundary():
        for name in names:
            emit(
                Note(
                    "warning",
                    f"{name} holds a private key: left out of the {what}; keep keys out of the project folder "
                    "(and out of the repository)",
                )
            )


def _for_sdist(config_settings: HookSettings) -> ConfigSettings:
    from ..cache import resolve_cache_dir
    from ..manifest import find_manifest, load_manifest
    from .options import split_settings
    from .sdist import check_offline_buildable, sdist_settings

    project = Path.cwd()
    options, settings = split_settings(config_settings)
    manifest = load_manifest(find_manifest(project), check_references=False)
    check_offline_buildable(project, manifest)
    return sdist_settings(project, manifest, settings, cache_dir=resolve_cache_dir(options.cache_dir))


def build_wheel(
    wheel_directory: str, config_settings: HookSettings = None, metadata_directory: str | None = None
) -> str:
    """PEP 517: resolve the kernels (unless a warm locked build's stamp holds), then build the wheel with
    scikit-build-core; returns its file name."""
    settings = warm_kernel_settings(config_settings)
    if settings is None:
        with _boundary():
            settings = kernel_settings(config_settings)
    with _fixed_date():
        name = _skbuild.build_wheel(wheel_directory, settings, metadata_directory)
    from .keyfiles import strip_wheel  # standard library only: a warm build's cost stays a millisecond or two

    _keys_left_out(strip_wheel(Path(wheel_directory) / name), "wheel")
    return name


def build_editable(
    wheel_directory: str, config_settings: HookSettings = None, metadata_directory: str | None = None
) -> str:
    """PEP 660: resolve the kernels, then build the editable wheel with scikit-build-core. CMake gets a wrapper
    that resolves the kernels again when their inputs change (:mod:`r1build.build.editable`), so a rebuild on
    import (scikit-build-core's ``editable.rebuild``) builds edited kernels too."""
    from .editable import write_editable
    from .options import split_settings

    with _boundary():
        settings = kernel_settings(config_settings, editable=True)
        options, _rest = split_settings(config_settings)
        cmake_file = Path(str(settings[KERNELS_DEFINE]))
        settings[KERNELS_DEFINE] = write_editable(Path.cwd().resolve(), options, cmake_file).as_posix()
    with _fixed_date():
        return _skbuild.build_editable(wheel_directory, settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: HookSettings = None) -> str:
    """PEP 517: the sdist, carrying manifest, lock, references, sources and vendored winners, not ``.r1build/``."""
    with _boundary():
        settings = _for_sdist(config_settings)
    with _fixed_date():
        name = _skbuild.build_sdist(sdist_directory, settings)
    from .keyfiles import strip_sdist

    _keys_left_out(strip_sdist(Path(sdist_directory) / name), "sdist")
    return name


def get_requires_for_build_wheel(config_settings: HookSettings = None) -> list[str]:
    """PEP 517: scikit-build-core's extra requirements (cmake / ninja where the system has none)."""
    with _boundary():
        settings = _plain_settings(config_settings)
    return _skbuild.get_requires_for_build_wheel(settings)


def get_requires_for_build_editable(config_settings: HookSettings = None) -> list[str]:
    """PEP 660: as for a wheel."""
    with _boundary():
        settings = _plain_settings(config_settings)
    return _skbuild.get_requires_for_build_editable(settings)


def get_requires_for_build_sdist(config_settings: HookSettings = None) -> list[str]:
    """PEP 517: scikit-build-core's requirements for an sdist."""
    with _boundary():
        settings = _plain_settings(config_settings)
    return _skbuild.get_requires_for_build_sdist(settings)


# scikit-build-core leaves these out when a project's metadata can depend on the build's outcome; frontends
# then build the wheel instead, and so must we.
if hasattr(_skbuild, "prepare_metadata_for_build_wheel"):

    def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: HookSettings = None) -> str:
        """PEP 517: the wheel's metadata (no kernels needed); returns the ``.dist-info`` folder name."""
        with _boundary():
            settings = _plain_settings(config_settings)
        return _skbuild.prepare_metadata_for_build_wheel(metadata_directory, settings)

    def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: HookSettings = None) -> str:
        """PEP 660: the editable wheel's metadata."""
        with _boundary():
            settings = _plain_settings(config_settings)
        return _skbuild.prepare_metadata_for_build_editable(metadata_directory, settings)

    __all__ += ["prepare_metadata_for_build_editable", "prepare_metadata_for_build_wheel"]
