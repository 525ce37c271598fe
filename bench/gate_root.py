"""Every variant the root manifest provides (baseline, hand-written files, every tunable value set, as
``expand_variants`` lists them) through the real static gate for each of its kernel's archs, from a fresh cache:
the variant count per kernel, the gate's verdicts, registers, spills and stack, and the wall time. Needs nvcc, no
GPU. Writes ``bench/results/gate_root.json`` and ``.md``; exits 1 when any variant fails the gate (a compile
error, or over the kernel's ``limits``).

    python bench/gate_root.py [--manifest kernels.toml] [--out bench/results]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

from r1build.cache import Cache  # noqa: E402
from r1build.evaluate.variants import expand_variants  # noqa: E402
from r1build.gate.static import StaticGate  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.records import Candidate  # noqa: E402
from r1build.toolchain.nvcc import toolchain  # noqa: E402


def label(c: Candidate) -> str:
    name = Path(c.origin.path or c.origin.kind).name
    return name + "".join(f" {k}={v}" for k, v in c.defines.items())


def gate_all(manifest_path: Path) -> dict[str, Any]:
    """Gate every variant × arch of every kernel, kernel by kernel, each kernel's compiles in parallel."""
    manifest = load_manifest(manifest_path)
    kernels = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="r1build-gate-root-") as tmp, Cache(Path(tmp) / "cache") as cache:
        gate = StaticGate(cache)
        for spec in manifest.kernels:
            variants = expand_variants(manifest, spec)
            archs = manifest.archs_of(spec)
            t0 = time.perf_counter()
            results = gate.judge(manifest, spec, [(a, c) for c in variants for a in archs])
            rows = []
            for i, c in enumerate(variants):
                for j, arch in enumerate(archs):
                    r = results[i * len(archs) + j]
                    g = r.gate
                    rows.append(
                        {
                            "candidate": label(c),
                            "arch": arch,
                            "status": r.status,
                            "detail": r.detail if not r.ok else "",
                            "registers": g.registers if g else None,
                            "spill_bytes": (g.spill_stores + g.spill_loads) if g else None,
                            "stack_frame": g.stack_frame if g else None,
                            "shared_bytes": g.shared_bytes if g else None,
                        }
                    )
            kernels.append(
                {
                    "kernel": spec.name,
                    "variants": len(variants),
                    "sources": sorted({c.origin.path or c.origin.kind for c in variants}),
                    "archs": archs,
                    "wall_s": time.perf_counter() - t0,
                    "rows": rows,
                }
            )
        compiles = gate.compiles
    return {"kernels": kernels, "compiles": compiles, "wall_s": time.perf_counter() - start}


def markdown(report: dict[str, Any]) -> str:
    host = report["host"]
    total = sum(k["variants"] for k in report["kernels"])
    rejected = [(k["kernel"], r) for k in report["kernels"] for r in k["rows"] if r["status"] != "passed"]
    lines = [
        "# The root manifest's variants through the static gate",
        "",
        f"`{report['command']}` on {report['date']}: {host['cpu']}, {host['cpus']} CPUs, {host['os']}, "
        f"{report['toolchain']}; no GPU. A fresh cache: every variant compiled once for all its kernel's archs "
        f"({report['compiles']} nvcc runs in {report['wall_s']:.0f} s).",
        "",
        f"{total} variants in all; {len(rejected)} gate failures.",
        "",
        "| kernel | variants | sources | archs | registers (min-max) | most spill bytes | wall s |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    for k in report["kernels"]:
        regs = [r["registers"] for r in k["rows"] if r["registers"] is not None]
        spills = [r["spill_bytes"] for r in k["rows"] if r["spill_bytes"] is not None]
        lines.append(
            f"| {k['kernel']} | {k['variants']} | {', '.join(Path(s).name for s in k['sources'])} "
            f"| {', '.join(k['archs'])} | {min(regs, default=0)}-{max(regs, default=0)} "
            f"| {max(spills, default=0)} | {k['wall_s']:.0f} |"
        )
    if rejected:
        lines += ["", "Failures:", ""]
        lines += [f"- {name} {r['candidate']} {r['arch']}: {r['status']}: {r['detail']}" for name, r in rejected]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=ROOT / "kernels.toml")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    result = gate_all(args.manifest)
    report = {
        "command": command_line(__file__, argv),
        "date": utc_now(),
        "host": host_info(),
        "toolchain": toolchain().ident,
        **result,
    }
    write_results(args.out, "gate_root", report, markdown(report))
    failed = any(r["status"] != "passed" for k in report["kernels"] for r in k["rows"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
