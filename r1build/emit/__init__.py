"""Emit stage: the winners as generated ``.cu`` files, a header, a per-arch dispatcher and a CMake file."""

from __future__ import annotations

from .cmake import CMAKE_NAME, LIBRARY
from .header import HEADER_NAME, signature
from .plan import MARKER, KernelPlan, Variant, Winner, plan
from .sources import DISPATCH_NAME
from .write import Emitted, render_files, write_generated

__all__ = [
    "CMAKE_NAME",
    "DISPATCH_NAME",
    "HEADER_NAME",
    "LIBRARY",
    "MARKER",
    "Emitted",
    "KernelPlan",
    "Variant",
    "Winner",
    "plan",
    "render_files",
    "signature",
    "write_generated",
]
