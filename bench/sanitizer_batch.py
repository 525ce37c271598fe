"""What one compute-sanitizer run costs, and what each more candidate in the same run costs.

Builds ``--copies`` distinct shared libraries of one of the root manifest's kernel files (``--kernel`` and
``--file``; silu_mul_vec4.cu by default), then for each tool runs the harness over 1, 4 and all of them in one
sanitizer process, recording the wall time and the CPU seconds of each run (its processes' user and system time:
a run whose CPU seconds are close to its wall time is bound by the CPU, not the GPU) and when each of the harness's
markers arrived (so a sanitizer that holds the application's output back shows as markers arriving together at the
end); then ``--side`` single runs of ``--side-tool`` at once. Writes ``sanitizer_batch[-KERNEL].json`` and ``.md``
to ``--out``.

    python bench/sanitizer_batch.py [--copies 16] [--kernel silu_mul --file kernels/silu_mul_vec4.cu]
        [--side 8 --side-tool memcheck] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

from r1build.evaluate.correctness.plan import (  # noqa: E402
    arg_codes,
    plan_checks,
)
from r1build.evaluate.devices import detect_gpus  # noqa: E402
from r1build.evaluate.library import Library, build_library  # noqa: E402
from r1build.evaluate.sanitizer.runner import HARNESS, TOOLS, find_sanitizer  # noqa: E402
from r1build.evaluate.sanitizer.schedule import write_shapes  # noqa: E402
from r1build.evaluate.slots import worker_environment  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.manifest.cdecl import declaration  # noqa: E402
from r1build.manifest.reference import load_reference  # noqa: E402
from r1build.records import Candidate, Origin  # noqa: E402
from r1build.toolchain.nvcc import toolchain  # noqa: E402


def timed_run(exe: str, env: dict[str, str], tool: str, job_file: Path) -> dict[str, Any]:
    """One sanitizer run; wall seconds and each marker's arrival (seconds after the start)."""
    cmd = [exe, "--tool", tool, "--error-exitcode", "86", sys.executable, str(HARNESS), str(job_file)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=job_file.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    marks = []
    tail = []
    for raw in proc.stdout:
        line = raw.decode(errors="replace").strip()
        tail = [*tail[-5:], line]
        if line.startswith("r1build-harness:"):
            marks.append((round(time.perf_counter() - start, 3), line.split()[1]))
    code = proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # (runs side by side: the others' ended ones count too)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    wall = time.perf_counter() - start
    return {"tool": tool, "wall_s": wall, "cpu_s": cpu, "exit": code, "marks": marks, "tail": tail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=16)
    parser.add_argument("--kernel", default="silu_mul", help="the root manifest's kernel")
    parser.add_argument("--file", default="kernels/silu_mul_vec4.cu", help="its source (defaults of its macros)")
    parser.add_argument("--side", type=int, default=8, help="single runs side by side")
    parser.add_argument("--side-tool", default="memcheck", choices=TOOLS)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    gpus = detect_gpus()
    if not gpus:
        print("no GPU visible: nothing to measure", file=sys.stderr)
        return 2
    tc = toolchain()
    exe = find_sanitizer(tc.nvcc)
    if exe is None:
        print("compute-sanitizer not found", file=sys.stderr)
        return 2
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = next(s for s in manifest.kernels if s.name == args.kernel)
    source = (ROOT / args.file).read_text()
    plans = plan_checks(spec, load_reference(manifest.root, spec.reference))
    with tempfile.TemporaryDirectory(prefix="r1build-sanbench-") as tmp:
        work = Path(tmp)
        shapes = write_shapes(spec, plans, work)
        candidates = [
            Candidate(source=f"{source}\n// copy {i}\n", origin=Origin("file", args.file)) for i in range(args.copies)
        ]
        start = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            libs = list(
                pool.map(
                    lambda c: build_library(
                        c,
                        spec.name,
                        gpus[0].arch,
                        flags=manifest.settings.nvcc_flags,
                        toolchain=tc,
                        workdir=work / c.digest[:16],
                        declaration=declaration(spec),
                    ),
                    candidates,
                )
            )
        build_s = time.perf_counter() - start
        paths = [str(lib.path) for lib in libs if isinstance(lib, Library)]
        env = worker_environment(gpus[0], work / "home")
        (work / "home").mkdir(exist_ok=True)
        runs = []
        for size in sorted({1, 4, len(paths)}):
            job = {"libs": paths[:size], "entry": spec.name, "argtypes": arg_codes(spec), "shapes": shapes}
            job["token"] = secrets.token_hex(4)
            job_file = work / f"job-{size}.json"
            job_file.write_text(json.dumps(job))
            for tool in TOOLS:
                run = timed_run(exe, env, tool, job_file)
                run["size"] = size
                runs.append(run)
                print(
                    f"{tool} x{size}: {run['wall_s']:.2f} s, {run['cpu_s']:.2f} CPU s, exit {run['exit']}", flush=True
                )
        # the same, several runs at once (as the evaluator does): single runs side by side
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        job_file = work / "job-1.json"
        with ThreadPoolExecutor(args.side) as pool:
            side = list(pool.map(lambda _: timed_run(exe, env, args.side_tool, job_file)["wall_s"], range(args.side)))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        parallel = {
            "runs": args.side,
            "tool": args.side_tool,
            "wall_s": time.perf_counter() - start,
            "cpu_s": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
            "each_s": side,
        }
        print(f"{args.side} {args.side_tool} runs side by side: {parallel['wall_s']:.2f} s", flush=True)
    report = {
        "command": command_line(__file__, argv),
        "date": utc_now(),
        "device": gpus[0].name,
        "host": host_info(),
        "libraries": len(paths),
        "build_s": build_s,
        "runs": runs,
        "parallel": parallel,
    }
    lines = [
        "# compute-sanitizer: the cost of a run and of each more candidate in it",
        "",
        f"`{report['command']}` on {report['date']}: {report['device']}, {report['host']['cpus']} CPUs.",
        "",
        f"{len(paths)} libraries of {args.file} ({args.kernel}) built in {build_s:.1f} s (16 threads); sanitizer "
        f"shapes {', '.join(s['key'] for s in shapes)}.",
        "",
        "| tool | candidates in the run | wall s | CPU s | s per candidate | first BEGIN at s | last END at s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        begins = [t for t, w in r["marks"] if w == "begin"]
        ends = [t for t, w in r["marks"] if w == "end"]
        lines.append(
            f"| {r['tool']} | {r['size']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['wall_s'] / r['size']:.2f} "
            f"| {begins[0] if begins else ''} | {ends[-1] if ends else ''} |"
        )
    lines += [
        "",
        f"{args.side} single {args.side_tool} runs side by side: {parallel['wall_s']:.2f} s wall, "
        f"{parallel['cpu_s']:.1f} CPU s (each {min(side):.2f}-{max(side):.2f} s).",
        "",
    ]
    name = "sanitizer_batch" if args.kernel == "silu_mul" else f"sanitizer_batch-{args.kernel}"
    write_results(args.out, name, report, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
