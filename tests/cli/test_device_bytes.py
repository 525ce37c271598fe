"""The device code each arch adds: shown by ``lock`` / ``resolve`` (table and JSON), and capped by the manifest's
``max-wheel-mib``: generated code over the cap is never written, with the archs' sizes named."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from r1build.cli.main import main

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: str) -> Path:
    for var in ("R1BUILD_NVCC", "CUDACXX", "R1BUILD_REMOTE_CACHE", "R1BUILD_CLUSTER", "R1BUILD_LOCKED"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(tmp_path / "cache"))
    project = tmp_path / "tiny"
    shutil.copytree(ROOT / "tests" / "packages" / "tiny", project)
    manifest = project / "kernels.toml"
    text = manifest.read_text(encoding="utf-8").replace('archs = ["sm_90"]', settings)
    manifest.write_text(text, encoding="utf-8")
    return manifest


def test_lock_shows_the_device_code_of_each_arch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _tiny(tmp_path, monkeypatch, 'archs = ["sm_80", "sm_100f"]')
    assert main(["lock", "--offline", "--no-gpu", "-m", str(manifest)]) == 0
    out = capsys.readouterr().out
    found = re.search(r"device code per arch: sm_80 (\d+\.\d) KiB, sm_100f (\d+\.\d) KiB \((\d+\.\d) KiB in all\)", out)
    assert found, out
    assert main(["lock", "--offline", "--no-gpu", "--json", "-m", str(manifest)]) == 0
    doc = json.loads(capsys.readouterr().out)
    per_arch = doc["device_bytes"]
    assert set(per_arch) == {"sm_80", "sm_100f"} and all(1000 < n < 100_000 for n in per_arch.values())
    assert [k["device_bytes"] for k in doc["kernels"]] == [per_arch["sm_80"], per_arch["sm_100f"]]
    assert f"{per_arch['sm_100f'] / 1024:.1f}" == found.group(2)

    # status reads it from the winner's cached decision, or, for a winner the gate alone chose (no decision: a
    # baseline here), from its cached gate verdict: the same line (tests/report/test_report_content.py shows it for
    # a searched winner)
    assert main(["status", "-m", str(manifest)]) == 0
    assert found.group(0) in capsys.readouterr().out
    assert main(["status", "--json", "-m", str(manifest)]) == 0
    rows = json.loads(capsys.readouterr().out)["kernels"]
    assert [r["device_bytes"] for r in rows] == [per_arch["sm_80"], per_arch["sm_100f"]]


def test_generated_code_over_max_wheel_mib_is_refused_naming_each_arch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _tiny(tmp_path, monkeypatch, 'archs = ["sm_80", "sm_90"]\nmax-wheel-mib = 0.002')
    out = tmp_path / "generated"
    assert main(["resolve", "--offline", "--no-gpu", "-m", str(manifest), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert re.search(
        r"kernels\.toml:3: max-wheel-mib: the kernels' device code is \d+\.\d KiB, over max-wheel-mib = 0\.002 "
        r"\(2\.0 KiB\): sm_80 \d+\.\d KiB, sm_90 \d+\.\d KiB; drop archs \(or kernels\) to fit",
        err,
    ), err
    assert "Traceback" not in err and not out.exists()
