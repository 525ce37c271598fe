"""Where `r1build resolve` of the root manifest spends time beside the GPU evaluator's evaluate_all, as far as a
machine without a GPU can tell (issue 11; the analysis is bench/results/resolve_overhead.md). Each part prints
its figures:

- ``nvcc``: the CPU seconds of one gate compile for sm_80, for sm_90, and for both in one nvcc (3 variants a kernel);
- ``cache``: what a resolve of the root manifest writes to and reads from the cache, timed with the real Cache
  (``--dir`` picks the disk);
- ``gpu-shaped``: `resolve` shaped as on the one-H200 machine: sm_90 judged by a stand-in GPU (the real static
  gate, then passed), sm_80 gate-only, the gate's batch as on 16 cores; counts the nvcc runs and their CPU seconds
  (minutes on 2 cores);
- ``close``: closing five stand-in workers that take ``--exit-s`` to exit, one after another and each asked first.

    python bench/resolve_overhead.py nvcc|cache|gpu-shaped|close [--dir DIR] [--batch 16] [--exit-s 0.3]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import resource
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from r1build.cache import Cache  # noqa: E402
from r1build.evaluate.variants import expand_variants  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.records import CandidateRef, Decision, GateReport, Result, Timing  # noqa: E402


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def nvcc_cost() -> None:
    from r1build.gate.nvcc import PIC_FLAGS, compile_variant
    from r1build.manifest.cdecl import declaration
    from r1build.manifest.flags import rooted_flags
    from r1build.toolchain.nvcc import toolchain

    manifest = load_manifest(ROOT / "kernels.toml")
    tc = toolchain()
    totals: dict[str, list[float]] = collections.defaultdict(list)
    for spec in manifest.kernels:
        variants = expand_variants(manifest, spec)
        for c in variants[:: max(1, len(variants) // 3)][:3]:
            for archs in (["sm_80"], ["sm_90"], ["sm_80", "sm_90"]):
                with tempfile.TemporaryDirectory() as scratch:
                    before = children_cpu()
                    compiled = compile_variant(
                        c.source,
                        c.defines,
                        archs if len(archs) > 1 else archs[0],
                        name=spec.name,
                        flags=[*rooted_flags(manifest.settings.nvcc_flags, manifest.root), *PIC_FLAGS],
                        toolchain=tc,
                        workdir=Path(scratch),
                        timeout_s=300,
                        declaration=declaration(spec),
                    )
                    assert compiled.ok, compiled.output
                    totals["+".join(archs)].append(children_cpu() - before)
    for archs, cpu in totals.items():
        print(f"{archs:12s} {sum(cpu) / len(cpu):.2f} s of CPU a compile (mean of {len(cpu)})")


def cache_costs(base: Path) -> None:
    manifest = load_manifest(ROOT / "kernels.toml")
    jobs = [(s, expand_variants(manifest, s)) for s in manifest.kernels]
    with tempfile.TemporaryDirectory(dir=base) as d, Cache(Path(d) / "cache") as cache:

        def timed(label: str, fn: Callable[[Any], object], items: Sequence[Any]) -> None:
            start = time.perf_counter()
            for x in items:
                fn(x)
            took = time.perf_counter() - start
            print(f"{label:24s} {len(items):4d} in {took * 1000:7.1f} ms ({took / len(items) * 1000:.2f} ms each)")

        report = GateReport(registers=32, compile_s=1.0)
        gates = [
            (f"{s.name}-{a}-{c.digest}", Result(candidate=c.digest, arch=a, status="passed", gate=report))
            for s, vs in jobs
            for a in ("sm_90", "sm_80")
            for c in (vs if a == "sm_90" else vs[:16])
        ]
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        timing = Timing(median_us=10.0, spread=0.01, samples=100, floor_us=5.0)
        decisions = [
            Decision(
                key=f"k{s.name}",
                kernel=s.name,
                arch="sm_90",
                winner=CandidateRef.of(vs[0]),
                candidates=[CandidateRef.of(c) for c in vs],
                results=[
                    Result(candidate=c.digest, arch="sm_90", status="passed", stage="evaluate", timing=timing)
                    for c in vs
                ],
                transcripts=[],
                measured=True,
                device="NVIDIA H200",
                toolchain="13.0",
                created=now,
                checks=1,
            )
            for s, vs in jobs
        ]
        timed("get_gate (misses)", lambda g: cache.get_gate("x" + g[0]), gates)
        timed("put_gate", lambda g: cache.put_gate(*g), gates)
        timed("put_text (sources)", cache.put_text, [c.source for _, vs in jobs for c in vs])
        timed("put_decision", cache.put_decision, decisions)
        timed("get_gate (hits)", lambda g: cache.get_gate(g[0]), gates)
        timed("get_decision (hits)", lambda dd: cache.get_decision(dd.key), decisions)


def gpu_shaped(batch: int) -> None:
    import r1build.resolve.judges as judges_module
    import r1build.resolve.work as work_module
    from r1build.gate import static
    from r1build.judge import Job
    from r1build.resolve import ResolveOptions, resolve
    from r1build.resolve.judges import Judges

    judges_module.gate_batch = lambda: batch  # type: ignore[assignment]
    work_module.gate_batch = lambda: batch  # type: ignore[assignment]
    runs: collections.Counter[str] = collections.Counter()
    compile_variant = static.compile_variant

    def counting(*args: Any, **kwargs: Any) -> Any:
        arch = args[2] if len(args) > 2 else kwargs["arch"]
        runs["+".join(arch) if isinstance(arch, list) else arch] += 1
        return compile_variant(*args, **kwargs)

    static.compile_variant = counting  # type: ignore[assignment]

    class StandInGpu:
        def __init__(self, judges: Judges) -> None:
            self.judges = judges

        def evaluate(self, job: Job) -> list[Result]:
            timing = Timing(median_us=10.0, spread=0.01, samples=50)
            return [
                r
                if not r.ok
                else Result(
                    candidate=r.candidate,
                    arch=job.arch,
                    status="passed",
                    stage="evaluate",
                    gate=r.gate,
                    timing=timing,
                    device="stand-in GPU",
                )
                for r in self.judges.gate.evaluate(job)
            ]

    Judges.gpu_for = lambda self, arch: StandInGpu(self) if arch == "sm_90" else None  # type: ignore[assignment,method-assign,return-value]
    Judges.gpu_archs = lambda self: {"sm_90"}  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(ROOT / "kernels.toml", d)
        shutil.copytree(ROOT / "kernels", Path(d) / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
        manifest = load_manifest(Path(d) / "kernels.toml")
        before, start = children_cpu(), time.perf_counter()
        with Cache(Path(d) / "cache") as cache:
            resolution = resolve(manifest, cache, ResolveOptions(generate=False))
        wall, cpu = time.perf_counter() - start, children_cpu() - before
    print(f"wall {wall:.1f} s, nvcc CPU {cpu:.1f} s, nvcc runs {sum(runs.values())}: {dict(runs)}")
    print(", ".join(f"{r.spec.name}/{r.arch} {r.state}" for r in resolution.entries))


def close_workers(exit_s: float) -> None:
    from r1build.evaluate.process import WorkerHandle, scrubbed_environment

    child = textwrap.dedent(f"""
        import sys, time
        from r1build.evaluate.child.protocol import read_message, write_message
        rfd, wfd = int(sys.argv[1]), int(sys.argv[2])
        write_message(wfd, {{"ok": True}})
        while read_message(rfd)[0]["op"] != "exit":
            pass
        time.sleep({exit_s})
    """)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "child.py").write_text(child)
        env = scrubbed_environment(dict(os.environ), home=Path(d), extra={"PYTHONPATH": str(ROOT)})
        for mode in ("one after another", "each asked first"):
            workers = [
                WorkerHandle([sys.executable, str(Path(d) / "child.py")], env, Path(d) / f"{mode[0]}{i}")
                for i in range(5)
            ]
            for w in workers:
                w.start()
            start = time.perf_counter()
            if mode == "each asked first":
                for w in workers:
                    w.ask_to_exit()
            for w in workers:
                w.close()
            print(f"{mode:18s}: 5 workers taking {exit_s} s to exit closed in {time.perf_counter() - start:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["nvcc", "cache", "gpu-shaped", "close"])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the cache goes")
    parser.add_argument("--batch", type=int, default=16, help="the gate's batch (one per core of the GPU machine)")
    parser.add_argument("--exit-s", type=float, default=0.3, help="seconds a stand-in worker takes to exit")
    args = parser.parse_args()
    if args.part == "nvcc":
        nvcc_cost()
    elif args.part == "cache":
        cache_costs(args.dir)
    elif args.part == "gpu-shaped":
        gpu_shaped(args.batch)
    else:
        close_workers(args.exit_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
