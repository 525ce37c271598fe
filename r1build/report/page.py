"""The report as one self-contained HTML page: tables, and figures drawn by plotly with plotly.js inlined once.

Nothing on the page is fetched: no script, style sheet, font or image comes from the network, so the file opens
anywhere (a CI artifact, a laptop offline). Every text from the records (compiler messages of model-written code
among them) is HTML-escaped. The page has no timestamp and its figures have fixed ids: the same records give the
same bytes.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from ..filemode import REPORT_MARKER
from ..manifest.model import Manifest
from ..toolchain.extras import PLOTLY
from .overview import KernelRecords
from .summary import (
    FailureGroup,
    ProvenanceRow,
    SearchPoint,
    SpendRow,
    WinnerRow,
    failure_groups,
    provenance_row,
    search_points,
    spend_row,
    winner_row,
)

__all__ = ["VERDICT_COLOURS", "render_report"]

VERDICT_COLOURS = {
    "passed on GPU": "#2ca02c",
    "passed gate": "#1f77b4",
    "compile_error": "#ff7f0e",
    "rejected": "#9467bd",
    "incorrect": "#d62728",
    "crashed": "#111111",
    "timed_out": "#8c564b",
    "not judged": "#7f7f7f",
}
"""Colour of each verdict in the figures and tables."""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 0.9em; } .verdict { font-weight: 600; } .muted { color: #777; }
section.kernel { border-top: 2px solid #ddd; margin-top: 2em; }
"""


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise PLOTLY.missing() from None
    return go


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.3f} ms" if value >= 1000 else f"{value:.2f} µs"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """A table; cells are HTML already escaped by the caller."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _verdict(v: str) -> str:
    return f'<span class="verdict" style="color:{VERDICT_COLOURS.get(v, "#000")}">{_e(v)}</span>'


def _figure(fig: Any, div_id: str) -> str:
    import plotly.io as pio

    return str(
        pio.to_html(
            fig,
            include_plotlyjs=False,
            full_html=False,
            div_id=div_id,
            config={"displaylogo": False, "responsive": True},
        )
    )


def _winners_figure(go: Any, rows: Sequence[WinnerRow]) -> str:
    timed = [r for r in rows if r.time_us is not None]
    if not timed:
        return '<p class="muted">No winner was timed on a GPU yet.</p>'
    names = [f"{r.kernel}/{r.arch}" for r in timed]
    fig = go.Figure()
    for label, values, colour in (
        ("winner", [r.time_us for r in timed], "#2ca02c"),
        ("baseline", [r.baseline_us for r in timed], "#aaaaaa"),
        ("hardware floor", [r.floor_us for r in timed], "#1f77b4"),
    ):
        fig.add_trace(
            go.Bar(
                name=label,
                x=names,
                y=values,
                marker_color=colour,
                hovertemplate="%{x}<br>" + label + ": %{y:.2f} µs<extra></extra>",
            )
        )
    shown = [v for r in timed for v in (r.time_us, r.baseline_us, r.floor_us) if v is not None and v > 0]
    log = max(shown) / min(shown) > 20  # kernels of very different sizes: a log axis keeps each visible
    fig.update_layout(
        barmode="group",
        yaxis={"title": "µs per call" + (" (log)" if log else ""), "type": "log" if log else "linear"},
        height=380,
        margin={"t": 30, "b": 40},
        legend={"orientation": "h"},
    )
    return _figure(fig, "fig-winners")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text)


def _search_figures(go: Any, records: KernelRecords, points: Sequence[SearchPoint]) -> str:
    slug = _slug(f"{records.spec.name}-{records.arch}")
    out = _figure(_candidate_grid(go, records, points), f"fig-grid-{slug}")
    timed = [p for p in points if p.time_us is not None]
    if not timed:
        return out + '<p class="muted">No candidate of this search was timed (no GPU of this arch judged it).</p>'
    return out + _figure(_time_line(go, records, points, timed), f"fig-time-{slug}")


def _candidate_grid(go: Any, records: KernelRecords, points: Sequence[SearchPoint]) -> Any:
    """The candidates by round and sample, coloured by verdict (the user's own sources on a row of their own)."""
    grid = go.Figure()
    rounds = sorted({p.round for p in points if p.round is not None})
    for verdict, colour in VERDICT_COLOURS.items():
        mine = [p for p in points if p.verdict == verdict]
        if not mine:
            continue
        grid.add_trace(
            go.Scatter(
                name=verdict,
                mode="markers",
                marker={"color": colour, "size": 12, "symbol": ["star" if p.winner else "circle" for p in mine]},
                x=[(p.sample if p.sample is not None else p.index) + 0.15 * p.variant for p in mine],
                y=[f"round {p.round}" if p.round is not None else "own sources" for p in mine],
                text=[
                    f"{p.label}<br>{p.verdict}"
                    + (f"<br>{p.time_us:.2f} µs" if p.time_us is not None else "")
                    + (f"<br>{html.escape(p.reason[:120])}" if p.reason else "")
                    + ("<br>winner" if p.winner else "")
                    for p in mine
                ],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    judged = {(p.round, p.sample) for p in points if p.round is not None}
    lost = [s for s in (records.search.samples if records.search else []) if (s.round, s.sample) not in judged]
    if lost:
        grid.add_trace(
            go.Scatter(
                name="no candidate",
                mode="markers",
                marker={"color": VERDICT_COLOURS["not judged"], "size": 11, "symbol": "x"},
                x=[s.sample for s in lost],
                y=[f"round {s.round}" for s in lost],
                text=[f"r{s.round} s{s.sample}: no candidate ({s.finish_reason or 'no answer'})" for s in lost],
                hovertemplate="%{text}<extra></extra>",
            )
        )
        rounds = sorted({*rounds, *(s.round for s in lost)})
    grid.update_layout(
        title={"text": "candidates by round and sample (★ winner)", "font": {"size": 14}},
        height=160 + 40 * len(rounds),
        xaxis={"title": "sample", "dtick": 1},
        margin={"t": 40, "b": 40},
        yaxis={"categoryorder": "array", "categoryarray": ["own sources", *[f"round {r}" for r in rounds]][::-1]},
    )
    return grid


def _time_line(go: Any, records: KernelRecords, points: Sequence[SearchPoint], timed: list[SearchPoint]) -> Any:
    """Time per candidate in search order, with the best so far, the baseline and the floor."""
    line = go.Figure()
    line.add_trace(
        go.Scatter(
            name="time",
            mode="markers",
            x=[p.index for p in timed],
            y=[p.time_us for p in timed],
            marker={
                "color": [VERDICT_COLOURS[p.verdict] for p in timed],
                "size": 10,
                "symbol": ["star" if p.winner else "circle" for p in timed],
            },
            text=[f"{p.label}: {p.time_us:.2f} µs" for p in timed],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    best = [p for p in points if p.best_us is not None]
    line.add_trace(
        go.Scatter(
            name="best so far",
            mode="lines",
            line={"shape": "hv", "color": "#2ca02c"},
            x=[p.index for p in best],
            y=[p.best_us for p in best],
        )
    )
    row = winner_row(records)
    if row.floor_us is not None:
        line.add_hline(
            y=row.floor_us, line_dash="dot", line_color="#1f77b4", annotation_text=f"floor {row.floor_us:.2f} µs"
        )
    if row.baseline_us is not None:
        line.add_hline(
            y=row.baseline_us,
            line_dash="dash",
            line_color="#888888",
            annotation_text=f"baseline {row.baseline_us:.2f} µs",
        )
    line.update_layout(
        title={"text": "time per candidate in search order", "font": {"size": 14}},
        height=340,
        xaxis={"title": "candidate (search order)"},
        yaxis={"title": "µs per call"},
        margin={"t": 40, "b": 40},
    )
    return line


def _winner_rows_html(rows: Sequence[WinnerRow]) -> str:
    return _table(
        [
            "kernel",
            "arch",
            "state",
            "winner",
            "provenance",
            "validation",
            "time",
            "baseline",
            "vs baseline",
            "vs library",
            "floor",
            "share of floor",
            "GPU",
            "device code",
        ],
        [
            [
                f'<a href="#kernel-{_e(r.kernel)}">{_e(r.kernel)}</a>',
                _e(r.arch),
                _e(r.state),
                f"<code>{_e(r.label)}</code>",
                _e(r.provenance),
                _e(r.validation),
                _us(r.time_us),
                _us(r.baseline_us),
                _x(r.speedup_vs_baseline),
                _x(r.speedup_vs_cupy)
                if r.speedup_vs_cupy is not None or not r.library_note
                else f'<abbr title="{_e(r.library_note)}">no time</abbr>',
                _us(r.floor_us),
                _pct(r.share_of_floor),
                _e(r.gpu or "-"),
                f"{r.device_bytes / 1024:.1f} KiB" if r.device_bytes else "-",
            ]
            for r in rows
        ],
        numeric=(6, 7, 8, 9, 10, 11, 13),
    )


def _points_html(points: Sequence[SearchPoint]) -> str:
    profiled = any(p.profile for p in points)
    return _table(
        [
            "#",
            "candidate",
            "provenance",
            "verdict",
            "time",
            "best so far",
            "share of floor",
            "reason",
            *(["Nsight Compute"] if profiled else []),
        ],
        [
            [
                str(p.index),
                f"<code>{_e(p.label)}</code>" + (" ★" if p.winner else ""),
                _e(p.provenance),
                _verdict(p.verdict),
                _us(p.time_us),
                _us(p.best_us),
                _pct(p.share_of_floor),
                _e(p.reason),
                *([_e(p.profile)] if profiled else []),
            ]
            for p in points
        ],
        numeric=(0, 4, 5, 6),
    )


def _failures_html(groups: Sequence[FailureGroup]) -> str:
    if not groups:
        return '<p class="muted">No candidate failed.</p>'
    return _table(
        ["count", "verdict", "reason (numbers as #)", "example", "where"],
        [[str(g.count), _verdict(g.status), _e(g.reason), _e(g.example), _e(", ".join(g.where))] for g in groups],
        numeric=(0,),
    )


def _spend_html(rows: Sequence[SpendRow]) -> str:
    if not rows:
        return '<p class="muted">No search is recorded for this manifest (winners came from its own sources).</p>'
    body = [
        [
            _e(r.kernel),
            _e(r.arch),
            _e(r.model),
            str(r.samples),
            str(r.requests),
            f"{r.prompt_tokens:,}",
            f"{r.completion_tokens:,}",
            f"{r.reasoning_tokens:,}",
            f"${r.cost_usd:.4f}",
            f"{r.wall_s:.1f} s",
            _e(r.stop_reason),
            _e(r.cause),
        ]
        for r in rows
    ]
    body.append(
        [
            "<b>total</b>",
            "",
            "",
            str(sum(r.samples for r in rows)),
            str(sum(r.requests for r in rows)),
            f"{sum(r.prompt_tokens for r in rows):,}",
            f"{sum(r.completion_tokens for r in rows):,}",
            f"{sum(r.reasoning_tokens for r in rows):,}",
            f"${sum(r.cost_usd for r in rows):.4f}",
            f"{sum(r.wall_s for r in rows):.1f} s",
            "",
            "",
        ]
    )
    return _table(
        [
            "kernel",
            "arch",
            "model",
            "samples",
            "requests",
            "prompt tokens",
            "completion tokens",
            "reasoning tokens",
            "money",
            "wall time",
            "stop",
            "cause",
        ],
        body,
        numeric=(3, 4, 5, 6, 7, 8, 9),
    )


def _provenance_html(rows: Sequence[ProvenanceRow]) -> str:
    if not rows:
        return '<p class="muted">The lock is empty or missing.</p>'
    return _table(
        [
            "kernel",
            "arch",
            "current",
            "provenance",
            "origin",
            "values",
            "validation",
            "time",
            "GPU",
            "checks",
            "toolchain",
            "winner",
            "decision key",
        ],
        [
            [
                _e(r.kernel),
                _e(r.arch),
                "yes" if r.current else "stale",
                _e(r.provenance),
                _e(r.origin),
                _e(r.defines or "-"),
                _e(r.validation),
                _us(r.time_us),
                _e(r.gpu or "-"),
                "-" if r.checks is None else f"v{r.checks}",
                _e(r.toolchain or "-"),
                f"<code>{_e(r.winner[:16])}</code>",
                f"<code>{_e(r.key[:16])}</code>",
            ]
            for r in rows
        ],
        numeric=(7,),
    )


def _kernel_section(go: Any, name: str, records: Sequence[KernelRecords], extra: dict[str, str]) -> str:
    spec = records[0].spec
    parts = [f'<section class="kernel" id="kernel-{_e(name)}"><h2>{_e(name)}</h2>', f"<p>{_e(spec.description)}</p>"]
    for r in records:
        points = search_points(r)
        parts.append(f"<h3>{_e(name)} on {_e(r.arch)}: {_e(r.status.state)}</h3>")
        if r.status.note:
            parts.append(f'<p class="muted">{_e(r.status.note)}</p>')
        if r.search is not None:
            parts.append(
                f"<p>Search: stopped ({_e(r.search.stop_reason)}): {_e(r.search.cause)}; "
                f"{len(r.search.samples)} samples"
                + (f", {r.search.missing} transcripts missing" if r.search.missing else "")
                + ".</p>"
            )
        if not points:
            parts.append('<p class="muted">No decision is cached for this question.</p>')
            continue
        parts.append(_search_figures(go, r, points))
        parts.append(_points_html(points))
        parts.append(extra.get(f"{name}/{r.arch}", ""))
    parts.append("</section>")
    return "\n".join(parts)


def render_report(manifest: Manifest, records: Sequence[KernelRecords], *, extra: dict[str, str] | None = None) -> str:
    """The report page for ``records`` (from :func:`~r1build.report.overview.project_records` with ``searches``).

    ``extra``: more HTML (already escaped) for a kernel × arch, keyed ``kernel/arch``, shown after its search.
    """
    go = _plotly()
    from plotly.offline import get_plotlyjs

    winners = [winner_row(r) for r in records]
    spends = [s for r in records if (s := spend_row(r, manifest.settings.generation.prices)) is not None]
    provenance = [p for r in records if (p := provenance_row(r)) is not None]
    by_kernel: dict[str, list[KernelRecords]] = {}
    for r in records:
        by_kernel.setdefault(r.spec.name, []).append(r)
    title = f"r1build report: {manifest.path.name}"
    body = [
        f"<h1>{_e(title)}</h1>",
        f"<p>{len(by_kernel)} kernels × their archs; winners against the baseline, the cupy reference and the "
        "hardware floor (bytes moved over the measured bandwidth, flops over the measured fp32 peak).</p>",
        "<h2>Winners</h2>",
        _winner_rows_html(winners),
        _winners_figure(go, winners),
        "<h2>Failure reasons</h2>",
        _failures_html(failure_groups(records)),
        "<h2>Generation spend</h2>",
        _spend_html(spends),
        "<h2>Provenance of the locked entries</h2>",
        _provenance_html(provenance),
        *(_kernel_section(go, name, rs, extra or {}) for name, rs in by_kernel.items()),
    ]
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{REPORT_MARKER}'
        f"<title>{_e(title)}</title><style>{_STYLE}</style>"
        f"<script>{get_plotlyjs()}</script>"
        "</head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
