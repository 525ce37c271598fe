"""Reading and validating a manifest: ``kernels.toml`` or ``[tool.r1build]`` in pyproject.toml.

Every error is a :class:`~r1build.errors.ManifestError` naming the file, the line and the key.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from typing import Any

from ..convert import ConversionProblem, KeyPath, convert, did_you_mean, field_key, fields, replace
from ..digests import toml_digest
from ..errors import ManifestError
from .addresses import cluster_address_problem, endpoint_url_problem, remote_url_problem
from .archs import ArchTarget, family_clash, merge_targets, parse_target, settle_codes
from .bounds import check_numbers
from .flags import defined_macro, flag_problem
from .flops import flops_problem
from .identifiers import Kind, name_problem
from .locate import Validator
from .model import DTYPE_BYTES, DTYPES, INTEGER_DTYPES, Arg, KernelSpec, Manifest, ProjectSettings
from .places import check_lock_is_no_kernel_file, check_project_paths, source_file_problem
from .reference import ReferenceFiles, ReferenceProblem, load_reference
from .tomltext import TomlProblem, parse_toml
from .values import integer_range, tunable_value_problem, value_problem

__all__ = [
    "find_manifest",
    "load_manifest",
    "located_error",
    "named_variables",
    "nearest_manifest",
]

_CMAKE_TARGET = re.compile(r"[A-Za-z0-9_.+\-]+(?:::[A-Za-z0-9_.+\-]+)*")
_SYMBOL_PREFIX = re.compile(r"(?!r1build)(?!.*__)[A-Za-z][A-Za-z0-9_]{0,31}", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFERENCE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)
TEST_SHAPE_BYTES = 1 << 30
"""Most bytes all arrays of a kernel may take at one test shape: ``check`` runs the reference there on the CPU,
and correctness needs no more (bench-shapes are for large sizes)."""
BENCH_SHAPE_BYTES = 256 << 30
"""Most bytes all arrays of a kernel may take at one benchmark shape: more than any GPU's memory."""
_MENTIONS_R1BUILD = re.compile(r"^\s*\[+\s*tool\s*\.\s*r1build\b", re.MULTILINE)
MAX_VARIANTS = 4096
"""Most value sets a kernel's tunables may give (the product of their value counts)."""


def _manifest_in(folder: Path) -> Path | None:
    for name in ("kernels.toml", "pyproject.toml"):
        candidate = folder / name
        if candidate.is_symlink() and not candidate.exists():
            raise ManifestError(
                f"a symbolic link to {candidate.readlink()}, which does not exist (or is a loop of links)",
                file=str(candidate),
            )
        if candidate.is_file():
            if name == "pyproject.toml" and not _declares_r1build(candidate):
                continue
            return candidate
    return None


def _declares_r1build(pyproject: Path) -> bool:
    """Whether a pyproject.toml holds ``[tool.r1build]``. One that cannot be read or parsed counts when its text
    names that table, so loading it reports what is wrong with it instead of "no manifest here"."""
    try:
        text = pyproject.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    try:
        tool = parse_toml(text).get("tool")
    except TomlProblem:
        return bool(_MENTIONS_R1BUILD.search(text))
    return isinstance(tool, dict) and "r1build" in tool


def find_manifest(start: Path, *, walk_up: bool = False) -> Path:
    """The manifest for a path: a file itself, or ``kernels.toml`` / pyproject.toml with [tool.r1build] in it.
    With ``walk_up`` (a command run without ``-m``), the nearest such file in ``start`` or a folder above it, as
    cargo finds Cargo.toml."""
    found = nearest_manifest(start, walk_up=walk_up)
    if found is None:
        where = f"{start} or any folder above it" if walk_up else str(start)
        raise ManifestError(f"no kernels.toml (or pyproject.toml with [tool.r1build]) in {where}", file=str(start))
    return found


def nearest_manifest(start: Path, *, walk_up: bool = True) -> Path | None:
    """:func:`find_manifest`, None where there is no manifest at all (a command that also works outside a
    project); still :class:`ManifestError` for one that is there but unusable (a dangling link) or a folder
    that cannot be looked into."""
    try:
        if start.is_file():
            return start
        folders = [start, *start.absolute().parents] if walk_up else [start]
        for folder in folders:
            found = _manifest_in(folder)
            if found is not None:
                return found
    except OSError as exc:  # a name too long for the file system, a folder it may not look into
        raise ManifestError(f"cannot look for a manifest there: {exc.strerror}", file=str(start)) from None
    return None


def named_variables(start: Path, *, walk_up: bool = False) -> frozenset[str]:
    """The environment variables the manifest for ``start`` names (``generation.api-key-env``), read leniently
    and early, before any command loads it, so a warning about unknown ``R1BUILD_*`` variables spares them; empty
    where there is no readable manifest (loading it later reports what is wrong)."""
    try:
        path = nearest_manifest(start, walk_up=walk_up)
        if path is None:
            return frozenset()
        data = parse_toml(path.read_text(encoding="utf-8"))
    except (ManifestError, OSError, UnicodeDecodeError, TomlProblem):
        return frozenset()
    table: object = data
    if path.name == "pyproject.toml":
        tool = data.get("tool")
        table = tool.get("r1build") if isinstance(tool, dict) else None
    generation = table.get("generation") if isinstance(table, dict) else None
    name = generation.get("api-key-env") if isinstance(generation, dict) else None
    return frozenset({name}) if isinstance(name, str) else frozenset()


def _parse(path: Path) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read: {exc.strerror}", file=str(path)) from None
    except UnicodeDecodeError:
        raise ManifestError("not UTF-8 text", file=str(path)) from None
    try:
        data = parse_toml(text)
    except TomlProblem as exc:
        raise ManifestError(exc.message, file=str(path), line=exc.line) from None
    if path.name == "pyproject.toml":
        tool = data.get("tool")
        section = tool.get("r1build") if isinstance(tool, dict) else None
        if not isinstance(section, dict):
            raise ManifestError("no [tool.r1build] table", file=str(path))
        return text, section, ("tool", "r1build")
    return text, data, ()


def located_error(manifest: Manifest, key: KeyPath, message: str) -> ManifestError:
    """A :class:`ManifestError` about ``key`` of a loaded manifest, with the line it is on."""
    table: tuple[str, ...] = ("tool", "r1build") if manifest.path.name == "pyproject.toml" else ()
    try:
        text = manifest.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    return Validator(manifest.path, text, table).fail(key, message)


def load_manifest(path: Path, *, check_references: bool = True) -> Manifest:
    """Read, convert and validate a manifest. ``check_references`` imports each reference module."""
    path = path.resolve()
    text, data, table = _parse(path)
    v = Validator(path, text, table)
    raw_kernels = data.get("kernel", [])
    settings_data = {k: val for k, val in data.items() if k != "kernel"}
    try:
        settings = convert(ProjectSettings, settings_data)
        if not isinstance(raw_kernels, list):
            raise ConversionProblem(("kernel",), "expected an array of tables ([[kernel]])")
        kernels = [convert(KernelSpec, item, ("kernel", i)) for i, item in enumerate(raw_kernels)]
        check_numbers(settings)
        for i, spec in enumerate(kernels):
            check_numbers(spec, ("kernel", i))
    except ConversionProblem as problem:
        message = problem.message
        if len(problem.path) == 1 and message.startswith("unknown key"):
            message = f"unknown key {problem.path[0]!r}" + did_you_mean(
                str(problem.path[0]), [*[field_key(f.name) for f in fields(ProjectSettings)], "kernel"]
            )
        raise v.fail(problem.path, message) from None
    if not kernels:
        raise v.fail(("kernel",), "the manifest declares no kernels ([[kernel]] tables)")
    _check_flag_macros(v, settings.nvcc_flags, kernels)
    _check_bindings(v, settings, kernels)

    raw_settings = settings
    settings = _validate_settings(v, settings)
    check_project_paths(v, settings, path)
    validated, digests = _validate_kernels(v, kernels, path.parent, check_references=check_references)
    check_lock_is_no_kernel_file(v, settings, path.parent, validated)
    _check_torch_bars(v, settings, kernels)
    targets = _settled_targets(raw_settings, settings, kernels)
    return Manifest(
        path=path,
        settings=settings,
        kernels=validated,
        reference_digests=digests,
        targets=targets,
        data_digest=toml_digest(data),
    )


def _check_torch_bars(v: Validator, settings: ProjectSettings, kernels: list[KernelSpec]) -> None:
    """A kernel that must beat torch (its ``must-beat``, else the project's) names a ``torch-reference``."""
    for i, spec in enumerate(kernels):
        bar = spec.must_beat or settings.must_beat
        if bar in ("torch", "library-and-torch") and spec.torch_reference is None:
            where: KeyPath = ("kernel", i, "must-beat") if spec.must_beat else ("must-beat",)
            raise v.fail(
                where,
                f'must-beat = "{bar}" needs a `torch-reference` for kernel {spec.name!r} (a function on torch '
                "tensors next to the manifest, `module:function`); name one or set another `must-beat`",
            )


def _validate_kernels(
    v: Validator, kernels: list[KernelSpec], root: Path, *, check_references: bool
) -> tuple[list[KernelSpec], dict[str, str]]:
    """Validate each kernel, its name apart from the others' in any case, and its references; the validated
    kernels and their reference modules' digests by kernel name."""
    digests: dict[str, str] = {}
    seen: dict[str, int] = {}
    validated = []
    refs = ReferenceFiles(root)
    for i, spec in enumerate(kernels):
        spec = _validate_kernel(v, i, spec, refs)
        if spec.name.lower() in seen:
            other = seen[spec.name.lower()]
            if kernels[other].name == spec.name:
                message = f"duplicate kernel name {spec.name!r} (also kernel[{other}])"
            else:
                message = (
                    f"kernel name {spec.name!r} differs only in case from kernel[{other}]'s "
                    f"{kernels[other].name!r}; the generated file names must differ on every file system"
                )
            raise v.fail(("kernel", i, "name"), message)
        seen[spec.name.lower()] = i
        try:
            digests[spec.name] = refs.digest(spec.reference)
            if check_references:
                load_reference(root, spec.reference)
            else:
                refs.check_statically(spec.reference)
        except ReferenceProblem as exc:
            raise v.fail(("kernel", i, "reference"), str(exc)) from None
        for key, named in (("gpu-reference", spec.gpu_reference), ("torch-reference", spec.torch_reference)):
            if named is None:
                continue
            try:  # never imported here: it imports cupy or torch, which this machine may lack
                refs.check_statically(named)
            except ReferenceProblem as exc:
                raise v.fail(("kernel", i, key), str(exc)) from None
        validated.append(spec)
    return validated, digests


def _arch_targets(v: Validator, archs: list[str], where: KeyPath) -> list[ArchTarget]:
    targets: list[ArchTarget] = []
    for j, arch in enumerate(archs):
        try:
            targets.append(replace(parse_target(arch), key=(*where, j)))
        except ValueError as exc:
            raise v.fail((*where, j), str(exc)) from None
    if not targets:
        raise v.fail(where, "at least one arch is needed")
    merged = merge_targets(targets)
    clash = family_clash(merged)
    if clash is not None:
        plain, family = clash
        later = max(plain, family, key=lambda t: t.key)
        raise v.fail(
            later.key,
            f"{plain.arch} and {family.arch} run on the same GPUs, and nvcc builds no object with both: keep one "
            f"({family.arch} also has the family's own instructions)",
        )
    return merged


def _canonical_archs(v: Validator, archs: list[str], where: KeyPath) -> list[str]:
    return [t.arch for t in _arch_targets(v, archs, where)]


def _settled_targets(
    raw: ProjectSettings, settings: ProjectSettings, kernels: list[KernelSpec]
) -> dict[str, tuple[ArchTarget, ...]]:
    """Each kernel's archs as spelled (its own, else the manifest's), with the code embedded for each decided.
    Run on a manifest that validated, so every spelling parses."""
    v = Validator(Path(), "", ())
    shared = _arch_targets(v, raw.archs, ("archs",))
    return {
        spec.name: tuple(
            settle_codes(
                _arch_targets(v, spec.archs, ("kernel", i, "archs")) if spec.archs is not None else shared, settings.ptx
            )
        )
        for i, spec in enumerate(kernels)
    }


def _validate_settings(v: Validator, settings: ProjectSettings) -> ProjectSettings:
    archs = _canonical_archs(v, settings.archs, ("archs",))
    if not _CMAKE_TARGET.fullmatch(settings.target):
        raise v.fail(
            ("target",),
            f"{settings.target!r} is not a CMake target name (letters, digits, _ . + - and '::' between parts)",
        )
    for j, flag in enumerate(settings.nvcc_flags):
        problem = flag_problem(flag)
        if problem is not None:
            raise v.fail(("nvcc-flags", j), problem)
    g = settings.generation
    if not g.temperatures:
        raise v.fail(("generation", "temperatures"), "needs at least one temperature")
    for j, t in enumerate(g.temperatures):
        if not 0.0 <= t <= 2.0:
            raise v.fail(("generation", "temperatures", j), f"must be in 0..2, got {t:g}")
    if settings.symbol_prefix and not _SYMBOL_PREFIX.fullmatch(settings.symbol_prefix):
        raise v.fail(
            ("symbol-prefix",),
            f"{settings.symbol_prefix!r} cannot start C names: letters, digits and "
            "_, not starting with a digit, _ or 'r1build', without '__'",
        )
    if g.base_url is not None:
        problem = endpoint_url_problem(g.base_url)
        if problem is not None:
            raise v.fail(("generation", "base-url"), problem)
    if g.api_key_env is not None and not _ENV_NAME.fullmatch(g.api_key_env):
        raise v.fail(("generation", "api-key-env"), f"{g.api_key_env!r} is not an environment variable name")
    if g.model is not None and (not g.model.strip() or not g.model.isprintable()):
        raise v.fail(("generation", "model"), f"{g.model!r} is not a model name")
    for j, direction in enumerate(g.directions):
        if not direction.strip():
            raise v.fail(("generation", "directions", j), "must not be empty")
    _check_trusted_keys(v, settings.cache.trusted_keys)
    if settings.cache.url is not None:
        problem = remote_url_problem(settings.cache.url)
        if problem is not None:
            raise v.fail(("cache", "url"), problem)
    if settings.evaluation.cluster is not None:
        problem = cluster_address_problem(settings.evaluation.cluster)
        if problem is not None:
            raise v.fail(("evaluation", "cluster"), problem)
    return replace(settings, archs=archs)


def _check_trusted_keys(v: Validator, lines: list[str]) -> None:
    """Each ``[cache] trusted-keys`` item is an ``ed25519:<base64>`` public key, listed once."""
    if not lines:
        return
    from ..trust.signing import parse_public_key, public_key_problem  # here: most manifests name no key

    seen: dict[str, int] = {}
    for j, line in enumerate(lines):
        problem = public_key_problem(line)
        if problem is not None:
            raise v.fail(("cache", "trusted-keys", j), problem)
        kid = parse_public_key(line).key_id
        if kid in seen:
            raise v.fail(("cache", "trusted-keys", j), f"key {kid} is listed twice (also item {seen[kid]})")
        seen[kid] = j


def _python_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Python identifier the bindings define, or None."""
    if not name.isidentifier() or not name.isascii():
        return f"{name!r} is not a Python identifier"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return f"{name!r} is a Python keyword"
    return None


def _check_bindings(v: Validator, settings: ProjectSettings, kernels: list[KernelSpec]) -> None:
    """``[bindings]``: a module inside a package, an identifier as the torch namespace, and kernel and argument
    names the Python functions can take."""
    b = settings.bindings
    if b.python is not None:
        parts = b.python.split(".")
        problems = [p for p in map(_python_name_problem, parts) if p]
        if problems:
            raise v.fail(("bindings", "python"), f"{b.python!r} is not a dotted module name: {problems[0]}")
        if len(parts) < 2:
            raise v.fail(
                ("bindings", "python"),
                f"{b.python!r} names no package: the module is written into one (mypkg._kernels)",
            )
    if b.torch_namespace is not None:
        problem = _python_name_problem(b.torch_namespace)
        if problem or b.torch_namespace.startswith("_") or b.torch_namespace in ("aten", "prim", "prims"):
            raise v.fail(("bindings", "torch-namespace"), problem or f"{b.torch_namespace!r} is reserved by torch")
        if b.python is None:
            raise v.fail(("bindings", "torch-namespace"), "needs bindings.python: the ops live in that module")
    if b.python is None:
        return
    for i, spec in enumerate(kernels):
        problem = _python_name_problem(spec.name)
        if problem:
            raise v.fail(("kernel", i, "name"), f"{problem}: the bindings define a function of this name")
        for j, arg in enumerate(spec.args):
            problem = _python_name_problem(arg.name)
            outs = [a.name for a in spec.args if a.role == "out"]
            if problem is None and (arg.name == "stream" or (arg.name == "out" and outs != ["out"])):
                problem = (
                    f"{arg.name!r} is a parameter every bound function has (out: the only out array may be so named)"
                )
            elif problem is None and arg.name.startswith(("_", "r1b")):
                problem = f"{arg.name!r} starts with '_' or 'r1b', which the bindings keep for their own names"
            if problem:
                raise v.fail(("kernel", i, "args", j, "name"), f"{problem}: the bindings take it as a parameter")


def _check_flag_macros(v: Validator, flags: list[str], kernels: list[KernelSpec]) -> None:
    """A ``-D`` / ``-U`` flag must not define a name the kernels use: a kernel, argument or tunable name."""
    used: dict[str, str] = {}
    for i, spec in enumerate(kernels):
        used.setdefault(spec.name, f"the name of kernel[{i}]")
        for arg in spec.args:
            used.setdefault(arg.name, f"an argument of kernel[{i}]")
        for tname in spec.tunables:
            used.setdefault(tname, f"a tunable of kernel[{i}] (give its values in tunables)")
    for j, flag in enumerate(flags):
        macro = defined_macro(flag)
        if macro is not None and macro in used:
            raise v.fail(("nvcc-flags", j), f"{flag} defines {macro!r}, {used[macro]}")


MAX_DIMENSIONS = 32
"""The most dimensions an array argument may have (numpy 1, which runs the reference, holds 32)."""


def _normalized_value(dtype: str, value: bool | int | float) -> bool | int | float:
    """A scalar's value as its dtype takes it: floats for float dtypes (``eps = 1`` is 1.0), integers for integer
    dtypes (``k = 3.0`` is 3)."""
    if dtype == "bool":
        return value
    return int(value) if dtype in INTEGER_DTYPES else float(value)


def _check_ident(v: Validator, name: str, where: KeyPath, what: str, kind: Kind) -> None:
    problem = name_problem(name, kind)
    if problem is not None:
        shown = name if len(name) <= 60 else name[:40] + "..."
        raise v.fail(where, f"{what} {shown!r} {problem}")


def _array_bytes(arg: Arg, shape: dict[str, int]) -> int:
    count = 1
    for dim in arg.shape or []:
        count *= dim if isinstance(dim, int) else shape.get(dim, 1)
    return count * DTYPE_BYTES[arg.dtype]


def _check_shapes(v: Validator, shapes: list[dict[str, int]], sizes: dict[str, str], where: KeyPath) -> None:
    if not shapes:
        raise v.fail(where, "at least one shape is needed")
    for j, shape in enumerate(shapes):
        for key, value in shape.items():
            if key not in sizes:
                hint = did_you_mean(key, list(sizes))
                known = ", ".join(sizes) or "none"
                raise v.fail((*where, j, key), f"{key!r} is not a size of this kernel{hint} (sizes: {known})")
            if value < 1:
                raise v.fail((*where, j, key), f"size {key} must be at least 1, got {value}")
            _, hi = integer_range(sizes[key])
            if value > hi:
                raise v.fail(
                    (*where, j, key), f"size {key} = {value} does not fit its dtype {sizes[key]} (at most {hi})"
                )
        missing = [s for s in sizes if s not in shape]
        if missing:
            raise v.fail((*where, j), f"shape does not give size(s) {', '.join(missing)}")


def _validate_kernel(v: Validator, i: int, spec: KernelSpec, refs: ReferenceFiles) -> KernelSpec:
    at: KeyPath = ("kernel", i)
    root = refs.root
    _check_ident(v, spec.name, (*at, "name"), "kernel name", "kernel")
    if not spec.description.strip():
        raise v.fail((*at, "description"), "must not be empty")
    if not spec.args:
        raise v.fail((*at, "args"), "a kernel needs at least one argument")
    names: dict[str, int] = {}
    args = list(spec.args)
    for j, arg in enumerate(spec.args):
        args[j] = _validate_arg(v, spec, arg, (*at, "args", j), names)
        names[arg.name] = j
    size_dtypes = {a.name: a.dtype for a in spec.args if a.is_size}
    _check_dims(v, spec, at, list(size_dtypes))
    if not any(a.role in ("out", "inout") for a in spec.args):
        raise v.fail((*at, "args"), "the kernel has no 'out' or 'inout' array: it computes nothing")
    _check_shapes(v, spec.test_shapes, size_dtypes, (*at, "test-shapes"))
    _check_test_shape_bytes(v, spec, at)
    _check_shapes(v, spec.bench_shapes, size_dtypes, (*at, "bench-shapes"))
    for key, rel in [("baseline", spec.baseline), *[("candidates", c) for c in spec.candidates]]:
        if rel is not None:
            problem = source_file_problem(root, rel)
            if problem is not None:
                raise v.fail((*at, key), problem)
    _check_tunables(v, spec, at, names)
    archs = _canonical_archs(v, spec.archs, (*at, "archs")) if spec.archs is not None else None
    if spec.alignment is not None and (spec.alignment < 1 or spec.alignment & (spec.alignment - 1)):
        raise v.fail((*at, "alignment"), "must be a power of two")
    if spec.flops is not None:
        problem = flops_problem(spec.flops, list(size_dtypes), [*spec.test_shapes, *spec.bench_shapes])
        if problem is not None:
            raise v.fail((*at, "flops"), problem)
    _check_references(v, spec, at, refs)
    return replace(spec, archs=archs, args=args)


def _validate_arg(v: Validator, spec: KernelSpec, arg: Arg, where: KeyPath, names: dict[str, int]) -> Arg:
    """Check one argument (``names``: those declared before it); a scalar's value comes back normalized."""
    if arg.name == "stream":
        raise v.fail((*where, "name"), "'stream' is implied as the last parameter; do not declare it")
    _check_ident(v, arg.name, (*where, "name"), "argument name", "argument")
    if arg.name in names:
        raise v.fail((*where, "name"), f"duplicate argument {arg.name!r}")
    if arg.name == spec.name:
        raise v.fail((*where, "name"), f"argument {arg.name!r} has the kernel's name, which it would hide")
    if arg.dtype not in DTYPES:
        raise v.fail((*where, "dtype"), f"unknown dtype {arg.dtype!r}{did_you_mean(arg.dtype, list(DTYPES))}")
    if arg.is_array:
        if not arg.shape:
            raise v.fail(
                (*where, "shape"),
                "an array needs at least one dimension (shape = [1] for a single "
                "element; leave shape out for a scalar argument)",
            )
        if len(arg.shape) > MAX_DIMENSIONS:
            raise v.fail((*where, "shape"), f"{len(arg.shape)} dimensions; an array has at most {MAX_DIMENSIONS}")
        if arg.role is None:
            raise v.fail((*where, "role"), "an array argument needs a role: 'in', 'out' or 'inout'")
        if arg.value is not None:
            raise v.fail((*where, "value"), "an array argument cannot have a value")
        return arg
    if arg.role is not None:
        raise v.fail((*where, "role"), "a scalar argument has no role (give it a shape to make it an array)")
    if arg.value is None and arg.dtype not in INTEGER_DTYPES:
        raise v.fail((*where, "value"), f"scalar {arg.name!r} is not an integer size, so it needs a value")
    if arg.value is None:
        return arg
    problem = value_problem(arg.dtype, arg.value)
    if problem is not None:
        raise v.fail((*where, "value"), problem)
    return replace(arg, value=_normalized_value(arg.dtype, arg.value))


def _check_dims(v: Validator, spec: KernelSpec, at: KeyPath, sizes: list[str]) -> None:
    """Every named dimension of an array is a declared size; every fixed one is at least 1."""
    for j, arg in enumerate(spec.args):
        for d, dim in enumerate(arg.shape or []):
            if isinstance(dim, str) and dim not in sizes:
                hint = did_you_mean(dim, sizes)
                raise v.fail(
                    (*at, "args", j, "shape", d),
                    f"shape of {arg.name!r} uses undeclared size {dim!r}{hint} (declare it as an integer "
                    f"scalar argument; sizes: {', '.join(sizes) or 'none'})",
                )
            if isinstance(dim, int) and dim < 1:
                raise v.fail((*at, "args", j, "shape", d), "a fixed dimension must be at least 1")


def _check_test_shape_bytes(v: Validator, spec: KernelSpec, at: KeyPath) -> None:
    """No test shape makes the arrays take more than ``TEST_SHAPE_BYTES``, nor a bench shape more than
    ``BENCH_SHAPE_BYTES``."""
    limits = (
        ("test-shapes", spec.test_shapes, TEST_SHAPE_BYTES, "a test shape may use (use bench-shapes for large sizes)"),
        ("bench-shapes", spec.bench_shapes, BENCH_SHAPE_BYTES, "a bench shape may use: more than any GPU holds"),
    )
    for key, shapes, limit, why in limits:
        for j, shape in enumerate(shapes):
            total = sum(_array_bytes(arg, shape) for arg in spec.args if arg.is_array)
            if total > limit:
                raise v.fail(
                    (*at, key, j),
                    f"the arrays take {total / (1 << 30):.4g} GiB at this shape, more than the {limit >> 30} GiB {why}",
                )


def _check_tunables(v: Validator, spec: KernelSpec, at: KeyPath, names: dict[str, int]) -> None:
    """Tunables are identifiers apart from the arguments and the kernel, with distinct values, in few value sets."""
    variants = 1
    for tname, values in spec.tunables.items():
        _check_ident(v, tname, (*at, "tunables", tname), "tunable parameter", "tunable")
        if tname in names or tname == spec.name:
            raise v.fail(
                (*at, "tunables", tname),
                f"tunable {tname!r} has the name of an argument or the kernel, which its macro would replace",
            )
        if not values:
            raise v.fail((*at, "tunables", tname), "needs at least one value")
        seen_values: set[str] = set()
        variants *= len(values)
        if variants > MAX_VARIANTS:
            raise v.fail((*at, "tunables", tname), f"the tunables give more than {MAX_VARIANTS} value sets")
        for k, value in enumerate(values):
            problem = tunable_value_problem(value)
            if problem is not None:
                raise v.fail((*at, "tunables", tname, k), problem)
            if str(value) in seen_values:
                raise v.fail((*at, "tunables", tname, k), f"duplicate value {value!r}")
            seen_values.add(str(value))


def _check_references(v: Validator, spec: KernelSpec, at: KeyPath, refs: ReferenceFiles) -> None:
    """``reference``, ``gpu-reference`` and ``torch-reference`` name a function in a module next to the manifest."""
    named = (("reference", spec.reference), ("gpu-reference", spec.gpu_reference))
    for key, ref in (*named, ("torch-reference", spec.torch_reference)):
        if ref is None:
            continue
        if not _REFERENCE.fullmatch(ref):
            raise v.fail(
                (*at, key),
                f"{ref!r} is not of the form 'module:function' (a dotted module path next to the manifest, a "
                "function name)",
            )
        try:
            refs.file(ref)
        except ReferenceProblem as exc:
            raise v.fail((*at, key), str(exc)) from None
