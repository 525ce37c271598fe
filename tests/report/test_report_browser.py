"""``r1build report`` opened in a real headless Chromium: a real search (the local chat server, real nvcc, the
GPU stand-in's verdicts) and the root manifest's locked winners; the page loads with no console error and no
network request, and shows every kernel with its figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from r1build.cli.main import main
from r1build.lock import read_lock
from r1build.manifest import load_manifest
from tests.generate.gen_support import Project
from tests.report.chromium import open_page
from tests.report.searches import INJECTION

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

ROOT = Path(__file__).resolve().parents[2]

PROBE = """JSON.stringify({
  kernels: [...document.querySelectorAll('section.kernel')].map(s => s.id),
  headings: [...document.querySelectorAll('section.kernel h2')].map(h => h.textContent),
  figures: document.querySelectorAll('.js-plotly-plot').length,
  drawn: document.querySelectorAll('.js-plotly-plot .main-svg').length,
  points: document.querySelectorAll('.js-plotly-plot .scatterlayer .point').length,
  text: document.body.innerText,
})"""


def _load(page: Path) -> dict[str, object]:
    import json

    load = open_page(page, PROBE)
    assert load.errors == [], load.errors
    assert [u for u in load.requests if not u.startswith("data:")] == []  # nothing fetched: self-contained
    assert isinstance(load.value, str)
    value: dict[str, object] = json.loads(load.value)
    return value


def test_the_report_of_a_real_search_opens_in_chromium(
    browser: str, searched: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "report.html"
    argv = ["report", "-m", str(searched.root), "--cache-dir", str(searched.cache_dir), "-o", str(page)]
    assert main(argv) == 0
    assert f"wrote {page}" in capsys.readouterr().out
    seen = _load(page)
    assert seen["kernels"] == ["kernel-vadd"] and seen["headings"] == ["vadd"]
    # the winners' bars, the candidates by round and sample, and the time per candidate: all drawn
    assert seen["figures"] == 3 and int(seen["drawn"]) >= 3  # type: ignore[call-overload]
    assert int(seen["points"]) >= 7  # type: ignore[call-overload]
    text = str(seen["text"])
    for shown in (
        "r1 s0",
        "r0 s1",
        "compile_error",
        "incorrect",
        "passed on GPU",
        INJECTION,
        "rounds",
        "deepseek-reasoner",
        "20.00 µs",
        "2.00×",
    ):  # the winner at 20 µs, twice the baseline's speed
        assert shown in text, shown
    # the same records give the same page
    again = tmp_path / "again.html"
    assert main([*argv[:-1], str(again)]) == 0
    assert again.read_bytes() == page.read_bytes()


def test_the_root_manifest_report_shows_every_kernel_in_chromium(browser: str, tmp_path: Path) -> None:
    page = tmp_path / "root.html"
    assert main(["report", "-m", str(ROOT), "--cache-dir", str(tmp_path / "cache"), "-o", str(page)]) == 0
    seen = _load(page)
    names = [k.name for k in load_manifest(ROOT / "kernels.toml", check_references=False).kernels]
    assert seen["headings"] == names
    assert "NVIDIA H200" in str(seen["text"])  # the lock's provenance: measured on the H200
    # every tuned winner named as the lock names it: its source and its tunable values
    lock = read_lock(ROOT / "kernels.lock")
    assert lock is not None
    tuned = [e for e in lock.kernel if e.provenance == "tuned"]
    assert tuned, "the root lock holds no tuned winner to look for"
    for entry in tuned:
        label = str(entry.origin) + "".join(f" {k}={v}" for k, v in sorted(entry.defines.items()))
        assert label in str(seen["text"]), label


def test_the_browser_check_sees_a_console_error(browser: str, tmp_path: Path) -> None:
    """The control: a page that throws and logs an error is reported, so a clean report is a real finding."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><body><h1>x</h1><script>console.error('boom');undefinedFunction();</script></body></html>"
    )
    load = open_page(page, "document.querySelector('h1').textContent")
    assert load.value == "x"
    assert any("boom" in e for e in load.errors) and any("undefinedFunction" in e for e in load.errors)
