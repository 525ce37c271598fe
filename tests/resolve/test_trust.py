"""A rejected or unvalidated kernel is never locked, cached as a decision's winner, or emitted (real nvcc, no GPU).

``tests/packages/rejected`` has three kernels: ``scale`` (fine), ``leaky`` (its baseline calls ``getenv``, which
the gate rejects, and its hand-written candidate does not compile) and ``overrun`` (passes the gate, writes past
the end of ``y`` at n = 7: only a GPU rejects it; ``test_resolve_gpu.py`` runs it on one).

Where a GPU's verdict is needed without a GPU, either the cache is given the decision record a GPU run writes, or
``resolve_support.GpuDouble`` stands in for the GPU evaluator behind the real static gate.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.errors import LockError, NoWinnerError
from r1build.judge import CHECKS_VERSION
from r1build.keys import decision_key
from r1build.lock import read_lock
from r1build.lock.lockfile import Lock, LockEntry, write_lock
from r1build.manifest import Manifest, load_manifest
from r1build.records import Candidate, CandidateRef, Decision, Origin, Result, Timing
from r1build.resolve import ResolveOptions, prepare_build, resolve
from r1build.selection.rules import decision_winner, select_winner
from tests.resolve.resolve_support import install_gpu_double
from tests.support.decisions import measured_result, plant_measured

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tests" / "packages" / "rejected"
OFFLINE = ["--offline", "--no-gpu"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    dest = tmp_path / "rejected"
    shutil.copytree(PACKAGE, dest)
    return dest


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    d = tmp_path / "cache"
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(d))
    for var in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_BASE_URL", "NVIDIA_API_KEY", "R1BUILD_EVALUATE"):
        monkeypatch.delenv(var, raising=False)
    yield d


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "r1build.cli.main", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _locked(project: Path) -> dict[str, LockEntry]:
    lock = read_lock(project / "kernels.lock")
    return {e.name: e for e in lock.kernel} if lock else {}


def _gpu_verdict(
    manifest: Manifest,
    kernel: str,
    candidate: Candidate,
    *,
    status: str = "incorrect",
    detail: str = "n=7: wrote 1 element past the end of y (guard band)",
    checks: int = CHECKS_VERSION,
) -> Decision:
    """The decision record a GPU run writes when it rejects ``candidate`` (the kernel's only one)."""
    spec = manifest.kernel(kernel)
    result = Result(
        candidate=candidate.digest,
        arch="sm_90",
        status=status,  # type: ignore[arg-type]
        stage="evaluate",
        detail=detail,
        device="NVIDIA H200",
    )
    ref = CandidateRef.of(candidate)
    return Decision(
        key=decision_key(manifest, spec, "sm_90"),
        kernel=kernel,
        arch="sm_90",
        winner=None,
        candidates=[ref],
        results=[result],
        measured=False,
        device="NVIDIA H200",
        checks=checks,
    )


def _drop_kernel(toml: Path, name: str) -> None:
    head, *tables = toml.read_text(encoding="utf-8").split("[[kernel]]")
    kept = [t for t in tables if f'name = "{name}"' not in t]
    toml.write_text("[[kernel]]".join([head, *kept]), encoding="utf-8")


def _baseline(project: Path, kernel: str) -> Candidate:
    return Candidate((project / f"{kernel}.cu").read_text(encoding="utf-8"), Origin("baseline", f"{kernel}.cu"))


def test_a_kernel_nothing_passes_fails_the_resolve_with_a_table_and_the_rest_is_locked(
    project: Path, cache_dir: Path
) -> None:
    proc = _cli("resolve", *OFFLINE, "--out", str(project / "gen"), cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    err = proc.stderr
    assert "leaky/sm_90: no candidate may win; nothing is emitted or locked for it" in err
    # the table: each candidate, its provenance, who rejected it and why
    baseline_row = next(line for line in err.splitlines() if "leaky.cu " in line and "baseline" in line)
    assert "rejected" in baseline_row and "gate" in baseline_row and "getenv" in baseline_row
    file_row = next(line for line in err.splitlines() if "leaky_typo.cu" in line)
    assert "file" in file_row and "compile_error" in file_row and 'identifier "cudaSucces" is undefined' in file_row
    # the rest of the manifest resolved and is locked; nothing of leaky is, and nothing was emitted
    locked = _locked(project)
    assert set(locked) == {"scale", "overrun"}
    assert {e.validation for e in locked.values()} == {"unvalidated"}
    assert not (project / "gen").exists() and f"nothing written to {project / 'gen'}" in err
    # --json carries the same table as data
    proc = _cli("resolve", *OFFLINE, "--json", cwd=project)
    assert proc.returncode == 1
    (leaky,) = json.loads(proc.stdout)["unresolved"]
    assert [(o["provenance"], o["validation"], o["stage"], o["status"]) for o in leaky["outcomes"]] == [
        ("baseline", "rejected", "gate", "rejected"),
        ("file", "rejected", "gate", "compile_error"),
    ]
    # the build fails the same way (the PEP 517 backend calls prepare_build)
    with pytest.raises(NoWinnerError) as info:
        prepare_build(project, ResolveOptions(cache_dir=cache_dir))
    assert [(u.kernel, u.arch) for u in info.value.unresolved] == [("leaky", "sm_90")]
    assert "getenv" in str(info.value) and not (project / ".r1build" / "generated").exists()


def test_a_lock_entry_the_cache_knows_rejected_fails_locked_builds_and_vendoring(
    project: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = project / "kernels.toml"
    _drop_kernel(toml, "leaky")
    assert main(["resolve", "-m", str(project), *OFFLINE]) == 0  # the gate passes both
    assert set(_locked(project)) == {"scale", "overrun"}
    manifest = load_manifest(toml)
    with Cache(cache_dir) as cache:  # what a GPU run of overrun (`resolve --refresh` on an H200) recorded
        cache.put_decision(_gpu_verdict(manifest, "overrun", _baseline(project, "overrun")))
    capsys.readouterr()
    for argv in (["resolve", "--locked", "--no-gpu"], ["check", "--locked"], ["vendor"]):
        assert main([*argv, "-m", str(project)]) == 2, argv
        err = capsys.readouterr().err
        assert (
            "overrun" in err
            and "the GPU checks (NVIDIA H200) rejected it (incorrect: n=7: wrote 1 element past "
            "the end of y (guard band))"
            in err
        ), (argv, err)
    assert main(["status", "-m", str(project), "--json"]) == 0
    rows = {r["kernel"]: r for r in json.loads(capsys.readouterr().out)["kernels"]}
    assert (
        rows["overrun"]["state"] == "locked, refused"
        and "the GPU checks (NVIDIA H200) rejected it" in rows["overrun"]["note"]
    )
    assert rows["scale"]["state"] == "locked"
    with pytest.raises(LockError, match=r"overrun/sm_90: the locked winner .* may not be used: the GPU checks"):
        prepare_build(project, ResolveOptions(locked=True, cache_dir=cache_dir))
    # without --locked the entry is not used, and the gate alone does not bring the rejected baseline back
    assert main(["resolve", "-m", str(project), *OFFLINE]) == 1
    err = capsys.readouterr().err
    assert "overrun/sm_90: no candidate may win" in err and "evaluate" in err
    assert set(_locked(project)) == {"scale"}


def test_a_gpu_rejection_on_refresh_drops_the_lock_entry_and_keeps_the_rest(
    project: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: a baseline that fails the GPU checks is never kept as a fallback winner."""
    m = load_manifest(project / "kernels.toml")
    options = ResolveOptions(kernels=["scale", "overrun"], generate=False, evaluate=False)
    with Cache(cache_dir) as cache:
        assert not resolve(m, cache, options).unresolved
    assert {e.validation for e in _locked(project).values()} == {"unvalidated"}
    install_gpu_double(monkeypatch, reject=lambda c: "padded" in c.source)
    with Cache(cache_dir) as cache:
        res = resolve(m, cache, ResolveOptions(kernels=["scale", "overrun"], generate=False, refresh=True))
        decision = cache.get_decision(decision_key(m, m.kernel("overrun"), "sm_90"))
    ((u,),) = [res.unresolved]
    assert (u.kernel, [(o.validation, o.stage, o.reason) for o in u.outcomes]) == (
        "overrun",
        [("rejected", "evaluate", "n=7: 1 of 7 elements differ")],
    )
    assert decision is not None and decision.winner is None and decision.checks == CHECKS_VERSION
    locked = _locked(project)
    assert set(locked) == {"scale"}
    assert (locked["scale"].validation, locked["scale"].checks, locked["scale"].gpu) == (
        "validated",
        CHECKS_VERSION,
        "Test GPU",
    )
    # later resolves find the cached rejection; a gate-only machine does not bring the baseline back
    with Cache(cache_dir) as cache:
        again = resolve(m, cache, options)
    assert [u.kernel for u in again.unresolved] == ["overrun"] and "overrun" not in _locked(project)


def test_stale_checks_are_shown_warned_and_rejudged(
    project: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    m = load_manifest(project / "kernels.toml")
    spec = m.kernel("scale")
    scale = _baseline(project, "scale")
    key = decision_key(m, spec, "sm_90")
    with Cache(cache_dir) as cache:  # measured by checks older than these
        plant_measured(cache, scale, key=key, kernel="scale", time_us=5.0, checks=CHECKS_VERSION - 1)
    argv = ["-m", str(project), "--kernel", "scale", *OFFLINE]
    assert main(["resolve", *argv]) == 0
    assert (
        f"validated by version {CHECKS_VERSION - 1} of the GPU checks, these are version {CHECKS_VERSION}"
        in capsys.readouterr().err
    )
    entry = _locked(project)["scale"]
    assert (entry.validation, entry.checks, entry.time_us) == ("validated", CHECKS_VERSION - 1, 5.0)
    assert main(["status", "-m", str(project), "--json"]) == 0
    rows = {r["kernel"]: r for r in json.loads(capsys.readouterr().out)["kernels"]}
    assert rows["scale"]["validation"] == "validated" and rows["scale"]["checks"] == CHECKS_VERSION - 1
    assert f"judged by GPU checks v{CHECKS_VERSION - 1}, now v{CHECKS_VERSION}" in rows["scale"]["note"]
    assert main(["resolve", "--locked", *argv]) == 0
    assert (
        f"warning: scale/sm_90: the locked winner was validated by version {CHECKS_VERSION - 1}"
        in capsys.readouterr().err
    )
    # a refresh where a GPU of the arch is judges it again with these checks
    install_gpu_double(monkeypatch, reject=lambda c: False, time_us=lambda c: 4.0)
    assert main(["resolve", "-m", str(project), "--kernel", "scale", "--offline", "--refresh"]) == 0
    entry = _locked(project)["scale"]
    assert (entry.validation, entry.checks, entry.time_us) == ("validated", CHECKS_VERSION, 4.0)
    with Cache(cache_dir) as cache:
        assert cache.get_decision(key).checks == CHECKS_VERSION  # type: ignore[union-attr]
    capsys.readouterr()
    assert main(["status", "-m", str(project), "--json"]) == 0
    rows = {r["kernel"]: r for r in json.loads(capsys.readouterr().out)["kernels"]}
    assert "checks" not in rows["scale"]["note"]


def test_an_unvalidated_generated_lock_entry_is_refused(
    project: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock written before validation was recorded (version 1) that names a generated winner no GPU measured:
    it reads as ``unvalidated``, and a generated winner is never used so."""
    m = load_manifest(project / "kernels.toml")
    spec = m.kernel("scale")
    source = (project / "scale.cu").read_text(encoding="utf-8") + "// generated\n"
    generated = Candidate(source, Origin("generated", model="deepseek-reasoner", round=0, sample=1))
    with Cache(cache_dir) as cache:
        cache.put_text(source)
    entry = LockEntry(
        name="scale",
        arch="sm_90",
        key=decision_key(m, spec, "sm_90"),
        winner=generated.digest,
        source=generated.source_digest,
        provenance="generated",
        validation="unvalidated",
        model="deepseek-reasoner",
        round=0,
        sample=1,
    )
    text = write_lock(project / "kernels.lock", Lock(kernel=[entry]))
    assert text
    lock_file = project / "kernels.lock"
    lock_file.write_text(
        lock_file.read_text(encoding="utf-8")
        .replace("version = 3", "version = 1")
        .replace('validation = "unvalidated"\n', ""),
        encoding="utf-8",
    )
    assert read_lock(lock_file).kernel[0].validation == "unvalidated"  # type: ignore[union-attr]
    assert main(["resolve", "--locked", "-m", str(project), "--kernel", "scale", *OFFLINE]) == 2
    assert "a generated winner is locked only once a GPU of its arch validated it" in capsys.readouterr().err
    assert main(["resolve", "-m", str(project), "--kernel", "scale", *OFFLINE]) == 0
    assert (_locked(project)["scale"].provenance, _locked(project)["scale"].validation) == ("baseline", "unvalidated")


def test_a_cached_decision_naming_a_gate_only_generated_winner_gives_the_baseline(
    project: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A decision recorded by an older r1build (or imported in a bundle) that chose a generated kernel on the gate
    alone: the resolver re-selects among its candidates, and the generated one stays pending."""
    m = load_manifest(project / "kernels.toml")
    base = _baseline(project, "scale")
    generated = Candidate(base.source + "// generated\n", Origin("generated", model="m", round=0, sample=0))
    refs = [CandidateRef.of(base), CandidateRef.of(generated)]
    results = [Result(candidate=c.digest, arch="sm_90", status="passed") for c in (base, generated)]
    with Cache(cache_dir) as cache:
        for c in (base, generated):
            cache.put_text(c.source)
        cache.put_decision(
            Decision(
                key=decision_key(m, m.kernel("scale"), "sm_90"),
                kernel="scale",
                arch="sm_90",
                winner=refs[1],
                candidates=refs,
                results=results,
            )
        )
    assert main(["resolve", "-m", str(project), "--kernel", "scale", *OFFLINE]) == 0
    assert "may not win: using" in capsys.readouterr().err
    entry = _locked(project)["scale"]
    assert (entry.provenance, entry.validation, entry.winner) == ("baseline", "unvalidated", base.digest)
    assert main(["status", "-m", str(project), "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["kernels"] if r["kernel"] == "scale")
    assert row["pending"] == 1 and "1 generated pending a GPU of sm_90" in row["note"]


_MEASURED = Timing(median_us=1.0, spread=0.01, samples=50)


def _contradicting(base: Candidate, form: str) -> tuple[Candidate, Result, dict[str, str | None]]:
    """A winner (its source another than the baseline's), its result, and the decision's other fields, as a
    decision that contradicts itself or the manifest in one way: ``form``."""
    other = base.source.replace("2.0f", "3.0f")
    assert other != base.source
    generated = Origin("generated", model="m", round=0, sample=0)
    winner = Candidate(other, generated)
    fields: dict[str, str | None] = {"kernel": "scale", "arch": "sm_90", "device": "H200"}
    result = Result(
        candidate=winner.digest, arch="sm_90", status="passed", stage="evaluate", timing=_MEASURED, device="H200"
    )
    if form == "generated source as the baseline":  # passes the gate only: an unvalidated "baseline" would win
        winner = Candidate(other, Origin("baseline", "scale.cu"))
        result = Result(candidate=winner.digest, arch="sm_90", status="passed")
    elif form == "validated with no time":
        result = Result(candidate=winner.digest, arch="sm_90", status="passed", stage="evaluate", device="H200")
    elif form == "validated on no GPU":
        result = Result(candidate=winner.digest, arch="sm_90", status="passed", stage="evaluate", timing=_MEASURED)
        fields["device"] = None
    elif form == "judged for another arch":
        result = Result(
            candidate=winner.digest, arch="sm_80", status="passed", stage="evaluate", timing=_MEASURED, device="A100"
        )
    elif form == "another kernel's":
        fields["kernel"] = "leaky"
    elif form == "defines nobody declared":
        winner = Candidate(other, generated, {"BLOCK": 128})
        result = Result(
            candidate=winner.digest, arch="sm_90", status="passed", stage="evaluate", timing=_MEASURED, device="H200"
        )
    elif form == "a file outside the project":
        winner = Candidate(other, Origin("file", "../../etc/passwd"))
        result = Result(
            candidate=winner.digest, arch="sm_90", status="passed", stage="evaluate", timing=_MEASURED, device="H200"
        )
    return winner, result, fields


@pytest.mark.parametrize(
    "form",
    [
        "generated source as the baseline",
        "validated with no time",
        "validated on no GPU",
        "judged for another arch",
        "another kernel's",
        "defines nobody declared",
        "a file outside the project",
        "winner digest not its source's",
    ],
)
def test_a_cached_decision_that_contradicts_itself_or_the_manifest_is_refused(
    project: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    """A cache, a bundle or a remote is trusted for what was decided, never for a decision r1build could not
    have recorded: it is refused with one warning naming it and the cache, status says so, resolve goes on as on
    a miss (here: the baseline through the gate), and the lock it writes verifies."""
    m = load_manifest(project / "kernels.toml")
    key = decision_key(m, m.kernel("scale"), "sm_90")
    base = _baseline(project, "scale")
    winner, result, fields = _contradicting(base, form)
    ref = CandidateRef.of(winner)
    if form == "winner digest not its source's":
        ref = CandidateRef("ab" * 32, winner.source_digest, winner.origin)
        result = Result(candidate=ref.digest, arch="sm_90", status="passed", stage="evaluate", timing=_MEASURED)
    with Cache(cache_dir) as cache:
        cache.put_text(winner.source)
        cache.put_decision(
            Decision(
                key=key,
                kernel=str(fields["kernel"]),
                arch=str(fields["arch"]),
                winner=ref,
                candidates=[ref],
                results=[result],
                measured=True,
                device=fields["device"],
                checks=CHECKS_VERSION,
            )
        )
    assert main(["status", "-m", str(project), "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["kernels"] if r["kernel"] == "scale")
    assert row["state"] == "baseline only" and "cached decision refused" in row["note"], row
    assert main(["resolve", "-m", str(project), "--kernel", "scale", *OFFLINE]) == 0
    err = capsys.readouterr().err
    refusals = [line for line in err.splitlines() if "is refused" in line]
    assert len(refusals) == 1 and key[:16] in refusals[0] and str(cache_dir) in refusals[0], err
    entry = _locked(project)["scale"]
    assert (entry.provenance, entry.validation, entry.winner) == ("baseline", "unvalidated", base.digest)
    assert main(["resolve", "--locked", "-m", str(project), "--kernel", "scale", *OFFLINE]) == 0


def test_selection_never_picks_a_rejected_or_gate_only_generated_candidate() -> None:
    base = Candidate("// base", Origin("baseline", "b.cu"))
    gen = Candidate("// gen", Origin("generated", model="m", round=0, sample=0))
    gated = [
        Result(candidate=base.digest, arch="sm_90", status="passed"),
        Result(candidate=gen.digest, arch="sm_90", status="passed"),
    ]
    assert select_winner([gen, base], gated[::-1]) is base  # gate alone: the user's source, never the generated
    assert select_winner([gen], [gated[1]]) is None
    timed = measured_result(gen.digest, 1.0, device=None, samples=9)
    rejected = Result(candidate=base.digest, arch="sm_90", status="incorrect", stage="evaluate")
    assert select_winner([base, gen], [rejected, timed]) is gen
    # a decision recorded with a pending generated winner (an older r1build, a bundle) gives the baseline
    refs = [CandidateRef.of(base), CandidateRef.of(gen)]
    old = Decision(key="k" * 64, kernel="x", arch="sm_90", winner=refs[1], candidates=refs, results=gated)
    assert decision_winner(old) == refs[0]
    assert (
        decision_winner(
            Decision(
                key="k" * 64, kernel="x", arch="sm_90", winner=refs[0], candidates=refs, results=[rejected, gated[1]]
            )
        )
        is None
    )


@pytest.mark.gpu
def test_on_a_gpu_a_baseline_that_writes_past_the_end_is_never_locked_or_emitted(
    project: Path, cache_dir: Path, tmp_path: Path
) -> None:
    """The issue's case on a real GPU: ``overrun`` passes the gate and fails the GPU checks at n = 7."""
    _drop_kernel(project / "kernels.toml", "leaky")
    gen = project / "gen"
    # a cold resolve on the GPU: no lock, no cache
    proc = _cli("resolve", "--offline", "--out", str(gen), cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "overrun/sm_90: no candidate may win" in proc.stderr and "no local GPU" not in proc.stderr
    row = next(line for line in proc.stderr.splitlines() if "overrun.cu" in line)
    assert "baseline" in row and "rejected" in row and "evaluate" in row, proc.stderr
    locked = _locked(project)
    assert set(locked) == {"scale"} and not gen.exists()
    scale = locked["scale"]
    assert (scale.validation, scale.checks) == ("validated", CHECKS_VERSION)
    assert scale.gpu and scale.time_us is not None
    # a lock made where no GPU is names overrun (the gate passes it): --locked refuses it here, emitting nothing
    no_gpu_cache = tmp_path / "no-gpu-cache"
    (project / "kernels.lock").unlink()
    assert _cli("resolve", *OFFLINE, "--cache-dir", str(no_gpu_cache), cwd=project).returncode == 0
    assert _locked(project)["overrun"].validation == "unvalidated"
    proc = _cli("resolve", "--locked", "--out", str(gen), cwd=project)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "overrun/sm_90: the locked winner" in proc.stderr and "the GPU checks" in proc.stderr
    assert not gen.exists()
    # and a refresh on the GPU drops it from the lock, keeping scale
    proc = _cli("resolve", "--offline", "--refresh", cwd=project)
    assert proc.returncode == 1 and set(_locked(project)) == {"scale"}
    assert _locked(project)["scale"].validation == "validated"


def test_a_winner_timed_at_zero_falls_back_to_what_the_gpu_measured(
    project: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 27: a candidate timed at 0.0 us won, the resolve refused its own decision (validated on a GPU with no
    time) and fell back to the gate with "no local GPU of this arch (GPUs here: sm_90, ...)" on the sm_90 machine,
    marking unvalidated the baseline that had passed there. A time of zero never wins; what was measured is used."""
    toml = project / "kernels.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace(
            'baseline = "scale.cu"\n', 'baseline = "scale.cu"\ncandidates = ["scale_fast.cu"]\n', 1
        ),
        encoding="utf-8",
    )
    (project / "scale_fast.cu").write_text((project / "scale.cu").read_text(encoding="utf-8") + "// fast\n")
    install_gpu_double(monkeypatch, reject=lambda c: False, time_us=lambda c: 0.0 if "// fast" in c.source else 6.63)
    assert main(["resolve", "-m", str(project), "--kernel", "scale", "--offline"]) == 0
    err = capsys.readouterr().err
    assert "no local GPU" not in err and "refused" not in err, err
    entry = _locked(project)["scale"]
    assert (entry.origin, entry.validation, entry.time_us, entry.gpu) == ("scale.cu", "validated", 6.63, "Test GPU")


def test_the_fallback_never_says_a_gpu_of_the_arch_is_missing(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27: "no local GPU of this arch (GPUs here: sm_90, sm_90a)" was said of sm_90 on an sm_90 machine."""
    from r1build.resolve.judges import Judges

    monkeypatch.setattr(Judges, "gpu_archs", lambda self: {"sm_90", "sm_90a"})
    with Cache(cache_dir) as cache:
        judges = Judges(cache, evaluate=None)
        here = judges.unmeasured("sm_90")
        assert "no local GPU" not in here and "GPU of sm_90 here" in here, here
        assert judges.unmeasured("sm_100") == "no local GPU of this arch (GPUs here: sm_90, sm_90a)"
