"""r1build: CUDA kernels from specs, chosen per GPU architecture, built by scikit-build-core.

The pipeline, one sub-package per stage::

    manifest -> keys -> cache / lock --hit--> selection -> emit -> build
                          | miss
                          v
            generate -> gate -> evaluate --feedback--> generate

The library prints nothing: it logs through :mod:`logging` and emits :mod:`r1build.events`.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
