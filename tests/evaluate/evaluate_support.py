"""Shared by the evaluate tests: where things are, and the bad-kernel corpus with its expectations."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"


@dataclass(frozen=True)
class CorpusKernel:
    """One known-bad kernel and the verdict it must get."""

    path: Path
    kernel: str
    status: str
    reasons: tuple[str, ...]
    """Any of these must appear in the result's detail (case-insensitive)."""

    @property
    def name(self) -> str:
        return self.path.stem


def corpus_kernels() -> list[CorpusKernel]:
    """Every ``.cu`` of the corpus with its ``// kernel:`` and ``// expect: status: reason | reason`` lines."""
    out = []
    for path in sorted(CORPUS.glob("*.cu")):
        text = path.read_text()
        kernel = re.search(r"^// kernel: (\w+)$", text, re.MULTILINE)
        expect = re.search(r"^// expect: (\w+): (.+)$", text, re.MULTILINE)
        assert kernel and expect, f"{path.name} lacks its kernel/expect header"
        reasons = tuple(r.strip() for r in expect.group(2).split("|"))
        out.append(CorpusKernel(path, kernel.group(1), expect.group(1), reasons))
    return out
