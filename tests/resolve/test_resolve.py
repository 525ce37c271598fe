"""The resolver and the project commands, end to end with the real nvcc (no GPU, no LLM endpoint).

One kernel on one arch keeps each compile short; the gate's cache makes later resolves compile nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.errors import ResolveError, StaleLockError
from r1build.events import Event, Note, sink
from r1build.keys import decision_key
from r1build.lock import read_lock
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin
from r1build.resolve import ResolveOptions, emit_resolution, resolve
from tests.support.decisions import plant_measured

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

ONE = ResolveOptions(kernels=["silu_mul"], archs=["sm_90"], evaluate=False, generate=False)


def _env_without_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_BASE_URL", "NVIDIA_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def test_offline_resolve_gates_the_baseline_and_locks_it_unvalidated(root_copy: Path, cache_dir: Path) -> None:
    m = load_manifest(root_copy / "kernels.toml")
    notes: list[Event] = []
    with Cache(cache_dir) as cache, sink(notes.append):
        res = resolve(m, cache, ONE)
    (entry,) = res.entries
    assert (entry.state, entry.provenance, entry.validation) == ("gated", "baseline", "unvalidated")
    assert entry.gate is not None and entry.gate.ok and entry.gate.gate is not None
    assert any(
        isinstance(n, Note) and n.level == "warning" and "baseline" in n.message and "unvalidated" in n.message
        for n in notes
    )
    lock = read_lock(root_copy / "kernels.lock")
    assert lock is not None
    e = lock.entry("silu_mul", "sm_90")
    assert e is not None and e.provenance == "baseline" and e.origin == "kernels/silu_mul.cu"
    assert e.validation == "unvalidated" and e.checks is None
    assert e.key == decision_key(m, m.kernel("silu_mul"), "sm_90")
    # locked now: the second run reads the lock
    with Cache(cache_dir) as cache:
        again = resolve(m, cache, ResolveOptions(**{**ONE.__dict__, "locked": True}))
    assert again.entries[0].state == "locked"
    assert again.entries[0].candidate.source_digest == entry.candidate.source_digest


def test_a_cached_decision_wins_and_is_locked_with_its_time(root_copy: Path, cache_dir: Path) -> None:
    m = load_manifest(root_copy / "kernels.toml")
    spec = m.kernel("silu_mul")
    vec4 = Candidate(
        (root_copy / "kernels/silu_mul_vec4.cu").read_text(encoding="utf-8"),
        Origin("file", "kernels/silu_mul_vec4.cu"),
        {"BLOCK": 256},
    )
    key = decision_key(m, spec, "sm_90")
    with Cache(cache_dir) as cache:
        plant_measured(cache, vec4, key=key, kernel=spec.name, time_us=41.5, samples=200, toolchain="cuda_13.0")
        res = resolve(m, cache, ONE)
    (entry,) = res.entries
    assert (entry.state, entry.provenance, entry.facts.time_us, entry.facts.gpu) == (
        "cached",
        "tuned",
        41.5,
        "NVIDIA H200",
    )
    assert entry.candidate.defines == {"BLOCK": 256}
    e = read_lock(root_copy / "kernels.lock").entry("silu_mul", "sm_90")  # type: ignore[union-attr]
    assert e is not None and e.time_us == 41.5 and e.defines == {"BLOCK": 256} and e.gpu == "NVIDIA H200"
    assert e.validation == "validated" and e.checks == 0  # a decision recorded without its checks version
    out = emit_resolution(res, root_copy / "gen")
    text = next((root_copy / "gen").glob("silu_mul__*.cu")).read_text(encoding="utf-8")
    assert out.name == "r1build_kernels.cmake" and "#define BLOCK 256" in text


def test_locked_fails_on_a_stale_lock_naming_the_kernel(root_copy: Path, cache_dir: Path) -> None:
    m = load_manifest(root_copy / "kernels.toml")
    with Cache(cache_dir) as cache:
        resolve(m, cache, ONE)
    base = root_copy / "kernels/silu_mul.cu"
    base.write_text(base.read_text(encoding="utf-8") + "// edited\n", encoding="utf-8")
    m2 = load_manifest(root_copy / "kernels.toml")
    with Cache(cache_dir) as cache, pytest.raises(StaleLockError, match=r"silu_mul/sm_90: stale: sources changed"):
        resolve(m2, cache, ResolveOptions(**{**ONE.__dict__, "locked": True}))


def _gated_variants(cache_dir: Path) -> int:
    with Cache(cache_dir) as cache:
        return len(cache.entries("gate"))


def test_a_gate_only_resolve_compiles_its_own_sources_up_to_the_first_batch_with_a_winner(
    root_copy: Path, cache_dir: Path
) -> None:
    """With no GPU the first of the user's own sources that passes the gate wins, so only the batches up to it
    are compiled (a batch per round of the cores), not every tunable value set of every file."""
    from r1build.evaluate.variants import expand_variants
    from r1build.gate.nvcc import COMPILE_SLOTS

    m = load_manifest(root_copy / "kernels.toml")
    seeds = expand_variants(m, m.kernel("silu_mul"))
    assert len(seeds) > 2  # a baseline and several tuned variants of the hand-written file
    with Cache(cache_dir) as cache:
        (entry,) = resolve(m, cache, ONE).entries
    assert (entry.provenance, entry.candidate.digest) == ("baseline", seeds[0].digest)
    first = min(COMPILE_SLOTS, len(seeds))
    assert _gated_variants(cache_dir) == first
    # every variant of the baseline fails to compile: the gate goes on, batch by batch, to the first hand-written one
    (root_copy / "kernels/silu_mul.cu").write_text("#error broken on purpose (BLOCK)\n", encoding="utf-8")
    m = load_manifest(root_copy / "kernels.toml")
    seeds = expand_variants(m, m.kernel("silu_mul"))
    winner = next(i for i, c in enumerate(seeds) if c.origin.kind == "file")
    assert winner > 1  # the broken baseline names BLOCK: one variant per value and its own defaults
    second = root_copy / "second-cache"  # a cold cache: what the first resolve gated does not count here
    with Cache(second) as cache:
        (entry,) = resolve(m, cache, ONE).entries
    assert (entry.provenance, entry.candidate.digest) == ("tuned", seeds[winner].digest)
    batches = -(-(winner + 1) // COMPILE_SLOTS)
    assert _gated_variants(second) == min(batches * COMPILE_SLOTS, len(seeds))


def test_without_a_baseline_a_hand_written_file_wins_by_the_gate_and_with_none_it_names_the_fix(
    root_copy: Path, cache_dir: Path
) -> None:
    toml = root_copy / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace('baseline = "kernels/silu_mul.cu"\n', ""), "utf-8")
    with Cache(cache_dir) as cache:
        (entry,) = resolve(load_manifest(toml), cache, ONE).entries
    assert (entry.provenance, entry.validation, entry.candidate.origin.path) == (
        "tuned",
        "unvalidated",
        "kernels/silu_mul_vec4.cu",
    )
    toml.write_text(toml.read_text(encoding="utf-8").replace('candidates = ["kernels/silu_mul_vec4.cu"]', ""), "utf-8")
    with Cache(cache_dir) as cache:
        res = resolve(load_manifest(toml), cache, ONE)
    assert not res.entries and [(u.kernel, u.arch, u.outcomes) for u in res.unresolved] == [("silu_mul", "sm_90", [])]
    assert read_lock(root_copy / "kernels.lock").entry("silu_mul", "sm_90") is None  # type: ignore[union-attr]
    with pytest.raises(ResolveError, match=r"silu_mul/sm_90: no candidate may win(.|\n)*add `baseline"):
        res.require_complete()


def test_vendored_winners_build_a_fresh_clone_with_no_cache(
    root_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _env_without_endpoints(monkeypatch)
    m = load_manifest(root_copy / "kernels.toml")
    spec = m.kernel("silu_mul")
    vec4 = Candidate(
        (root_copy / "kernels/silu_mul_vec4.cu").read_text(encoding="utf-8") + "// generated\n",
        Origin("generated", model="deepseek-reasoner", round=1, sample=3),
        {"BLOCK": 128},
    )
    first = tmp_path / "cache-a"
    with Cache(first) as cache:
        key = decision_key(m, spec, "sm_90")
        plant_measured(cache, vec4, key=key, kernel=spec.name, time_us=40.0, device="H200", samples=100)
    args = ["-m", str(root_copy), "--cache-dir", str(first)]
    assert main(["lock", *args, "--kernel", "silu_mul", "--arch", "sm_90", "--no-gpu", "--offline"]) == 0
    assert main(["vendor", *args]) == 2  # the lock covers one kernel only: vendor needs a current lock
    # narrow the manifest to the locked kernel and arch, then vendor
    toml = root_copy / "kernels.toml"
    text = toml.read_text(encoding="utf-8")
    head, _, _ = text.partition("# Row softmax")
    toml.write_text(head.replace('archs = ["sm_80", "sm_90"]', 'archs = ["sm_90"]', 1), encoding="utf-8")
    assert main(["lock", *args, "--no-gpu", "--offline"]) == 0
    assert main(["vendor", *args]) == 0
    vendored = list((root_copy / "kernels/_r1build").glob("silu_mul__*.cu"))
    assert len(vendored) == 1 and vendored[0].read_text(encoding="utf-8") == vec4.source
    # a fresh clone: no cache at all, --locked
    clone = tmp_path / "clone"
    shutil.copytree(root_copy, clone, ignore=shutil.ignore_patterns("gen"))
    args2 = ["-m", str(clone), "--cache-dir", str(tmp_path / "empty-cache")]
    assert main(["resolve", *args2, "--locked", "--no-gpu", "--out", str(clone / "gen")]) == 0
    assert "#define BLOCK 128" in next((clone / "gen").glob("silu_mul__*.cu")).read_text(encoding="utf-8")
    # an edited vendored file is never used silently
    v = next((clone / "kernels/_r1build").glob("silu_mul__*.cu"))
    v.write_text(v.read_text(encoding="utf-8") + "// tampered\n", encoding="utf-8")
    assert main(["resolve", *args2, "--locked", "--no-gpu"]) == 1


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "r1build.cli.main", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        ('name = "matmul"', 'nme = "matmul"', "kernel[4].nme: unknown key 'nme' (did you mean 'name'?)"),
        ('flops = "n"', 'flops = n"', "invalid TOML"),
        ("kernels.reference:rmsnorm", "kernels.reference:nope", "kernel[5].reference"),
    ],
)
def test_cli_user_errors_exit_2_without_traceback(root_copy: Path, old: str, new: str, expect: str) -> None:
    toml = root_copy / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace(old, new, 1), encoding="utf-8")
    for command in (["check"], ["status"], ["resolve", "--offline", "--no-gpu"]):
        proc = _cli(*command, cwd=root_copy)
        assert proc.returncode == 2, (command, proc.stderr)
        assert expect in proc.stderr and "kernels.toml:" in proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout


def test_cli_corrupt_lock_and_usage_errors(root_copy: Path, cache_dir: Path) -> None:
    (root_copy / "kernels.lock").write_text('version = 1\n[[kernel]]\nname = "x"\n', encoding="utf-8")
    proc = _cli("status", cwd=root_copy)
    assert proc.returncode == 2 and "kernels.lock" in proc.stderr and "missing required key" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _cli("check", "--locked", cwd=root_copy)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = _cli("resolve", "--arch", "sm61", cwd=root_copy)
    assert proc.returncode == 2 and "'sm61' is not a GPU architecture" in proc.stderr
    proc = _cli("resolve", "--arch", "sm_61", cwd=root_copy)  # a spelling nvcc 12 and 13 no longer compile for
    assert proc.returncode == 2 and "--arch sm_61 is not supported by the installed CUDA" in proc.stderr
    assert "sm_90" in proc.stderr and "Traceback" not in proc.stderr
    proc = _cli("frobnicate", cwd=root_copy)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    proc = _cli("resolve", "--kernel", "nope", "--offline", cwd=root_copy)
    assert proc.returncode == 2 and "unknown kernel(s): nope" in proc.stderr


def test_status_json_and_lock_check(root_copy: Path, cache_dir: Path) -> None:
    import json

    assert main(["lock", "-m", str(root_copy), "--kernel", "sum_all", "--arch", "90", "--offline", "--no-gpu"]) == 0
    proc = _cli("status", "--json", cwd=root_copy)
    assert proc.returncode == 0, proc.stderr
    rows = {(r["kernel"], r["arch"]): r for r in json.loads(proc.stdout)["kernels"]}
    assert rows[("sum_all", "sm_90")]["state"] == "locked"
    assert rows[("sum_all", "sm_80")]["state"] == "baseline only"
    assert rows[("matmul", "sm_90")]["note"] == "not locked"
    assert _cli("lock", "--check", cwd=root_copy).returncode == 1


@pytest.mark.heavy  # two resolves of the root side by side: 10 s
def test_two_concurrent_resolves_share_one_cache(root_copy: Path, tmp_path: Path) -> None:
    """Two processes resolve (gate, emit, lock) into one cold cache at once; both succeed and it verifies."""
    other = tmp_path / "other"
    shutil.copytree(root_copy, other)
    cache = tmp_path / "shared-cache"
    argv = [
        "resolve",
        "--offline",
        "--no-gpu",
        "--kernel",
        "silu_mul",
        "--kernel",
        "sum_all",
        "--arch",
        "sm_90",
        "--cache-dir",
        str(cache),
        "--out",
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "r1build.cli.main", *argv, str(d / "gen"), "-m", str(d)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for d in (root_copy, other)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert (root_copy / "kernels.lock").read_bytes() == (other / "kernels.lock").read_bytes()
    generated = [{p.name: p.read_bytes() for p in (d / "gen").iterdir()} for d in (root_copy, other)]
    assert generated[0] == generated[1] and len(generated[0]) >= 4
    proc = _cli("cache", "verify", "--cache-dir", str(cache), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_refresh_without_a_gpu_keeps_measured_winners(root_copy: Path, cache_dir: Path) -> None:
    """`--refresh` where no GPU of an arch is and no endpoint: the measured winner in the lock stays (it is not
    replaced by an unmeasured baseline)."""
    root = Path(__file__).resolve().parents[2]
    shutil.copy(root / "kernels.lock", root_copy / "kernels.lock")  # measured on an H200 for sm_90
    before = read_lock(root_copy / "kernels.lock").entry("silu_mul", "sm_90")  # type: ignore[union-attr]
    assert before is not None and before.time_us is not None and before.provenance == "tuned"
    assert (
        main(
            [
                "resolve",
                "-m",
                str(root_copy),
                "--refresh",
                "--offline",
                "--no-gpu",
                "--kernel",
                "silu_mul",
                "--arch",
                "sm_90",
            ]
        )
        == 0
    )
    after = read_lock(root_copy / "kernels.lock").entry("silu_mul", "sm_90")  # type: ignore[union-attr]
    assert after == before
