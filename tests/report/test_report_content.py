"""What the report says about a real search (the local chat server, real nvcc, the GPU stand-in's verdicts), read
from the same records as ``r1build status --json``; escaping; the plotly extra named when it is missing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.manifest import load_manifest
from r1build.report import build_report
from r1build.report.overview import project_records
from r1build.report.summary import failure_groups, provenance_row, search_points, spend_row, winner_row
from tests.generate.gen_support import Project
from tests.report.searches import INJECTION, PRICES

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers


def test_status_json_and_the_report_read_the_same_records(
    searched: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["status", "-m", str(searched.root), "--cache-dir", str(searched.cache_dir), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["kernels"]
    manifest = load_manifest(searched.root / "kernels.toml")
    with Cache(searched.cache_dir) as cache:
        records = project_records(manifest, cache, searches=True)
    assert rows == [r.status.as_json() for r in records]
    (row,) = rows
    assert (row["state"], row["provenance"], row["validation"], row["time_us"]) == (
        "locked",
        "generated",
        "validated",
        20.0,
    )
    # the device code the winner adds for its arch, from its cached verdict's gate report, in --json and the table
    assert 500 < row["device_bytes"] < 100_000
    assert main(["status", "-m", str(searched.root), "--cache-dir", str(searched.cache_dir)]) == 0
    kib = f"{row['device_bytes'] / 1024:.1f} KiB"
    assert f"device code per arch: {row['arch']} {kib} ({kib} in all)" in capsys.readouterr().out


def test_the_report_rows_of_a_real_search(searched: Project) -> None:
    manifest = load_manifest(searched.root / "kernels.toml")
    with Cache(searched.cache_dir) as cache:
        (records,) = project_records(manifest, cache, searches=True)
    winner = winner_row(records)
    assert (winner.time_us, winner.baseline_us, winner.label, winner.gpu) == (20.0, 40.0, "r1 s0", "Test GPU")
    assert winner.speedup_vs_baseline == pytest.approx(2.0)
    size = winner.device_bytes
    assert size is not None and size == records.status.device_bytes and 500 < size < 100_000
    with Cache(searched.cache_dir) as cache:
        page = build_report(manifest, cache)
    assert f"<td>{size / 1024:.1f} KiB</td>" in page.replace(' class="num"', "")

    points = search_points(records)
    assert [p.label for p in points] == ["vadd.cu", "r0 s0", "r0 s1", "r0 s2", "r1 s0", "r1 s1"]
    assert [p.verdict for p in points] == [
        "passed on GPU",
        "passed on GPU",
        "compile_error",
        "incorrect",
        "passed on GPU",
        "passed on GPU",
    ]
    assert [p.best_us for p in points] == [40.0, 30.0, 30.0, 30.0, 20.0, 20.0]  # never rises
    assert [p.winner for p in points] == [False] * 4 + [True, False]

    groups = failure_groups([records])
    assert [(g.status, g.count) for g in groups] == [("compile_error", 1), ("incorrect", 1)]
    assert INJECTION in groups[0].example and "/" not in groups[0].example.split(":")[0]  # no command, no path
    assert "nvcc" not in groups[0].example

    spend = spend_row(records, manifest.settings.generation.prices)
    assert spend is not None
    assert (spend.samples, spend.requests, spend.prompt_tokens, spend.stop_reason) == (6, 6, 600, "rounds")
    assert spend.cost_usd == pytest.approx(
        (600 * PRICES["input-per-mtok"] + spend.completion_tokens * PRICES["output-per-mtok"]) / 1e6
    )
    assert spend.completion_tokens > 0 and 0 < spend.wall_s < 60

    provenance = provenance_row(records)
    assert provenance is not None and provenance.current
    assert provenance.origin == "deepseek-reasoner round 1 sample 0" and provenance.time_us == 20.0


def test_the_page_escapes_what_the_records_say(searched: Project, search_template: Project) -> None:
    manifest = load_manifest(searched.root / "kernels.toml")
    with Cache(searched.cache_dir) as cache:
        page = build_report(manifest, cache)
    assert INJECTION not in page  # markup from a compiler error is text, never markup
    assert "&lt;img src=x onerror=&quot;console.error(1)&quot;&gt;" in page
    assert "<script src=" not in page and "<link" not in page  # nothing fetched
    # no folder of the project or cache: the copy read here nor the one the search ran in
    for place in (searched, search_template):
        assert str(place.root) not in page and str(place.cache_dir) not in page


def test_report_without_plotly_names_the_extra(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write(baseline=True)
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    out = tmp_path / "r.html"
    assert main(["report", "-m", str(project.root), "--cache-dir", str(project.cache_dir), "-o", str(out)]) == 2
    assert "pip install 'r1build[report]'" in capsys.readouterr().err
    assert not out.exists()


def test_report_into_a_folder_is_a_usage_error(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write(baseline=True)
    assert main(["report", "-m", str(project.root), "--cache-dir", str(project.cache_dir), "-o", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
