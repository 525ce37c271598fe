"""The profiler's tests use the generate stage's chat server and project helpers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "generate"))
