"""How well the performance model ranks candidates before the GPU: Spearman correlation of predicted and measured
times over the root manifest's variants (and, with ``--cache-dir``, the generated candidates its cached decisions
hold), and what skipping by the model would have saved.

Predictions run on the CPU (nvcc only). Measured times come from the cache's decisions for the manifest's current
questions, and with ``--measure`` from the local GPU evaluator for the variants no decision timed (one
``GpuEvaluator`` job per kernel: every check, then the timing). Per kernel: Spearman's rho (ties ranked by their
mean), and a replay of the search's use of the model: candidates judged in predicted order, each skipped when its
prediction exceeds ``T`` times the best measured so far, counting the GPU jobs saved and whether the winner (the
fastest measured, within 2%) is the same. Writes ``bench/results/perf_model.json`` and ``.md``.

    python bench/perf_model.py                                  # CPU: predictions only
    python bench/perf_model.py --measure --cache-dir "$R1BUILD_CACHE_DIR"   # on the H200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

from r1build.cache import Cache, open_usable  # noqa: E402
from r1build.evaluate.variants import expand_variants  # noqa: E402
from r1build.judge import Job  # noqa: E402
from r1build.keys import decision_key  # noqa: E402
from r1build.manifest import KernelSpec, Manifest, load_manifest  # noqa: E402
from r1build.perfmodel import PerfModel  # noqa: E402
from r1build.records import Candidate  # noqa: E402

THRESHOLDS = (1.5, 2.0, 3.0, 5.0)
SAME_WINNER = 1.02


def ranks(values: list[float]) -> np.ndarray:
    """Ranks from 1, ties given their mean rank."""
    arr = np.asarray(values, dtype=float)
    order = arr.argsort(kind="stable")
    out = np.empty(len(arr))
    i = 0
    while i < len(arr):
        j = i
        while j + 1 < len(arr) and arr[order[j + 1]] == arr[order[i]]:
            j += 1
        out[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rho of two equally long lists; None below 3 items or when one side is constant."""
    if len(a) < 3:
        return None
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def replay(predicted: list[float], measured: list[float], threshold: float) -> dict[str, Any]:
    """Judge in predicted order, skipping what is predicted above ``threshold`` x the best measured so far."""
    order = sorted(range(len(predicted)), key=lambda i: predicted[i])
    best: float | None = None
    judged = []
    for i in order:
        if best is not None and predicted[i] > threshold * best:
            continue
        judged.append(i)
        best = measured[i] if best is None else min(best, measured[i])
    fastest = min(measured)
    return {
        "jobs": len(judged),
        "of": len(predicted),
        "same_winner": best is not None and best <= fastest * SAME_WINNER,
    }


def candidates_of(manifest: Manifest, spec: KernelSpec, arch: str, cache: Cache | None) -> list[Candidate]:
    """The manifest's variants, then the generated candidates of the cached decision (sources in the cache)."""
    out = list(expand_variants(manifest, spec))
    decision = cache.get_decision(decision_key(manifest, spec, arch)) if cache is not None else None
    for ref in decision.candidates if decision else []:
        if ref.origin.kind == "generated" and ref.digest not in {c.digest for c in out}:
            source = cache.get_text(ref.source) if cache is not None else None
            if source is not None:
                out.append(Candidate(source, ref.origin, dict(ref.defines)))
    return out


def measured_times(
    manifest: Manifest, spec: KernelSpec, arch: str, candidates: list[Candidate], cache: Cache | None, evaluator: Any
) -> dict[str, float]:
    """Median microseconds by variant digest: the cached decision's, then the GPU's for the rest."""
    times: dict[str, float] = {}
    decision = cache.get_decision(decision_key(manifest, spec, arch)) if cache is not None else None
    for result in decision.results if decision else []:
        if result.ok and result.timing is not None:
            times[result.candidate] = result.timing.median_us
    missing = [c for c in candidates if c.digest not in times]
    if missing and evaluator is not None:
        baseline = candidates[0] if candidates and candidates[0].origin.kind == "baseline" else None
        for c, r in zip(missing, evaluator.evaluate(Job(manifest, spec, arch, missing, baseline)), strict=True):
            if r.ok and r.timing is not None:
                times[c.digest] = r.timing.median_us
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=ROOT / "kernels.toml")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--cache-dir", type=Path, default=None, help="read measured times and generated candidates")
    parser.add_argument("--measure", action="store_true", help="time what no decision timed on the local GPU")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument(
        "--kernel", action="append", default=[], help="only this kernel of the manifest (repeat for more; default: all)"
    )
    args = parser.parse_args(argv)
    manifest = load_manifest(args.manifest)
    model = PerfModel(manifest)
    cache = open_usable(args.cache_dir) if args.cache_dir else None
    evaluator = None
    device = "none (CPU: predictions only)"
    if args.measure:
        from r1build.evaluate import GpuEvaluator, detect_gpus
        from r1build.gate.static import StaticGate

        gpus = detect_gpus()
        if not gpus:
            print("--measure needs a CUDA GPU", file=sys.stderr)
            return 2
        work_cache = cache or open_usable(None)
        evaluator = GpuEvaluator(work_cache, gate=StaticGate(work_cache))
        device = gpus[0].name
    kernels = []
    try:
        for spec in manifest.kernels:
            if args.kernel and spec.name not in args.kernel:
                continue
            candidates = candidates_of(manifest, spec, args.arch, cache)
            predictions = {c.digest: model.predict(spec, args.arch, c) for c in candidates}
            times = measured_times(manifest, spec, args.arch, candidates, cache, evaluator)
            rows = []
            for c in candidates:
                p = predictions[c.digest]
                rows.append(
                    {
                        "candidate": (c.origin.path or f"r{c.origin.round} s{c.origin.sample}")
                        + "".join(f" {k}={v}" for k, v in sorted(c.defines.items())),
                        "predicted_us": round(p.lower_bound_us, 3) if p else None,
                        "occupancy": round(p.occupancy, 3) if p else None,
                        "width_bits": p.width_bits if p else None,
                        "measured_us": round(times[c.digest], 3) if c.digest in times else None,
                    }
                )
            both = [r for r in rows if r["predicted_us"] is not None and r["measured_us"] is not None]
            pred = [float(r["predicted_us"]) for r in both]
            meas = [float(r["measured_us"]) for r in both]
            kernels.append(
                {
                    "kernel": spec.name,
                    "rows": rows,
                    "spearman": spearman(pred, meas),
                    "replay": {str(t): replay(pred, meas, t) for t in THRESHOLDS} if both else {},
                }
            )
    finally:
        if evaluator is not None:
            evaluator.close()
        if cache is not None:
            cache.close()
    rhos = [
        (k["spearman"], len([r for r in k["rows"] if r["measured_us"] is not None]))
        for k in kernels
        if k["spearman"] is not None
    ]
    weighted = sum(r * n for r, n in rhos) / sum(n for _, n in rhos) if rhos else None
    doc = {
        "date": utc_now(),
        "command": command_line(__file__, argv),
        "device": device,
        "arch": args.arch,
        "host": host_info(),
        "kernels": kernels,
        "spearman_weighted": weighted,
    }
    lines = [
        f"# Performance model vs measured ({args.arch})",
        "",
        f"{doc['date']}, device {device}, `{doc['command']}`",
        "",
        "| kernel | candidate | predicted us | measured us | occupancy | access bits |",
        "|---|---|---|---|---|---|",
    ]
    for k in kernels:
        for r in k["rows"]:
            lines.append(
                f"| {k['kernel']} | {r['candidate']} | {r['predicted_us']} | {r['measured_us'] or '-'} | "
                f"{r['occupancy']} | {r['width_bits']} |"
            )
    lines += [
        "",
        "| kernel | Spearman rho | " + " | ".join(f"jobs at {t}x (same winner)" for t in THRESHOLDS) + " |",
        "|---|---|" + "---|" * len(THRESHOLDS),
    ]
    for k in kernels:
        cells = [
            f"{k['replay'][str(t)]['jobs']}/{k['replay'][str(t)]['of']} "
            f"({'yes' if k['replay'][str(t)]['same_winner'] else 'NO'})"
            if k["replay"]
            else "-"
            for t in THRESHOLDS
        ]
        rho = "-" if k["spearman"] is None else f"{k['spearman']:.2f}"
        lines.append(f"| {k['kernel']} | {rho} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Spearman rho, weighted by measured candidates per kernel (kernels with 3 or more): "
        f"{'-' if weighted is None else f'{weighted:.2f}'}",
    ]
    write_results(args.out, "perf_model", doc, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
