"""``r1build report``: the story of a manifest's searches as one self-contained HTML page.

:func:`build_report` reads the records every view reads (:func:`r1build.report.overview.project_records`) and renders
them (:mod:`.page`, from the rows of :mod:`.summary`): winners against baseline, cupy and the hardware floor;
each search as figures (candidates by round and sample, verdicts coloured; time per candidate with the best so
far); failure reasons grouped; generation spend; the provenance of every locked entry.
"""

from __future__ import annotations

from ..cache import Cache
from ..manifest import Manifest
from .overview import project_records

__all__ = ["build_report"]


def build_report(manifest: Manifest, cache: Cache) -> str:
    """The report page of ``manifest`` from what the lock and ``cache`` record."""
    from .page import render_report  # here: ``status`` reads the records (.overview) and draws nothing

    return render_report(manifest, project_records(manifest, cache, searches=True))
