"""The optional dependencies, and the extras of r1build that install them.

A locked offline build needs none of them, so the build backend's requirements stay small: generation needs
``openai`` (``r1build[generate]``), ``r1build check`` runs the numpy references (``r1build[check]``), GPU
evaluation needs cupy (``r1build[cuda13]`` or ``r1build[cuda12]``), ``r1build report`` draws with plotly
(``r1build[report]``). Each is imported only where it is used; a
command that needs one that is missing fails with :class:`~r1build.errors.MissingExtraError` (exit 2) naming
the extra.
"""

from __future__ import annotations

import importlib.util

from ..convert import record
from ..errors import MissingExtraError

__all__ = ["CHECK", "CUPY", "GENERATE", "PLOTLY", "Extra", "installed"]


@record(frozen=True)
class Extra:
    """One optional dependency and what installs it."""

    module: str
    """The module r1build imports (``openai``)."""
    extras: tuple[str, ...]
    """The extras of r1build that install it, the first one named first."""
    purpose: str
    """What needs it, in words (``generating candidates with an LLM``)."""

    def installed(self) -> bool:
        """Whether the module can be imported (found, not imported: importing some of them is slow)."""
        return installed(self.module)

    def install_hint(self) -> str:
        """How to install it: ``pip install 'r1build[generate]'``."""
        return " or ".join(f"pip install 'r1build[{extra}]'" for extra in self.extras)

    def missing(self) -> MissingExtraError:
        """The error of a command that needs it where it is not installed."""
        return MissingExtraError(
            f"{self.purpose} needs the {self.module} package, which is not installed: {self.install_hint()}",
            extra=self.extras[0],
        )

    def require(self) -> None:
        """Raise :meth:`missing` unless the module is installed."""
        if not self.installed():
            raise self.missing()


GENERATE = Extra(
    "openai", ("generate",), "generating candidates with an LLM (generate, replay, resolve with an endpoint configured)"
)
CHECK = Extra("numpy", ("check",), "running the numpy references (r1build check)")
CUPY = Extra("cupy", ("cuda13", "cuda12"), "measuring candidates on a GPU")
PLOTLY = Extra("plotly", ("report",), "drawing the figures of r1build report")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
