"""Variants a manifest provides: tunables only where a source names them."""

from __future__ import annotations

from r1build.evaluate.variants import expand_variants, tunables_named
from r1build.manifest import Manifest


def test_root_variants(root_manifest: Manifest) -> None:
    silu = expand_variants(root_manifest, root_manifest.kernel("silu_mul"))
    blocks, unrolls = [64, 128, 192, 256, 384, 512], [1, 2, 4, 8]
    assert [(c.origin.kind, c.defines) for c in silu] == [
        ("baseline", {}),  # the baseline never names BLOCK or UNROLL: one variant
        *[("file", {"BLOCK": b, "UNROLL": u}) for b in blocks for u in unrolls],  # declaration order, product
    ]
    matmul = expand_variants(root_manifest, root_manifest.kernel("matmul"))
    # the baseline names TILE only (its own default first), the register-tiled file the other five
    assert [c.defines for c in matmul[:3]] == [{}, {"TILE": 16}, {"TILE": 32}]
    assert all(set(c.defines) == {"BM", "BN", "BK", "TM", "TN"} for c in matmul[3:]) and len(matmul) == 3 + 32
    assert len({c.digest for c in matmul}) == 35
    counts = {s.name: len(expand_variants(root_manifest, s)) for s in root_manifest.kernels}
    assert counts == {"silu_mul": 25, "softmax_rows": 37, "sum_all": 33, "transpose": 16, "matmul": 35, "rmsnorm": 19}
    assert sum(counts.values()) == 165  # issue 11: enough variants that a throughput figure means something


def test_tunables_named_matches_identifiers_only(root_manifest: Manifest) -> None:
    spec = root_manifest.kernel("silu_mul")
    assert tunables_named(spec, "#define BLOCK 4") == ["BLOCK"]
    assert tunables_named(spec, "int BLOCKS = 4; // MYBLOCK") == []
