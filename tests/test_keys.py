"""r1build/keys.py: the decision key is written from the fields it needs without :func:`dataclasses.asdict`'s deep
copies (issue 29: at 50 kernels x 3 archs they dominated a locked run), byte for byte the key it was."""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from pathlib import Path
from typing import Any

from r1build.keys import KEY_SCHEMA, decision_key, digest_bytes, digest_json
from r1build.manifest import KernelSpec, Manifest, load_manifest

ROOT = Path(__file__).resolve().parents[1]


def _asdict_key(manifest: Manifest, spec: KernelSpec, arch: str) -> str:
    """The decision key as r1build computed it before (``dataclasses.asdict`` of the spec and its budget)."""
    data = dataclasses.asdict(spec)
    for name in ("archs", "budget", "gpu_reference", "torch_reference", "must_beat", "margin", "timing_regime"):
        data.pop(name)
    if manifest.timing_regime_of(spec) != "back-to-back":
        data["timing_regime"] = manifest.timing_regime_of(spec)
    data["reference"] = {"name": spec.reference, "source": manifest.reference_digests.get(spec.name)}
    data["baseline"] = None if spec.baseline is None else digest_bytes((manifest.root / spec.baseline).read_bytes())
    data["candidates"] = [digest_bytes((manifest.root / c).read_bytes()) for c in spec.candidates]
    g = manifest.settings.generation
    generation: dict[str, Any] = {
        "provider": g.provider,
        "model": g.model,
        "temperatures": list(g.temperatures),
        "top_p": g.top_p,
        "max_tokens": g.max_tokens,
        "directions": list(g.directions),
        "budget": dataclasses.asdict(spec.budget),
    }
    return digest_json(
        {
            "schema": KEY_SCHEMA,
            "spec": data,
            "arch": arch,
            "generation": generation,
            "nvcc_flags": list(manifest.settings.nvcc_flags),
        }
    )


def _synthetic(tmp_path: Path, kernels: int, archs: list[str]) -> Manifest:
    spec = importlib.util.spec_from_file_location("bench_synthetic", ROOT / "bench" / "_synthetic.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return load_manifest(module.write_project(tmp_path, kernels, archs), check_references=False)


def _pairs(manifest: Manifest) -> list[tuple[KernelSpec, str]]:
    return [(s, a) for s in manifest.kernels for a in manifest.archs_of(s)]


def test_the_keys_of_the_root_manifest_are_those_asdict_gave() -> None:
    manifest = load_manifest(ROOT / "kernels.toml", check_references=False)
    pairs = _pairs(manifest)
    assert len(pairs) >= 12
    assert [decision_key(manifest, s, a) for s, a in pairs] == [_asdict_key(manifest, s, a) for s, a in pairs]


def test_the_keys_at_50_kernels_by_3_archs_are_those_asdict_gave_and_cost_less(tmp_path: Path) -> None:
    manifest = _synthetic(tmp_path, 50, ["sm_80", "sm_89", "sm_90"])
    pairs = _pairs(manifest)
    assert len(pairs) == 150

    def best(key: Any) -> tuple[float, list[str]]:
        times, keys = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            keys = [key(manifest, s, a) for s, a in pairs]
            times.append(time.perf_counter() - t0)
        return min(times), keys

    fast, new = best(decision_key)
    slow, old = best(_asdict_key)
    assert new == old
    assert fast < slow / 2, (fast, slow)


def test_a_toml_digest_sees_what_r1build_reads_and_nothing_else() -> None:
    """The digest a replay record checks a manifest by: comments, layout, quoting and the order of keys change
    nothing; a value, its type (a date is no string of the same text, 1.0 is no 1) or a key does."""
    import datetime as dt

    from r1build.digests import toml_digest
    from r1build.manifest.tomltext import parse_toml

    base = toml_digest(parse_toml('a = 1\nb = "x"\n[t]\nc = [1, 2]\n'))
    same = "# comment\n\nb = 'x'   # again\na = 1\n\n[t]\nc = [\n  1,\n  2,\n]\n"
    assert toml_digest(parse_toml(same)) == base
    for other in ('a = 1.0\nb = "x"\n[t]\nc = [1, 2]\n', 'a = 1\nb = "y"\n[t]\nc = [1, 2]\n', 'a = 1\nb = "x"\n'):
        assert toml_digest(parse_toml(other)) != base, other
    assert toml_digest({"d": dt.date(2026, 12, 5)}) != toml_digest({"d": "2026-12-05"})
    assert toml_digest(parse_toml("d = 2026-12-05")) == toml_digest({"d": dt.date(2026, 12, 5)})
