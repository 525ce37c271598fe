"""The CMake file ``r1build_kernels.cmake``: the kernels as one static library a host project links.

A host project uses it in two lines::

    include(${R1BUILD_KERNELS_CMAKE})
    target_link_libraries(ext PRIVATE r1build::kernels)

Decisions, and why:

* **one STATIC library, each source compiled for exactly the archs its variant won**: per source, the
  ``--generate-code`` options CMake itself writes for ``CUDA_ARCHITECTURES`` (the library's own is ``OFF``),
  each with the code its spelling asks for (:mod:`r1build.manifest.archs`): ``80-real`` machine code, ``90``
  machine code and PTX, ``90-virtual`` PTX alone. One target rather than one per variant: a warm rebuild's
  configure step and scikit-build-core's reading of CMake's file API cost per target, and a rebuild with
  nothing changed should cost what the same sources in a plain project cost. By default the kernel's highest
  arch carries its PTX, so a GPU newer than every target JIT-compiles it (untested there, but running) instead
  of failing with ``cudaErrorNoKernelImageForDevice``; ``ptx = false`` in the manifest turns that off.
* **hidden visibility** (``CUDA_VISIBILITY_PRESET hidden``, unless the manifest's ``visibility`` is
  ``default``): the entry points link into the host's extension but are not exported from it, so two
  extensions built with r1build and loaded into one process never call each other's kernels.
* **reproducible objects**: nvcc names anonymous namespaces after the source's absolute path, which would make
  every checkout build different bytes; each translation unit is compiled as if its path were its file name
  (``-Xcudafe --orig_src_path_name=<file>``, a source's own option: unique per project since file names carry
  the variant digest).
* **the static CUDA runtime** (``CUDA::cudart_static``) by default: an extension module built this way needs
  only the driver on the machine it runs on, not a matching ``libcudart.so``. Streams are driver handles, so
  streams created by another copy of the runtime (PyTorch, CuPy) work. ``-DR1BUILD_CUDART=shared`` links
  ``CUDA::cudart`` instead. CMake's own runtime selection is switched off (``CUDA_RUNTIME_LIBRARY None``) so
  only that one runtime is linked.
* **position-independent code**, since the library ends up in a shared object (a Python extension).
* **no absolute paths**: sources are found relative to ``CMAKE_CURRENT_LIST_DIR``, the directory of this file,
  which is also the public include directory (``r1build_kernels.h``).
* **the manifest's nvcc flags**: ``-std=c++NN`` becomes ``CUDA_STANDARD``; include search paths (``-Iinclude``,
  ``-isystem=...``) become the library's include directories, a relative one under the manifest's folder (found
  relative to this file, as the gate finds it), so the build sees the headers the gate compiled with; the others
  are passed verbatim as one ``SHELL:`` group so CMake neither splits nor de-duplicates them (``-Xptxas -O3``
  stays a pair).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from ..manifest.archs import ArchTarget, arch_info, suffix_of
from ..manifest.flags import include_flag
from ..manifest.model import Manifest
from .nbmodule import BINDINGS_CPP
from .plan import MARKER, KernelPlan, arch_order, describe_origin
from .pymodule import BINDINGS_PY, BINDINGS_PYI
from .sources import DISPATCH_NAME

__all__ = ["CMAKE_NAME", "LIBRARY", "cmake_quote", "render_cmake"]

CMAKE_NAME = "r1build_kernels.cmake"
LIBRARY = "r1build_kernels"
_STD = re.compile(r"^--?std=c\+\+(\d+)$")


def cmake_quote(text: str) -> str:
    """A CMake quoted argument holding ``text`` literally."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace(";", "\\;")
    return f'"{escaped}"'


def _arch_options(targets: Sequence[ArchTarget]) -> list[str]:
    """nvcc's options for these targets, as CMake writes them for ``CUDA_ARCHITECTURES`` ``80-real`` (machine
    code), ``90`` (machine code and PTX) and ``90-virtual`` (PTX)."""
    options = []
    for t in sorted(targets, key=lambda t: arch_order(t.arch)):
        number = arch_info(t.arch).number
        codes = [f"compute_{number}"] * t.ptx + [f"sm_{number}"] * t.sass
        options.append(f"--generate-code=arch=compute_{number},code=[{','.join(codes)}]")
    return options


def _split_flags(flags: Sequence[str]) -> tuple[str | None, list[tuple[bool, str]], list[str]]:
    """The C++ standard, the include folders (whether a system one, the folder as written) and the other flags."""
    standard = None
    includes: list[tuple[bool, str]] = []
    rest = []
    for flag in flags:
        m = _STD.match(flag)
        found = include_flag(flag)
        if m:
            standard = m.group(1)
        elif found is not None:
            option, folders = found
            system = option in ("-isystem=", "--system-include=")
            includes += [(system, folder) for folder in folders]
        else:
            rest.append(flag)
    return standard, includes, rest


def _include_lines(includes: Sequence[tuple[bool, str]], root: str) -> list[str]:
    """``target_include_directories`` of the manifest's include folders, relative ones under ``root`` (a CMake
    expression of the manifest's folder), in their order."""
    lines = []
    for system, folder in includes:
        where = cmake_quote(folder) if Path(folder).is_absolute() else f'"{root}/{cmake_quote(folder)[1:-1]}"'
        lines.append(f"target_include_directories({LIBRARY} {'SYSTEM ' if system else ''}PRIVATE {where})")
    return lines


def _source(source: str, targets: Sequence[ArchTarget]) -> list[str]:
    """A source of the library with its own options: the archs it is compiled for, and its path as its file name
    (a source's options are passed as they are: no ``SHELL:`` groups here)."""
    options = ["-Xcudafe", f"--orig_src_path_name={source}", *_arch_options(targets)]
    return [
        f'list(APPEND _r1build_sources "${{_r1build_dir}}/{source}")',
        f'set_source_files_properties("${{_r1build_dir}}/{source}" PROPERTIES COMPILE_OPTIONS',
        f'  "{";".join(cmake_quote(option)[1:-1] for option in options)}")',
    ]


def render_cmake(manifest: Manifest, plans: Sequence[KernelPlan], out_dir: Path | None = None) -> str:
    """The CMake file's text, for the folder ``out_dir`` (where it is written: the manifest's folder is named
    relative to it; None: by its absolute path)."""
    alias = manifest.settings.target
    lines = [*_preamble(alias), *_source_lines(plans), ""]
    lines += _library_lines(manifest, plans, _manifest_root(manifest, out_dir))
    if alias != LIBRARY:
        lines.append(f"add_library({alias} ALIAS {LIBRARY})")
    if manifest.settings.bindings.python is not None:
        lines += _bindings_lines(manifest.settings.bindings.python)
    return "\n".join(lines) + "\n"


def _manifest_root(manifest: Manifest, out_dir: Path | None) -> str:
    """The manifest's folder as the CMake file names it: relative to ``out_dir``, or absolute when None."""
    if out_dir is None:
        return cmake_quote(manifest.root.resolve().as_posix())[1:-1]
    relative = Path(os.path.relpath(manifest.root.resolve(), out_dir.resolve())).as_posix()
    return "${_r1build_dir}" + ("" if relative == "." else "/" + cmake_quote(relative)[1:-1])


def _preamble(alias: str) -> list[str]:
    """The comment that says what the file is, and the CMake and CUDA set-up before the sources."""
    lines = [
        f"# {MARKER} from the manifest's kernels: do not edit, it is rewritten on every build.",
        "#",
        "# The kernels as one static library. In a host project:",
        "#   include(${R1BUILD_KERNELS_CMAKE})",
        f"#   target_link_libraries(ext PRIVATE {alias})",
        "#",
        "# Each variant is compiled for exactly the archs it won (PTX where the manifest's archs and its ptx",
        "# setting ask for it); the entry points have hidden visibility unless the manifest asks otherwise. The",
        "# CUDA runtime is linked statically unless R1BUILD_CUDART is set to shared.",
        "include_guard(GLOBAL)",
        "if(CMAKE_VERSION VERSION_LESS 3.18)",
        '  message(FATAL_ERROR "r1build kernels need CMake 3.18 or newer, this is ${CMAKE_VERSION}")',
        "endif()",
        "get_property(_r1build_languages GLOBAL PROPERTY ENABLED_LANGUAGES)",
        'if(NOT "CUDA" IN_LIST _r1build_languages)',
        "  enable_language(CUDA)",
        "endif()",
        "find_package(CUDAToolkit REQUIRED)",
        'set(R1BUILD_CUDART "static" CACHE STRING "CUDA runtime the r1build kernels link: static or shared")',
        "set_property(CACHE R1BUILD_CUDART PROPERTY STRINGS static shared)",
        'set(_r1build_dir "${CMAKE_CURRENT_LIST_DIR}")',
        "set(_r1build_sources)",
    ]
    return lines


def _source_lines(plans: Sequence[KernelPlan]) -> list[str]:
    """Each variant's source with the archs it won, and the dispatcher's."""
    lines: list[str] = []
    for p in plans:
        for variant in p.variants:
            lines += ["", f"# {variant.kernel} for {', '.join(variant.archs)}: {describe_origin(variant.candidate)}"]
            lines += _source(variant.file_name, [p.target(arch) for arch in variant.archs])
    dispatched = [p for p in plans if p.dispatched]
    if dispatched:
        every = {a for p in dispatched for a in p.archs}
        # a family arch beside its plain sibling (two kernels' archs) is left out: nvcc builds no object of both
        archs = sorted((a for a in every if not (suffix_of(a) == "f" and a[:-1] in every)), key=arch_order)
        lines += ["", "# the per-arch dispatcher of " + ", ".join(p.spec.name for p in dispatched)]
        lines += _source(DISPATCH_NAME, [ArchTarget(arch, "sass") for arch in archs])  # no device code in it
    return lines


def _library_lines(manifest: Manifest, plans: Sequence[KernelPlan], root: str) -> list[str]:
    """The library target (an interface one when there are no kernels) with its options and the CUDA runtime."""
    standard, includes, flags = _split_flags(manifest.settings.nvcc_flags)
    lines: list[str] = []
    if plans:
        scope = "PUBLIC"
        props = [
            "CUDA_ARCHITECTURES OFF",  # each source has its own (above)
            "POSITION_INDEPENDENT_CODE ON",
            "CUDA_SEPARABLE_COMPILATION OFF",
            "CUDA_RUNTIME_LIBRARY None",
            "LINKER_LANGUAGE CUDA",
        ]
        if manifest.settings.visibility == "hidden":
            props += ["CUDA_VISIBILITY_PRESET hidden"]
        if standard:
            props += [f"CUDA_STANDARD {standard}", "CUDA_STANDARD_REQUIRED ON", "CUDA_EXTENSIONS OFF"]
        lines += [
            f"add_library({LIBRARY} STATIC ${{_r1build_sources}})",
            f"set_target_properties({LIBRARY} PROPERTIES",
            *(f"  {prop}" for prop in props),
            ")",
        ]
        lines += _include_lines(includes, root)
        if flags:
            lines.append(f"target_compile_options({LIBRARY} PRIVATE {cmake_quote('SHELL:' + shlex.join(flags))})")
    else:
        scope = "INTERFACE"
        lines += ["# no kernels: the header alone", f"add_library({LIBRARY} INTERFACE)"]
    lines += [
        f'target_include_directories({LIBRARY} {scope} "${{_r1build_dir}}")',
        'if(R1BUILD_CUDART STREQUAL "shared")',
        f"  target_link_libraries({LIBRARY} {scope} CUDA::cudart)",
        "else()",
        f"  target_link_libraries({LIBRARY} {scope} CUDA::cudart_static)",
        "endif()",
    ]
    return lines


def _bindings_lines(module: str) -> list[str]:
    """The function ``r1build_python_bindings()`` that builds and installs the emitted Python bindings of
    ``module`` (``mypkg._kernels``): the nanobind module ``<module>_ext``, the wrapper and its stubs."""
    package, _, leaf = module.rpartition(".")
    ext = f"{leaf}_ext"
    where = cmake_quote(package.replace(".", "/"))
    return [
        "",
        f"# The Python bindings {module}: call r1build_python_bindings() once, after including this file. It",
        f"# builds the nanobind module {package}.{ext} (linking {LIBRARY}) and installs it with the wrapper",
        f"# {leaf}.py and its stubs {leaf}.pyi into {where}. Needs nanobind (a build requirement of the project).",
        'set(_r1build_bindings_dir "${CMAKE_CURRENT_LIST_DIR}")',
        "function(r1build_python_bindings)",
        "  if(NOT COMMAND nanobind_add_module)",
        "    find_package(Python 3.10 REQUIRED COMPONENTS Interpreter Development.Module)",
        "    find_package(nanobind CONFIG REQUIRED)",
        "  endif()",
        f'  nanobind_add_module({ext} NB_STATIC "${{_r1build_bindings_dir}}/{BINDINGS_CPP}")',
        f"  target_link_libraries({ext} PRIVATE {LIBRARY})",
        f"  install(TARGETS {ext} LIBRARY DESTINATION {where})",
        f'  install(FILES "${{_r1build_bindings_dir}}/{BINDINGS_PY}" DESTINATION {where} RENAME {leaf}.py)',
        f'  install(FILES "${{_r1build_bindings_dir}}/{BINDINGS_PYI}" DESTINATION {where} RENAME {leaf}.pyi)',
        "endfunction()",
    ]
