"""Manifest loading and validation: every error names file, line and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r1build.errors import ManifestError
from r1build.manifest import load_manifest, parse_arch
from r1build.manifest.schema import MANIFEST_PAGE, SCHEMA_PATH, render_reference, render_schema, update_page

ROOT = Path(__file__).resolve().parents[2]


def test_root_manifest_loads() -> None:
    m = load_manifest(ROOT / "kernels.toml")
    names = [k.name for k in m.kernels]
    assert names == ["silu_mul", "softmax_rows", "sum_all", "transpose", "matmul", "rmsnorm"]
    assert m.settings.archs == ["sm_80", "sm_90"]
    assert m.kernel("transpose").archs == ["sm_80", "sm_90"]
    assert m.kernel("matmul").tunables == {
        "TILE": [16, 32],
        "BM": [64, 128],
        "BN": [64, 128],
        "BK": [8, 16],
        "TM": [4, 8],
        "TN": [4, 8],
    }
    assert all(len(d) == 64 for d in m.reference_digests.values())


def test_verdict_settings_per_kernel_and_project(root_copy: Path) -> None:
    """``must-beat`` and ``margin`` are set project-wide and per kernel (the kernel's wins); ``gpu-reference`` is
    resolved like ``reference``; none of them changes a decision key (they judge a winner, never pick it)."""
    from r1build.keys import decision_key

    path = root_copy / "kernels.toml"
    before = load_manifest(path)
    text = path.read_text(encoding="utf-8")
    text = text.replace('target = "r1build::kernels"', 'target = "r1build::kernels"\nmust-beat = "library"', 1)
    text = text.replace(
        'reference = "kernels.reference:rmsnorm"',
        'reference = "kernels.reference:rmsnorm"\ngpu-reference = "kernels.reference:rmsnorm"\nmargin = 0.05',
        1,
    )
    path.write_text(text, encoding="utf-8")
    m = load_manifest(path)
    rms, silu = m.kernel("rmsnorm"), m.kernel("silu_mul")
    assert rms.gpu_reference == "kernels.reference:rmsnorm" and silu.gpu_reference is None
    assert m.must_beat_library(rms) and m.must_beat_library(silu)
    assert (m.margin_of(rms), m.margin_of(silu)) == (0.05, 0.0)
    assert decision_key(m, rms, "sm_90") == decision_key(before, before.kernel("rmsnorm"), "sm_90")


def test_torch_reference_and_torch_bars(root_copy: Path) -> None:
    """``torch-reference`` is resolved like ``reference`` and is no part of the decision key; ``must-beat``
    ``torch`` and ``library-and-torch`` ask for the torch bar (and the library's with the latter)."""
    from r1build.keys import decision_key

    path = root_copy / "kernels.toml"
    before = load_manifest(path)
    text = path.read_text(encoding="utf-8")
    text = text.replace(
        'reference = "kernels.reference:rmsnorm"',
        'reference = "kernels.reference:rmsnorm"\ntorch-reference = "kernels.reference:rmsnorm"\nmust-beat = "torch"',
        1,
    )
    path.write_text(text, encoding="utf-8")
    m = load_manifest(path)
    rms, silu = m.kernel("rmsnorm"), m.kernel("silu_mul")
    assert rms.torch_reference == "kernels.reference:rmsnorm" and silu.torch_reference is None
    assert m.must_beat_torch(rms) and not m.must_beat_library(rms)
    assert not m.must_beat_torch(silu) and not m.must_beat_library(silu)
    assert decision_key(m, rms, "sm_90") == decision_key(before, before.kernel("rmsnorm"), "sm_90")
    path.write_text(text.replace('must-beat = "torch"', 'must-beat = "library-and-torch"', 1), encoding="utf-8")
    both = load_manifest(path)
    assert both.must_beat_torch(both.kernel("rmsnorm")) and both.must_beat_library(both.kernel("rmsnorm"))


def test_committed_schema_is_current() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render_schema(), (
        "regenerate with: python -m r1build.manifest.schema"
    )
    page = MANIFEST_PAGE.read_text(encoding="utf-8")
    assert update_page(page, render_reference()) == page, "stale: python -m r1build.manifest.schema"
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert "tolerance" in schema["$defs"]["KernelSpec"]["properties"]


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("sm_90", "sm_90"),
        ("90", "sm_90"),
        ("9.0", "sm_90"),
        ("90-real", "sm_90"),
        ("sm_90a", "sm_90a"),
        ("compute_80", "sm_80"),
        (86, "sm_86"),
        ("12.0", "sm_120"),
    ],
)
def test_arch_spellings(spelling: str | int, canonical: str) -> None:
    assert parse_arch(spelling) == canonical


@pytest.mark.parametrize("bad", ["sm_9", "gfx90a", "", "sm_90-real", "compute_90-virtual", "90-fat", "0.9"])
def test_unknown_arch(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a GPU architecture"):
        parse_arch(bad)


# (what to replace, replacement, expected message fragment, expected key, line content fragment)
CASES = [
    (
        'tolerance = { rtol = 1e-4, atol = 5e-3 }\nbaseline = "kernels/matmul.cu"',
        'tolerence = { rtol = 1e-4, atol = 5e-3 }\nbaseline = "kernels/matmul.cu"',
        "unknown key 'tolerence' (did you mean 'tolerance'?)",
        "kernel[4].tolerence",
        "tolerence =",
    ),
    ('target = "r1build::kernels"', 'targt = "r1build::kernels"', "did you mean 'target'?", "targt", "targt ="),
    (
        '{ name = "weight", dtype = "float32"',
        '{ name = "weight", dtype = "flaot32"',
        "unknown dtype 'flaot32' (did you mean 'float32'?)",
        "kernel[5].args[1].dtype",
        '"weight"',
    ),
    ('name = "sum_all"', 'name = "sum-all"', "not a valid C identifier", "kernel[2].name", '"sum-all"'),
    (
        'name = "sum_all"',
        'name = "transpose"',
        "duplicate kernel name 'transpose' (also kernel[2])",
        "kernel[3].name",
        "transpose",
    ),
    (
        'shape = ["cols", "rows"], role = "out"',
        'shape = ["cols", "rowz"], role = "out"',
        "undeclared size 'rowz' (did you mean 'rows'?)",
        "kernel[3].args[1].shape[1]",
        '"rowz"',
    ),
    (
        "kernels.reference:rmsnorm",
        "kernels.reference:rmsnrm",
        "has no function 'rmsnrm' (did you mean 'rmsnorm'?)",
        "kernel[5].reference",
        "rmsnrm",
    ),
    (
        "kernels.reference:rmsnorm",
        "kernels.missing:rmsnorm",
        "module 'kernels.missing' not found",
        "kernel[5].reference",
        "kernels.missing",
    ),
    (
        'reference = "kernels.reference:rmsnorm"',
        'reference = "kernels.reference:rmsnorm"\ngpu-refrence = "kernels.reference:rmsnorm"',
        "unknown key 'gpu-refrence' (did you mean 'gpu-reference'?)",
        "kernel[5].gpu-refrence",
        "gpu-refrence",
    ),
    (
        'reference = "kernels.reference:rmsnorm"',
        'reference = "kernels.reference:rmsnorm"\ngpu-reference = "kernels.reference:rmsnrm"',
        "has no function 'rmsnrm' (did you mean 'rmsnorm'?)",
        "kernel[5].gpu-reference",
        "gpu-reference",
    ),
    (
        'reference = "kernels.reference:rmsnorm"',
        'reference = "kernels.reference:rmsnorm"\ngpu-reference = "rmsnorm"',
        "is not of the form 'module:function'",
        "kernel[5].gpu-reference",
        "gpu-reference",
    ),
    (
        'reference = "kernels.reference:rmsnorm"',
        'reference = "kernels.reference:rmsnorm"\nmust-beat = "cublas"',
        "'cublas'",
        "kernel[5].must-beat",
        "must-beat",
    ),
    (
        'reference = "kernels.reference:rmsnorm"',
        'reference = "kernels.reference:rmsnorm"\ntorch-refrence = "kernels.reference:rmsnorm"',
        "unknown key 'torch-refrence' (did you mean 'torch-reference'?)",
        "kernel[5].torch-refrence",
        "torch-refrence",
    ),
    (
        'reference = "kernels.reference:rmsnorm"',
        'reference = "kernels.reference:rmsnorm"\ntorch-reference = "kernels.reference:rmsnrm"',
        "has no function 'rmsnrm' (did you mean 'rmsnorm'?)",
        "kernel[5].torch-reference",
        "torch-reference",
    ),
    (
        'reference = "kernels.reference:rmsnorm"',
        'reference = "kernels.reference:rmsnorm"\nmust-beat = "torch"',
        "must-beat = \"torch\" needs a `torch-reference` for kernel 'rmsnorm'",
        "kernel[5].must-beat",
        "must-beat",
    ),
    (
        'target = "r1build::kernels"',
        'target = "r1build::kernels"\nmust-beat = "library-and-torch"',
        'must-beat = "library-and-torch" needs a `torch-reference` for kernel',
        "must-beat",
        "must-beat",
    ),
    (
        'target = "r1build::kernels"',
        'target = "r1build::kernels"\nmargin = -0.05',
        "must be at least 0, got -0.05",
        "margin",
        "margin",
    ),
    (
        'target = "r1build::kernels"',
        'target = "r1build::kernels"\nmust-beet = "library"',
        "did you mean 'must-beat'?",
        "must-beet",
        "must-beet",
    ),
    (
        'archs = ["sm_80", "90-real"]',
        'archs = ["sm_80", "sm70"]',
        "'sm70' is not a GPU architecture",
        "kernel[3].archs[1]",
        "sm70",
    ),
    (
        'target = "r1build::kernels"',
        'target = "r1build::kernels"\nsymbol-prefix = "_my"',
        "cannot start C names",
        "symbol-prefix",
        "symbol-prefix",
    ),
    (
        'target = "r1build::kernels"',
        'target = "r1build::kernels"\nsymbol-prefix = "my__lib"',
        "without '__'",
        "symbol-prefix",
        "symbol-prefix",
    ),
    (
        'target = "r1build::kernels"',
        'target = "r1build::kernels"\nvisibility = "public"',
        "'public'",
        "visibility",
        "visibility",
    ),
    (
        "max-concurrency = 8",
        'max-concurrency = "8"',
        "expected an integer, got a string",
        "generation.max-concurrency",
        "max-concurrency",
    ),
    (
        "{ n = 1 }, { n = 31 }",
        "{ n = 1 }, { m = 31 }",
        "'m' is not a size of this kernel",
        "kernel[0].test-shapes[1].m",
        "test-shapes",
    ),
    (
        'baseline = "kernels/sum_all.cu"',
        'baseline = "kernels/nope.cu"',
        "file 'kernels/nope.cu' not found",
        "kernel[2].baseline",
        "nope.cu",
    ),
    ('flops = "2*m*n*k"', 'flops = "2*m*n*q"', "'q' is not a size of this kernel", "kernel[4].flops", "flops"),
    (
        '{ name = "eps",    dtype = "float32", value = 1e-6 }',
        '{ name = "eps",    dtype = "float32" }',
        "needs a value",
        "kernel[5].args[5].value",
        '"eps"',
    ),
]


@pytest.mark.parametrize(("old", "new", "message", "key", "line_has"), CASES, ids=[c[3] for c in CASES])
def test_invalid_manifest(root_copy: Path, old: str, new: str, message: str, key: str, line_has: str) -> None:
    path = root_copy / "kernels.toml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    err = info.value
    assert message in err.message
    assert err.key == key
    assert err.file == str(path.resolve())
    assert err.line is not None
    assert line_has in path.read_text(encoding="utf-8").splitlines()[err.line - 1]
    assert str(err).startswith(f"{path.resolve()}:{err.line}: {key}: ")


def test_malformed_toml_names_line(root_copy: Path) -> None:
    path = root_copy / "kernels.toml"
    text = path.read_text(encoding="utf-8").replace('flops = "n"', 'flops = n"', 1)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ManifestError, match="invalid TOML") as info:
        load_manifest(path)
    assert info.value.line is not None and 'flops = n"' in text.splitlines()[info.value.line - 1]


def test_unimportable_reference(root_copy: Path) -> None:
    (root_copy / "kernels" / "reference.py").write_text("import not_a_module_anywhere\n", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"importing .* failed: ModuleNotFoundError"):
        load_manifest(root_copy / "kernels.toml")


def test_pyproject_table(tmp_path: Path, root_copy: Path) -> None:
    text = (root_copy / "kernels.toml").read_text(encoding="utf-8")
    body = []
    for line in text.splitlines():
        if line.startswith("[[kernel]]"):
            line = "[[tool.r1build.kernel]]"
        elif line.startswith("[generation]"):
            line = "[tool.r1build.generation]"
        body.append(line)
    header = '[project]\nname = "x"\nversion = "0"\n\n[tool.r1build]\n'
    (root_copy / "pyproject.toml").write_text(header + "\n".join(body) + "\n", encoding="utf-8")
    (root_copy / "kernels.toml").unlink()
    from r1build.manifest import find_manifest

    m = load_manifest(find_manifest(root_copy))
    assert m.path.name == "pyproject.toml" and len(m.kernels) == 6
    bad = (root_copy / "pyproject.toml").read_text(encoding="utf-8").replace('name = "matmul"', 'nam = "matmul"')
    (root_copy / "pyproject.toml").write_text(bad, encoding="utf-8")
    with pytest.raises(ManifestError, match=r"tool\.r1build\.kernel\[4\]\.nam: unknown key 'nam'") as info:
        load_manifest(root_copy / "pyproject.toml")
    assert info.value.line is not None
