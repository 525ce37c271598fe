"""What the sandbox of model-written code (r1build/sandbox, Bubblewrap) costs, paired against the same work
unconfined, alternating the two so load drifts hit both alike:

* a gate compile: one root-manifest kernel (silu_mul's baseline, one arch) through ``compile_variant``, confined
  as a generated source is, and as a trusted one is (goal: the difference under 5% of a candidate's gate time);
* a bare sandbox: ``bwrap ... true`` against ``true`` (the fixed cost of one sandbox);
* a worker start without a GPU: the confined ``python -c 'import r1build.evaluate.child.worker'`` of a slot against
  the same unconfined;
* with ``--gpu``: a real GPU worker started (until its hello, which follows CUDA's start) confined and unconfined.

Writes ``sandbox_overhead.json`` / ``.md`` (device, date, command) to ``--out`` (``bench/results``).

    python bench/sandbox_overhead.py [--reps 10] [--gpu] [--out bench/results]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

from r1build.evaluate.slots import WORKER_MODULE  # noqa: E402
from r1build.gate.nvcc import compile_variant  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.manifest.cdecl import declaration  # noqa: E402
from r1build.sandbox import Confinement, Sandbox, confined, unconfined  # noqa: E402
from r1build.sandbox.policy import python_places  # noqa: E402
from r1build.toolchain.nvcc import toolchain  # noqa: E402


def paired(reps: int, confined_run: Callable[[], None], plain_run: Callable[[], None]) -> dict[str, Any]:
    """Median seconds of each, alternating (plain first in even rounds), and the median of per-round ratios."""
    inside: list[float] = []
    outside: list[float] = []
    for i in range(reps):
        order = [(plain_run, outside), (confined_run, inside)]
        for run, into in order if i % 2 == 0 else reversed(order):
            t0 = time.perf_counter()
            run()
            into.append(time.perf_counter() - t0)
    ratios = [a / b for a, b in zip(inside, outside, strict=True)]
    return {
        "confined_s": statistics.median(inside),
        "unconfined_s": statistics.median(outside),
        "extra_s": statistics.median(a - b for a, b in zip(inside, outside, strict=True)),
        "ratio": statistics.median(ratios),
        "reps": reps,
    }


def compile_pair(reps: int, box: Sandbox, scratch: Path) -> dict[str, Any]:
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = manifest.kernel("silu_mul")
    source = (ROOT / "kernels" / "silu_mul.cu").read_text()
    tc = toolchain()

    def once(sandbox: Sandbox) -> Callable[[], None]:
        def run() -> None:
            work = Path(tempfile.mkdtemp(dir=scratch))
            done = compile_variant(
                source,
                {},
                "sm_90",
                name="silu_mul",
                flags=[],
                toolchain=tc,
                workdir=work,
                timeout_s=300,
                declaration=declaration(spec),
                sandbox=sandbox,
            )
            assert done.ok, done.output

        return run

    return paired(reps, once(box), once(unconfined()))


def process_pair(reps: int, box: Sandbox, argv: list[str], scratch: Path, *, python: bool) -> dict[str, Any]:
    confinement = Confinement(workdir=scratch, python=python)
    inside = box.command(argv, confinement)

    def run(cmd: list[str]) -> Callable[[], None]:
        return lambda: subprocess.run(cmd, check=True, cwd=scratch, capture_output=True)

    return paired(reps, run(inside), run(argv))


def gpu_pair(reps: int, box: Sandbox, scratch: Path) -> dict[str, Any]:
    from r1build.evaluate.devices import GpuInfo
    from r1build.evaluate.process import WorkerHandle
    from r1build.evaluate.slots import worker_environment

    gpu = GpuInfo(name="gpu", arch="sm_90", index=0, memory=1 << 30)
    confinement = Confinement(workdir=scratch, readable=(scratch,), python=True, gpu=True)
    (scratch / "home").mkdir(exist_ok=True)
    env = worker_environment(gpu, scratch / "home")

    def start(sandbox: Sandbox) -> Callable[[], None]:
        def run() -> None:
            handle = WorkerHandle(sandbox.command([sys.executable, "-m", WORKER_MODULE], confinement), env, scratch)
            handle.start()
            handle.close()

        return run

    return paired(reps, start(box), start(unconfined()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--gpu", action="store_true", help="also start real GPU workers")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    box = confined()
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="r1build-sandbox-bench-") as tmp:
        scratch = Path(tmp)
        rows["gate compile (silu_mul, sm_90)"] = compile_pair(args.reps, box, scratch)
        rows["bare sandbox (true)"] = process_pair(3 * args.reps, box, ["true"], scratch, python=False)
        worker = [sys.executable, "-c", f"import {WORKER_MODULE}"]
        rows["worker's Python start (no GPU)"] = process_pair(args.reps, box, worker, scratch, python=True)
        if args.gpu:
            rows["GPU worker start (until its hello)"] = gpu_pair(max(3, args.reps // 2), box, scratch)
    doc = {
        "date": utc_now(),
        "command": command_line("bench/sandbox_overhead.py"),
        "host": host_info(),
        "python": len(python_places()),
        "rows": rows,
    }
    lines = [
        "# The sandbox's cost (bench/sandbox_overhead.py)",
        "",
        f"{doc['date']}, `{doc['command']}`, {doc['host']}",
        "",
        "| what | unconfined (median s) | confined (median s) | extra (median s) | ratio (median) | reps |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['unconfined_s']:.4f} | {r['confined_s']:.4f} | {r['extra_s']:+.4f} | {r['ratio']:.3f} "
            f"| {r['reps']} |"
        )
    write_results(args.out, "sandbox_overhead", doc, "\n".join(lines))


if __name__ == "__main__":
    main()
