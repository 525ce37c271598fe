"""What the emitted bindings of one kernel take: which arguments the caller passes, which are derived, and where
each size comes from. Shared by the nanobind module (:mod:`r1build.emit.nbmodule`) and the Python wrapper
(:mod:`r1build.emit.pymodule`), so both check and allocate by the same rule.

The caller passes the ``in`` and ``inout`` arrays, then the *free* scalars (scalars with a ``value``, and sizes no
input's shape gives) in declaration order; ``out`` arrays are allocated (or passed as ``out=``). Every size an
input's shape names is read from the first input dimension that names it, and every other dimension naming it is
checked against that value.
"""

from __future__ import annotations

from ..convert import record
from ..manifest.model import Arg, BindingsSettings, KernelSpec
from .plan import KernelPlan

__all__ = ["BoundKernel", "bound_kernels", "ext_name", "shape_text"]


@record(frozen=True)
class BoundKernel:
    """One kernel as the bindings see it."""

    spec: KernelSpec
    """The kernel."""
    entry: str
    """The C entry point the binding calls (the manifest's ``symbol-prefix`` included)."""
    qualname: str
    """``<module>.<kernel>``: how errors name the function."""

    @property
    def arrays(self) -> list[Arg]:
        """Every array argument, in declaration order (what the compiled function takes first)."""
        return [a for a in self.spec.args if a.is_array]

    @property
    def inputs(self) -> list[Arg]:
        """The ``in`` and ``inout`` arrays the caller passes."""
        return [a for a in self.arrays if a.role != "out"]

    @property
    def outputs(self) -> list[Arg]:
        """The ``out`` arrays: allocated, or passed as ``out=``."""
        return [a for a in self.arrays if a.role == "out"]

    @property
    def mutated(self) -> list[Arg]:
        """The ``inout`` arrays (declared mutated to torch)."""
        return [a for a in self.arrays if a.role == "inout"]

    @property
    def sources(self) -> dict[str, tuple[str, int]]:
        """Each size an input's shape names: the input and the dimension it is read from (the first)."""
        found: dict[str, tuple[str, int]] = {}
        for arg in self.inputs:
            for j, dim in enumerate(arg.shape or []):
                if isinstance(dim, str):
                    found.setdefault(dim, (arg.name, j))
        return found

    @property
    def free(self) -> list[Arg]:
        """The scalars the caller passes: those with a value, and sizes no input's shape gives."""
        sources = self.sources
        return [a for a in self.spec.args if not a.is_array and (not a.is_size or a.name not in sources)]


def shape_text(shape: list[str | int]) -> str:
    """A manifest shape as Python writes a tuple: ``(rows, cols)``, ``(n,)``."""
    inner = ", ".join(str(d) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def ext_name(bindings: BindingsSettings) -> str:
    """The compiled module's own name (the last part of ``<python>_ext``)."""
    assert bindings.python is not None
    return bindings.python.rpartition(".")[2] + "_ext"


def bound_kernels(bindings: BindingsSettings, plans: list[KernelPlan]) -> list[BoundKernel]:
    """The kernels the bindings bind, in emission order."""
    assert bindings.python is not None
    return [BoundKernel(p.spec, p.entry, f"{bindings.python}.{p.spec.name}") for p in plans]
