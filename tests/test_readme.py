"""The README's example kernel declaration is a valid manifest."""

from __future__ import annotations

import re
from pathlib import Path

from r1build.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_manifest_loads(root_copy: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"One kernel looks like this:\n\n```toml\n(.*?)```", readme, re.S)
    assert m, "the README's example manifest block is missing"
    (root_copy / "kernels.toml").write_text(m.group(1), encoding="utf-8")
    manifest = load_manifest(root_copy / "kernels.toml")
    assert [k.name for k in manifest.kernels] == ["softmax_rows"]
    assert manifest.archs_of(manifest.kernels[0]) == ["sm_80", "sm_90"]
