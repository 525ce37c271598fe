"""The Python side of the emitted bindings: the wrapper module (``r1build_bindings.py``, installed as the
manifest's ``bindings.python``) and its stubs (``r1build_bindings.pyi``).

Each kernel becomes ``kernel(<in and inout arrays>, <free scalars>, out=None, *, stream=None)``: the outputs are
allocated with the first input's library (torch, cupy, else the array API namespace the array names) unless
``out=`` gives them (one array, or a tuple in declaration order), the launch runs on ``stream`` (a cupy or torch
stream, an object with ``__cuda_stream__``, or a ``cudaStream_t`` as an integer) or else the current stream of
the input's library; it returns the outputs (else the ``inout`` arrays, else None). Every check is the compiled
module's (:mod:`r1build.emit.nbmodule`); the wrapper only reads the shapes it allocates from.

With ``bindings.torch-namespace`` set and torch importable, the module registers each kernel as a torch custom op
(``inout`` arrays declared mutated) with a fake implementation computed from the manifest's shapes, so
``torch.compile`` traces through ``torch.ops.<namespace>.<kernel>``. It is registered through ``torch.library``'s
``Library.define``/``impl`` and ``register_fake`` rather than the ``torch.library.custom_op`` decorator, which adds
about 10 us of Python to every eager call (bench/binding_overhead.py); the semantics are the decorator's: the schema
inferred from the annotations, mutated arguments' versions bumped, and a backward that raises.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..manifest.model import INTEGER_DTYPES, Arg
from .bound import BoundKernel, shape_text
from .plan import MARKER

__all__ = ["BINDINGS_PY", "BINDINGS_PYI", "render_py_module", "render_stubs"]

BINDINGS_PY = "r1build_bindings.py"
BINDINGS_PYI = "r1build_bindings.pyi"

_HELPERS = '''
def device_count() -> int:
    """Number of CUDA devices this process can use; 0 without a GPU or driver."""
    return int(_ext.device_count())


def _describe(x: Any) -> str:
    return f"{type(x).__module__}.{type(x).__qualname__}"


def _shape(fn: str, name: str, x: Any, ndim: int) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None:
        raise TypeError(f"{fn}: {name} must be an array on a CUDA device (cupy, torch, DLPack), got {_describe(x)}")
    if len(shape) != ndim:
        raise ValueError(f"{fn}: {name} must have {ndim} dimension(s), got shape {tuple(int(d) for d in shape)}")
    return tuple(int(d) for d in shape)


def _empty(fn: str, like: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """An array of ``shape`` and ``dtype`` from ``like``'s library, on its device."""
    library = type(like).__module__.partition(".")[0]
    if library == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    if library == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=dtype)
    namespace = getattr(like, "__array_namespace__", None)
    if namespace is None:
        raise TypeError(f"{fn}: cannot allocate the output like a {_describe(like)}: pass out= preallocated")
    xp = namespace()
    return xp.empty(shape, dtype=getattr(xp, dtype), device=like.device)


def _stream(fn: str, like: Any, stream: Any) -> int:
    """The stream handle to launch on: ``stream`` as given, else the current stream of ``like``'s library."""
    if stream is None:
        library = type(like).__module__.partition(".")[0]
        if library == "torch":
            torch, index = sys.modules["torch"], like.get_device()
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # inductor's get_raw_stream: no Stream made
            if raw is not None and index >= 0:
                return int(raw(index))
            if index >= 0:
                return int(torch.cuda.current_stream(index).cuda_stream)
        if library == "cupy":
            cupy = sys.modules["cupy"]
            with cupy.cuda.Device(like.device.id):
                return int(cupy.cuda.get_current_stream().ptr)
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool) and stream >= 0:
        return stream
    for attribute in ("ptr", "cuda_stream"):  # cupy.cuda.Stream, torch.cuda.Stream
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    raise TypeError(f"{fn}: stream must be a cupy or torch stream or a non-negative int handle, got {stream!r}")


_TORCH: list[Any] = []  # torch.utils.dlpack.to_dlpack and torch.Tensor, looked up on the first torch call


def _capsules(arrays: tuple[Any, ...]) -> tuple[Any, ...]:
    """The torch tensors among ``arrays`` as DLPack capsules made by torch's C function. ``Tensor.__dlpack__()``,
    which nanobind would call, also makes the legacy default stream wait for torch's current one (an event recorded
    and waited for, per array), though the launch runs on the current stream or the one given. A tensor that
    requires grad is left to ``__dlpack__``, which refuses it."""
    if not _TORCH:
        torch = sys.modules["torch"]
        _TORCH[:] = [torch.utils.dlpack.to_dlpack, torch.Tensor]
    to_dlpack, tensor = _TORCH
    return tuple(to_dlpack(a) if isinstance(a, tensor) and not a.requires_grad else a for a in arrays)


def _outs(fn: str, out: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    if not isinstance(out, (tuple, list)) or len(out) != len(names):
        raise TypeError(f"{fn}: out must be a tuple of {len(names)} arrays ({', '.join(names)}), got {out!r}")
    return tuple(out)
'''

_TORCH_HELPERS = '''
try:
    import torch as _torch
except ImportError:  # torch is optional: without it, no custom ops
    _torch = None


def _fake_shape(fn: str, name: str, x: Any, ndim: int, dtype: str) -> tuple[Any, ...]:
    """``x``'s shape under the fake (meta) implementation, after the checks that need no data."""
    if x.dim() != ndim:
        raise ValueError(f"{fn}: {name} must have {ndim} dimension(s), got shape {tuple(x.shape)}")
    if x.dtype != getattr(_torch, dtype):
        raise TypeError(f"{fn}: {name} must be {dtype}, got {str(x.dtype).removeprefix('torch.')}")
    return tuple(x.shape)


def _fake_same(fn: str, name: str, j: int, got: Any, size: str, value: Any) -> None:
    _torch._check(got == value, lambda: f"{fn}: {name}'s dimension {j} is {got}, but {size} = {value}")


_LIBRARIES: dict[str, Any] = {}


class _NoBackward(_torch.autograd.Function if _torch is not None else object):  # type: ignore[misc]
    """The op called with a tensor that requires grad: its outputs have a grad_fn that refuses to run."""

    @staticmethod
    def forward(ctx: Any, call: Any, qualname: str, *args: Any) -> Any:
        ctx.qualname = qualname
        return call(*args)

    @staticmethod
    def backward(ctx: Any, *_grads: Any) -> Any:
        raise RuntimeError(f"Trying to backward through {ctx.qualname}, but r1build's kernels have no autograd formula")


def _register(qualname: str, impl: Any, fake: Any, mutated: tuple[str, ...]) -> None:
    """``qualname`` as a torch operator: the schema inferred from ``impl``'s annotations (``mutated`` declared
    written), ``impl`` for CUDA tensors, ``fake`` for tracing, and an autograd kernel that calls below autograd,
    bumps the mutated tensors' versions and, where an input requires grad, gives outputs whose backward raises.
    (``torch.library.custom_op`` does the same through more Python per call: about 10 us more in eager.)"""
    ns, name = qualname.split("::")
    lib = _LIBRARIES.setdefault(ns, _torch.library.Library(ns, "FRAGMENT"))
    lib.define(name + _torch.library.infer_schema(impl, mutates_args=mutated))
    lib.impl(name, impl, "CUDA")
    _torch.library.register_fake(qualname, fake, lib=lib)
    op = getattr(getattr(_torch.ops, ns), name).default
    written = [i for i, a in enumerate(op._schema.arguments) if a.name in mutated]
    below, tensor, bump = _torch._C._after_autograd_keyset, _torch.Tensor, _torch.autograd.graph.increment_version

    def autograd(keyset: Any, *args: Any) -> Any:
        if _torch.is_grad_enabled() and any(isinstance(a, tensor) and a.requires_grad for a in args):
            out = _NoBackward.apply(lambda *a: op.redispatch(keyset & below, *a), qualname, *args)
        else:
            out = op.redispatch(keyset & below, *args)
        for i in written:
            bump(args[i])
        return out

    lib.impl(name, autograd, "Autograd", with_keyset=True)
'''


def _py_type(arg: Arg) -> str:
    if arg.dtype == "bool":
        return "bool"
    return "int" if arg.dtype in INTEGER_DTYPES or arg.is_size else "float"


def _signature(k: BoundKernel, *, torch: bool = False) -> str:
    array = "_torch.Tensor" if torch else "Any"
    params = [f"{a.name}: {array}" for a in k.inputs] + [f"{a.name}: {_py_type(a)}" for a in k.free]
    if not torch:
        params += ["out: Any = None", "*", "stream: Any = None"]
    return ", ".join(params)


def _returns(k: BoundKernel, *, torch: bool = False) -> str:
    results = k.outputs if torch else (k.outputs or k.mutated)
    one = "_torch.Tensor" if torch else "Any"
    if not results:
        return "None"
    return one if len(results) == 1 else f"tuple[{', '.join([one] * len(results))}]"


def _docstring(k: BoundKernel) -> str:
    lines = [k.spec.description, "", "Args:"]
    for a in k.inputs:
        lines.append(f"    {a.name}: {a.dtype} array of shape {shape_text(a.shape or [])}, {a.role}.")
    lines += [f"    {a.name}: {a.dtype}{', a size' if a.is_size else ''}." for a in k.free]
    if k.outputs:
        outs = ", ".join(f"{a.name} ({a.dtype}, {shape_text(a.shape or [])})" for a in k.outputs)
        lines.append(f"    out: {outs}, preallocated; allocated like the first input when absent.")
    lines.append("    stream: the stream to run on; the current stream of the input's library when absent.")
    results = k.outputs or k.mutated
    lines.append(f"Returns: {', '.join(a.name for a in results) if results else 'None'}.")
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    indented = "\n".join(("    " + line) if line else "" for line in text.split("\n"))
    return '"""' + indented.removeprefix("    ") + '\n    """'


def _sizes(k: BoundKernel, fake: bool) -> list[str]:
    """Lines reading (and, when ``fake``, checking) every size the outputs need from the inputs' shapes."""
    lines = []
    for a in k.inputs:
        ndim = len(a.shape or [])
        if fake:
            lines.append(f'    _s_{a.name} = _fake_shape(_fn, "{a.name}", {a.name}, {ndim}, "{a.dtype}")')
        elif any(src == a.name for src, _ in k.sources.values()):
            lines.append(f'    _s_{a.name} = _shape(_fn, "{a.name}", {a.name}, {ndim})')
        else:
            continue
        for j, dim in enumerate(a.shape or []):
            if isinstance(dim, str) and k.sources[dim] == (a.name, j):
                lines.append(f"    {dim} = _s_{a.name}[{j}]")
            elif fake:
                lines.append(f'    _fake_same(_fn, "{a.name}", {j}, _s_{a.name}[{j}], "{dim}", {dim})')
    return lines


def _wrapper(k: BoundKernel) -> list[str]:
    outs = k.outputs
    lines = ["", "", f"def {k.spec.name}({_signature(k)}) -> {_returns(k)}:", f"    {_docstring(k)}"]
    lines.append(f'    _fn = "{k.qualname}"')
    names = [a.name for a in outs]
    if outs:
        like = k.inputs[0].name if k.inputs else None
        lines.append("    if out is None:")
        if like is None:
            lines.append('        raise TypeError(f"{_fn}: a kernel without inputs needs out= preallocated")')
        else:
            lines += ["    " + line for line in _sizes(k, fake=False)]
            lines += [f'        {a.name} = _empty(_fn, {like}, {shape_text(a.shape or [])}, "{a.dtype}")' for a in outs]
        lines.append("    else:")
        if len(outs) == 1:
            lines.append(f"        {names[0]} = out")
        else:
            lines.append(f"        {', '.join(names)} = _outs(_fn, out, {tuple(names)!r})")
    else:
        lines += ["    if out is not None:", '        raise TypeError(f"{_fn}: the kernel has no out arrays")']
    first = k.arrays[0].name if k.arrays else "None"
    arrays = ", ".join(a.name for a in k.arrays) + ("," if len(k.arrays) == 1 else "")
    scalars = "".join(f"{a.name}, " for a in k.free)
    lines.append(f"    _s = _stream(_fn, {first}, stream)")
    if k.arrays:
        lines.append(f'    _a = _capsules(({arrays})) if type({first}).__module__[:5] == "torch" else ({arrays})')
        lines.append(f"    _ext.{k.spec.name}(*_a, {scalars}_s)")
    else:
        lines.append(f"    _ext.{k.spec.name}({scalars}_s)")
    results = [a.name for a in outs or k.mutated]
    lines.append(f"    return {', '.join(results) if results else 'None'}")
    return lines


def _torch_op(k: BoundKernel, namespace: str) -> list[str]:
    name = k.spec.name
    mutated = tuple(a.name for a in k.mutated)
    args = ", ".join([a.name for a in k.inputs] + [a.name for a in k.free])
    device = f"{k.inputs[0].name}.device" if k.inputs else '"cuda"'
    fake = [f"_torch.empty({shape_text(a.shape or [])}, dtype=_torch.{a.dtype}, device={device})" for a in k.outputs]
    lines = [
        "",
        f"    def _{name}_op({_signature(k, torch=True)}) -> {_returns(k, torch=True)}:",
        f"        {'return ' if k.outputs else ''}{name}({args})",
        "",
        f"    def _{name}_fake({_signature(k, torch=True)}) -> {_returns(k, torch=True)}:",
        f'        _fn = "{namespace}::{name}"',
        *["    " + line for line in _sizes(k, fake=True)],
    ]
    if k.outputs:
        lines.append(f"        return {', '.join(fake)}")
    else:
        lines.append("        return None")
    lines += ["", f'    _register("{namespace}::{name}", _{name}_op, _{name}_fake, {mutated!r})']
    return lines


def render_py_module(module: str, ext: str, kernels: Sequence[BoundKernel], namespace: str | None) -> str:
    """The wrapper module ``module`` over the compiled ``ext``, registering torch ops under ``namespace``."""
    names = ["device_count", *(k.spec.name for k in kernels)]
    lines = [
        f"# {MARKER} from the manifest's kernels: do not edit, it is rewritten on every build.",
        f'"""{module}: the kernels on CUDA arrays of any DLPack library (cupy, torch, ...), checked against the',
        "manifest; outputs allocated with the input's library unless out= is given; run on the library's current",
        'stream unless stream= is given. See the bindings guide of r1build."""',
        "",
        "import sys",
        "from typing import Any",
        "",
        f"from . import {ext} as _ext",
        "",
        f"__all__ = {names!r}",
        _HELPERS.rstrip("\n"),
    ]
    for k in kernels:
        lines += _wrapper(k)
    if namespace is not None:
        lines += ["", _TORCH_HELPERS.strip("\n"), "", "", "if _torch is not None:"]
        for k in kernels:
            lines += _torch_op(k, namespace)
    return "\n".join(lines) + "\n"


def render_stubs(module: str, kernels: Sequence[BoundKernel]) -> str:
    """The ``.pyi`` stubs of the wrapper module, with each kernel's description as its docstring."""
    lines = [
        f"# {MARKER} from the manifest's kernels: do not edit, it is rewritten on every build.",
        f'"""Stubs of {module}."""',
        "",
        "from typing import Any",
        "",
        "def device_count() -> int:",
        '    """Number of CUDA devices this process can use; 0 without a GPU or driver."""',
    ]
    for k in kernels:
        lines += ["", f"def {k.spec.name}({_signature(k)}) -> {_returns(k)}:", f"    {_docstring(k)}"]
    return "\n".join(lines) + "\n"
