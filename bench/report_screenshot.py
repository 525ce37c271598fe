"""A screenshot of ``r1build report`` for a manifest and cache, taken in headless Chromium.

Writes the report (``r1build report``, the same code path a user runs) to a temporary file, opens it in headless
Chromium through the DevTools protocol (``tests/report/chromium.py``), checks that it loaded with no console error
and no network request, and saves a PNG of the whole page with a short Markdown note (device, date, command).
On the H200, after a real resolve of the root manifest:

    python bench/report_screenshot.py -m . --cache-dir "$R1BUILD_CACHE_DIR" --name report_h200
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
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
    note = (f"# r1build report screenshot\n\n- date: {utc_now()}\n- command: `{command_line(__file__)}`\n"
            f"- host: {info}\n- page: {size / 1e6:.1f} MB, kernels shown: {load.value}\n"
            "- loaded in headless Chromium with no console error and no network request\n\n"
            f"![report]({png.name})\n")
    (args.out / f"{args.name}.md").write_text(note)
    print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
