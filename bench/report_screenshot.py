"""A screenshot of ``r1build report`` for a manifest and cache, taken in headless Chromium.

Writes the report (``r1build report``, the same code path a user runs) to a temporary file, opens it in headless
Chromium through the DevTools protocol (``tests/report/chromium.py``), checks that it loaded with no console error
and no network request, and saves a PNG of the whole page with a short Markdown note (device, date, command).
On the H200, after a real resolve of the root manifest:

    python bench/report_screenshot.py -m . --cache-dir "$R1BUILD_CACHE_DIR" --name report_h200

``--demo`` makes the search first, in a temporary project: the report tests' search (tests/report/searches.py:
the local chat server, real nvcc, and the tests' GPU stand-in for verdicts and times, so no GPU is needed and the
times are the stand-in's, not a GPU's):

    python bench/report_screenshot.py --demo --name report_demo
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now  # noqa: E402

from r1build.cli.main import main as r1build_main  # noqa: E402
from tests.report.chromium import open_page  # noqa: E402

PROBE = "[...document.querySelectorAll('section.kernel h2')].map(h => h.textContent).join(', ')"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--manifest", default=".", help="manifest or folder (default: .)")
    parser.add_argument("--cache-dir", default=None, help="cache directory (default: r1build's)")
    parser.add_argument("--name", default="report", help="file name stem under --out (default: report)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--demo", action="store_true", help="first run the report tests' search in a temp project")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.demo:
            import pytest

            from tests.generate.gen_support import Project
            from tests.report.searches import run_search

            (Path(tmp) / "proj").mkdir()
            project = Project(Path(tmp) / "proj", Path(tmp) / "cache")
            with pytest.MonkeyPatch.context() as monkeypatch:
                run_search(project, monkeypatch)
            args.manifest, args.cache_dir = str(project.root), str(project.cache_dir)
        page = Path(tmp) / "report.html"
        argv = ["report", "-m", args.manifest, "-o", str(page)]
        if args.cache_dir:
            argv += ["--cache-dir", args.cache_dir]
        if r1build_main(argv) != 0:
            return 1
        load = open_page(page, PROBE, screenshot=True)
        size = page.stat().st_size
    if load.errors or load.requests:
        print(f"the page did not load cleanly: {load.errors} {load.requests}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / f"{args.name}.png"
    assert load.screenshot is not None
    png.write_bytes(load.screenshot)
    info = host_info()
    note = (
        f"# r1build report screenshot\n\n- date: {utc_now()}\n- command: `{command_line(__file__)}`\n"
        f"- host: {info}\n- page: {size / 1e6:.1f} MB, kernels shown: {load.value}\n"
        "- loaded in headless Chromium with no console error and no network request\n"
        + (
            "- the search: the report tests' (local chat server, real nvcc, the tests' GPU stand-in's verdicts "
            "and times: no GPU)\n"
            if args.demo
            else ""
        )
        + "\n"
        f"![report]({png.name})\n"
    )
    (args.out / f"{args.name}.md").write_text(note)
    print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
