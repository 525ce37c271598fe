"""GPU arch spellings and the code each embeds, the arch table read from the installed nvcc, and the errors for an
arch that nvcc lacks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from r1build.errors import ManifestError, ToolchainError
from r1build.manifest import load_manifest
from r1build.manifest.archs import ArchTarget, arch_info, merge_targets, parse_target, settle_codes
from r1build.records import ResolveOptions
from r1build.toolchain.archs import require_supported_archs
from r1build.toolchain.nvcc import Toolchain, gpu_archs, toolchain

ROOT = Path(__file__).resolve().parents[2]


def require_toolchain() -> Toolchain:
    try:
        return toolchain()
    except ToolchainError as exc:  # pragma: no cover - every development and CI machine has nvcc
        pytest.skip(str(exc))


@pytest.mark.parametrize(
    ("spelling", "arch", "code"),
    [
        ("sm_90", "sm_90", "default"),  # machine code; PTX by the manifest's rule
        ("9.0", "sm_90", "default"),
        ("90", "sm_90", "sass+ptx"),  # CMake's CUDA_ARCHITECTURES: both
        ("90-real", "sm_90", "sass"),
        ("90-virtual", "sm_90", "ptx"),
        ("compute_90", "sm_90", "ptx"),  # nvcc's virtual arch
        ("sm_90a", "sm_90a", "default"),
        ("90a-real", "sm_90a", "sass"),
        ("compute_100a", "sm_100a", "ptx"),
        ("sm_88", "sm_88", "default"),  # not in r1build's facts table; nvcc decides whether it exists
        (86, "sm_86", "sass+ptx"),
    ],
)
def test_spellings_say_what_code_is_embedded(spelling: str | int, arch: str, code: str) -> None:
    target = parse_target(spelling)
    assert (target.arch, target.code) == (arch, code)


@pytest.mark.parametrize(
    ("spelling", "arch", "code"),
    [
        ("sm_100f", "sm_100f", "default"),
        ("100f", "sm_100f", "sass+ptx"),
        ("120f-real", "sm_120f", "sass"),
        ("compute_103f", "sm_103f", "ptx"),
        ("12.1f", "sm_121f", "default"),
    ],
)
def test_family_archs_are_targets_of_their_own(spelling: str, arch: str, code: str) -> None:
    target = parse_target(spelling)
    assert (target.arch, target.code) == (arch, code)
    info = arch_info(arch)
    assert info.arch == arch and info.capability == arch_info(arch[:-1]).capability
    assert info.number == arch.removeprefix("sm_")


def test_family_archs_carry_no_default_ptx() -> None:
    # family PTX runs only within its family: the highest plain arch carries the forward-running PTX
    assert codes(["sm_90", "sm_100f", "sm_120f"]) == {
        "sm_90": (True, True),
        "sm_100f": (True, False),
        "sm_120f": (True, False),
    }


def test_two_spellings_of_one_arch_embed_what_either_asks_for() -> None:
    merged = merge_targets([parse_target(s) for s in ("90-real", "sm_80", "compute_90", "sm_80")])
    assert [(t.arch, t.code) for t in merged] == [("sm_90", "sass+ptx"), ("sm_80", "default")]
    assert [t.code for t in merge_targets([parse_target("sm_90"), parse_target("90-real")])] == ["sass"]


def codes(spellings: list[str], ptx: bool = True) -> dict[str, tuple[bool, bool]]:
    settled = settle_codes(merge_targets([parse_target(s) for s in spellings]), ptx)
    return {t.arch: (t.sass, t.ptx) for t in settled}


def test_ptx_of_the_highest_plain_arch_by_default() -> None:
    assert codes(["sm_80", "sm_90"]) == {"sm_80": (True, False), "sm_90": (True, True)}
    assert codes(["sm_90", "sm_80"]) == {"sm_90": (True, True), "sm_80": (True, False)}
    # an "a" arch's PTX runs on no later GPU: the highest plain arch carries it
    assert codes(["sm_80", "sm_90a"]) == {"sm_80": (True, True), "sm_90a": (True, False)}
    # turned off, or the highest spelled 90-real: machine code only
    assert codes(["sm_80", "sm_90"], ptx=False) == {"sm_80": (True, False), "sm_90": (True, False)}
    assert codes(["sm_80", "90-real"]) == {"sm_80": (True, False), "sm_90": (True, False)}
    # explicit spellings hold whatever ptx says
    assert codes(["80", "compute_90"], ptx=False) == {"sm_80": (True, True), "sm_90": (False, True)}


def test_loaded_manifest_decides_each_kernels_code(tmp_path: Path) -> None:
    m = load_manifest(ROOT / "kernels.toml")
    silu, transpose = m.kernel("silu_mul"), m.kernel("transpose")
    assert (m.target(silu, "sm_90").code, m.target(silu, "sm_80").code) == ("sass+ptx", "sass")
    # transpose lists ["sm_80", "90-real"]: its highest arch asks for machine code only
    assert (m.target(transpose, "sm_90").code, m.target(transpose, "sm_80").code) == ("sass", "sass")
    assert m.target(transpose, "sm_90").key == ("kernel", 3, "archs", 1)

    text = (ROOT / "tests" / "packages" / "tiny" / "kernels.toml").read_text(encoding="utf-8")
    for name in ("kernels.toml", "reference.py", "scale.cu"):
        (tmp_path / name).write_bytes((ROOT / "tests" / "packages" / "tiny" / name).read_bytes())
    (tmp_path / "kernels.toml").write_text(text.replace('archs = ["sm_90"]', 'archs = ["sm_80"]\nptx = false'))
    tiny = load_manifest(tmp_path / "kernels.toml")
    assert tiny.target(tiny.kernel("scale"), "sm_80").code == "sass"


def test_arch_table_is_the_installed_nvccs() -> None:
    tc = require_toolchain()
    known = gpu_archs(tc)
    listed = subprocess.run([tc.nvcc, "--list-gpu-code"], capture_output=True, text=True, check=True).stdout.split()
    assert set(known.real) == set(listed) and "sm_90" in known.real
    assert {f"compute_{a.removeprefix('sm_')}" for a in known.real} <= set(known.virtual)
    assert "sm_90a" in known.specific and all(a.endswith("a") for a in known.specific)
    assert {"sm_100f", "sm_103f", "sm_120f"} <= set(known.family) and all(a.endswith("f") for a in known.family)
    assert known.supports("sm_100f", sass=True, ptx=True) and not known.supports("sm_90f", sass=True, ptx=False)
    assert "sm_100f" in known.describe()
    assert known.supports("sm_90", sass=True, ptx=True) and known.supports("sm_90a", sass=True, ptx=False)
    assert not known.supports("sm_61", sass=True, ptx=False)  # gone from CUDA 12 and 13
    assert gpu_archs(tc) is known  # asked once per nvcc identity


def manifest_with(tmp_path: Path, archs: str) -> Path:
    for name in ("reference.py", "scale.cu"):
        (tmp_path / name).write_bytes((ROOT / "tests" / "packages" / "tiny" / name).read_bytes())
    text = (ROOT / "tests" / "packages" / "tiny" / "kernels.toml").read_text(encoding="utf-8")
    (tmp_path / "kernels.toml").write_text(text.replace('archs = ["sm_90"]', f"archs = {archs}"))
    return tmp_path / "kernels.toml"


def test_every_arch_the_installed_nvcc_lists_is_accepted(tmp_path: Path) -> None:
    tc = require_toolchain()
    known = gpu_archs(tc)
    every = [*known.real, *known.specific, *known.family]
    assert known.family
    # a plain arch and its family sibling are never targeted together (nvcc builds no object with both)
    for archs in ([*known.real, *known.specific], known.family):
        manifest = load_manifest(manifest_with(tmp_path, "[" + ", ".join(f'"{a}"' for a in archs) + "]"))
        require_supported_archs(manifest, tc)
    for arch in every:  # facts for prompts and limits, borrowed from the nearest arch on record where needed
        info = arch_info(arch)
        assert info.arch == arch and info.sm_count > 0 and info.regs_per_thread == 255


def test_an_arch_nvcc_lacks_is_named_with_its_line_and_what_nvcc_offers(tmp_path: Path) -> None:
    tc = require_toolchain()
    path = manifest_with(tmp_path, '["sm_90", "sm_61"]')
    manifest = load_manifest(path)  # loading needs no nvcc
    with pytest.raises(ManifestError) as info:
        require_supported_archs(manifest, tc)
    err = info.value
    assert err.line == 2 and err.key == "archs[1]" and "sm_61" in path.read_text().splitlines()[1]
    assert f"sm_61 is not supported by the installed CUDA: nvcc {tc.release} ({tc.nvcc}) compiles for" in err.message
    assert re.search(r"compiles for sm_\d+, .*sm_90,.* \(and .*sm_90a", err.message)


def test_the_build_refuses_an_arch_nvcc_lacks(tmp_path: Path) -> None:
    from r1build.resolve import prepare_build

    require_toolchain()
    path = manifest_with(tmp_path, '["sm_90", "compute_61"]')
    with pytest.raises(ManifestError, match=r"kernels.toml:2: archs\[1\]: sm_61 is not supported"):
        prepare_build(path.parent, ResolveOptions(cache_dir=tmp_path / "cache"))


def test_a_manifest_built_in_code_gets_the_default_rule() -> None:
    m = load_manifest(ROOT / "kernels.toml")
    from dataclasses import replace

    bare = replace(m, targets={})
    assert bare.target(m.kernel("silu_mul"), "sm_90") == ArchTarget("sm_90", "sass+ptx")
    assert bare.target(m.kernel("silu_mul"), "sm_80") == ArchTarget("sm_80", "sass")


def test_the_table_is_kept_in_the_cache_under_the_nvccs_identity(tmp_path: Path) -> None:
    from dataclasses import replace

    from r1build.cache import Cache
    from r1build.keys import digest_json
    from r1build.toolchain.archs import ARCHS_NAMESPACE, known_archs

    tc = require_toolchain()
    with Cache(tmp_path / "cache") as cache:
        asked = known_archs(tc, cache)
        assert asked == gpu_archs(tc)
        key = digest_json({"nvcc": tc.nvcc, "version": tc.version_text})
        stored = cache.get_json(ARCHS_NAMESPACE, key)
        assert stored is not None and stored["real"] == list(asked.real)
        # what is stored is what is used (another answer stored under this nvcc's identity is believed) ...
        old = {"real": ["sm_90"], "virtual": ["compute_90"], "specific": []}
        cache.put_json(ARCHS_NAMESPACE, key, {**old, "family": []})
        assert known_archs(tc, cache).real == ("sm_90",)
        # ... one stored before family archs were read is asked again (and nvcc's family archs are then known)
        cache.put_json(ARCHS_NAMESPACE, key, old)
        assert known_archs(tc, cache) == asked and "sm_100f" in asked.family
        # ... another nvcc (another --version text) is asked itself, and a malformed document is asked again
        other = replace(tc, version_text=tc.version_text + "\nanother build")
        assert known_archs(other, cache) == asked
        cache.put_json(ARCHS_NAMESPACE, key, {"real": "sm_90"})
        assert known_archs(tc, cache) == asked


def test_a_family_arch_nvcc_lacks_is_named_with_what_nvcc_offers(tmp_path: Path) -> None:
    tc = require_toolchain()
    manifest = load_manifest(manifest_with(tmp_path, '["sm_100f", "sm_90f"]'))  # Hopper has no family target
    with pytest.raises(ManifestError) as info:
        require_supported_archs(manifest, tc)
    assert info.value.key == "archs[1]"
    assert re.search(r"sm_90f is not supported by the installed CUDA: nvcc .* \(and .*sm_100f", info.value.message)


def test_a_plain_arch_beside_its_family_arch_is_refused_at_its_line(tmp_path: Path) -> None:
    # nvcc: "The same GPU code (`sm_100f`) generated for non family-specific and family-specific GPU arch"
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest_with(tmp_path, '["sm_90", "sm_100f", "100-real"]'))
    assert info.value.key == "archs[2]"
    assert info.value.message == (
        "sm_100 and sm_100f run on the same GPUs, and nvcc builds no object with both: keep one "
        "(sm_100f also has the family's own instructions)"
    )
    assert load_manifest(manifest_with(tmp_path, '["sm_100a", "sm_100f", "sm_103"]')).settings.archs
