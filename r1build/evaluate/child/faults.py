"""What goes wrong in a worker's request: the context lost (the worker replies, then exits) or one call failed (the
context still fine). :meth:`~.worker.Worker.settle` tells the two apart after a CUDA error."""

from __future__ import annotations

__all__ = ["CallFailed", "ContextLost"]


class ContextLost(Exception):
    """The CUDA context is unusable; the worker must exit after replying."""


class CallFailed(Exception):
    """A candidate call returned an error or its work raised one (context still fine)."""
