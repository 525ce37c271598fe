"""Variants a manifest provides: tunables only where a source names them."""

from __future__ import annotations

from r1build.evaluate.variants import expand_variants, tunables_named
from r1build.manifest import Manifest


def test_root_variants(root_manifest: Manifest) -> None:
    silu = expand_variants(root_manifest, root_manifest.kernel("silu_mul"))
    assert [(c.origin.kind, c.defines) for c in silu] == [
        ("baseline", {}),  # the baseline never names BLOCK: one variant
        ("file", {"BLOCK": 128}),
        ("file", {"BLOCK": 256}),
        ("file", {"BLOCK": 512}),
    ]
    matmul = expand_variants(root_manifest, root_manifest.kernel("matmul"))
    assert [c.defines for c in matmul] == [{}, {"TILE": 16}, {"TILE": 32}]
    assert len({c.digest for c in matmul}) == 3
    total = sum(len(expand_variants(root_manifest, s)) for s in root_manifest.kernels)
    assert total == 11


def test_tunables_named_matches_identifiers_only(root_manifest: Manifest) -> None:
    spec = root_manifest.kernel("silu_mul")
    assert tunables_named(spec, "#define BLOCK 4") == ["BLOCK"]
    assert tunables_named(spec, "int BLOCKS = 4; // MYBLOCK") == []
