"""``r1build check`` names a numpy reference that likely cannot run on cupy (read from its source): numpy names
cupy lacks (``np.errstate``, ``np.vectorize``), ``raise NotImplementedError``, Python loops over an argument's
elements; it points to ``gpu-reference`` and says nothing for a kernel that names one."""

from __future__ import annotations

from pathlib import Path

import pytest

from r1build.cli.main import main

MANIFEST = """\
archs = ["sm_90"]

[[kernel]]
name = "twice"
description = "y = 2 x for a vector x of n floats."
args = [
  { name = "x", dtype = "float32", shape = ["n"], role = "in" },
  { name = "y", dtype = "float32", shape = ["n"], role = "out" },
  { name = "n", dtype = "int32" },
]
reference = "reference:twice"
test-shapes = [{ n = 1 }, { n = 33 }]
bench-shapes = [{ n = 1024 }]
"""

HEAD = "import numpy as np\nfrom numpy import errstate as quiet\n\n\n"

# (id, the function's body, what the warning says)
CASES = [
    ("errstate", "    with np.errstate(over='ignore'):\n        return 2 * x\n", "uses np.errstate"),
    ("imported-by-name", "    with quiet(over='ignore'):\n        return 2 * x\n", "uses numpy's errstate"),
    ("vectorize", "    return np.vectorize(lambda v: 2 * v)(x).astype(np.float32)\n", "uses np.vectorize"),
    (
        "not-implemented",
        "    if n < 0:\n        raise NotImplementedError('negative')\n    return 2 * x\n",
        "raises NotImplementedError",
    ),
    (
        "element-loop",
        "    y = np.empty_like(x)\n    for i in range(n):\n        y[i] = 2 * x[i]\n    return y\n",
        "loops in Python over an argument's elements",
    ),
    ("comprehension", "    return np.array([2 * v for v in x], dtype=np.float32)\n", "loops in Python"),
    ("in-a-helper", "    return helper(x)\n", "uses np.errstate"),
]

HELPER = "\n\ndef helper(x):\n    with np.errstate(over='ignore'):\n        return 2 * x\n"


def project(root: Path, body: str, extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "kernels.toml").write_text(MANIFEST + extra, encoding="utf-8")
    source = HEAD + "def twice(x, n):\n" + body + HELPER
    (root / "reference.py").write_text(source, encoding="utf-8")
    (root / "gpu_reference.py").write_text("def twice(x, n):\n    return 2 * x\n", encoding="utf-8")
    return root / "kernels.toml"


@pytest.mark.parametrize(("body", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_names_a_reference_that_likely_cannot_run_on_cupy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, fragment: str
) -> None:
    path = project(tmp_path / "p", body)
    assert main(["check", "-m", str(path)]) == 0
    err = capsys.readouterr().err
    line = next((ln for ln in err.splitlines() if "likely cannot run on cupy" in ln), None)
    assert line is not None, err
    assert "twice" in line and "reference:twice" in line and fragment in line and "reference.py:" in line, line
    assert "`gpu-reference`" in line, line


@pytest.mark.parametrize("body", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_no_warning_where_a_gpu_reference_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str
) -> None:
    path = project(tmp_path / "p", body, extra='gpu-reference = "gpu_reference:twice"\n')
    assert main(["check", "-m", str(path)]) == 0
    assert "cupy" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "body",
    [
        "    return (2 * x).astype(np.float32)\n",
        "    out = 2 * x\n    for k in range(2):\n        out = out + 0\n    return out\n",
    ],
    ids=["vectorised", "loop-not-over-elements"],
)
def test_a_vectorised_reference_gets_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str) -> None:
    path = project(tmp_path / "p", body)
    assert main(["check", "-m", str(path)]) == 0
    assert "cupy" not in capsys.readouterr().err


def test_check_json_names_what_would_fail_on_cupy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``check --json`` carries the same findings as the warning, per kernel (a script reads the document, not
    stderr); a kernel that names a ``gpu-reference`` has none."""
    import json

    name, body, fragment = CASES[0]
    path = project(tmp_path / "p", body)
    assert main(["check", "--json", "-m", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    (found,) = doc["references_not_for_cupy"]["twice"]
    assert fragment in found and "reference.py:" in found, (name, found)
    path = project(tmp_path / "q", body, extra='gpu-reference = "gpu_reference:twice"\n')
    assert main(["check", "--json", "-m", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["references_not_for_cupy"] == {}
