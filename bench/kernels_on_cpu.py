"""The root manifest's variants run on the CPU against their numpy references: a check of the kernels' index
math, tails and vector paths where no GPU is at hand (the GPU evaluator remains the judge; this is no part of
r1build).

Each variant (as ``expand_variants`` lists them) is compiled with g++ against ``bench/cpu_cuda/cuda_runtime.h``, a
CPU stand-in for the CUDA runtime that runs every block's threads as coroutines (``__syncthreads`` and warp
shuffles are real barriers; shared memory is refilled with NaN before each block), under AddressSanitizer (every
array is its own allocation, exactly as long as the array: any out-of-bounds access fails) and UBSan (a float2 or
float4 access the address does not allow fails). It is called at every test shape and more awkward ones, with
the pointers at the GPU evaluator's offsets (4, 8, 12 bytes past a 16-byte boundary), all aligned (the vector
paths the evaluator's offsets never take), all at one offset and mixed; inputs signed normal, small ties,
large (x100) and the evaluator's ``precision`` inputs (low mantissa bits a downcast drops). Outputs start as NaN
and are compared like the evaluator does (``numpy.allclose`` at the spec's tolerance, ``atol`` scaled by the
reference's rms for the large inputs). Needs g++ with libasan/libubsan, no GPU
and no nvcc. Writes ``bench/results/kernels_on_cpu.json`` and ``.md``; exits 1 when any variant fails.

    python bench/kernels_on_cpu.py [--kernel NAME ...] [--jobs 2] [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

from r1build.evaluate.correctness.inputs import precision_floats  # noqa: E402
from r1build.evaluate.variants import expand_variants  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.manifest.model import Arg, KernelSpec, Manifest  # noqa: E402
from r1build.manifest.reference import load_reference  # noqa: E402
from r1build.records import Candidate  # noqa: E402

SHIM = Path(__file__).resolve().parent / "cpu_cuda"
LAUNCH = re.compile(r"(\w+)\s*<<<(.*?)>>>\s*\(")

EXTRA_SHAPES: dict[str, list[dict[str, int]]] = {
    "silu_mul": [{"n": 2}, {"n": 3}, {"n": 4}, {"n": 5}, {"n": 7}, {"n": 8}, {"n": 4099}],
    "softmax_rows": [
        {"rows": 2, "cols": 2},
        {"rows": 3, "cols": 3},
        {"rows": 4, "cols": 5},
        {"rows": 9, "cols": 8},
        {"rows": 33, "cols": 33},
        {"rows": 2, "cols": 1030},
    ],
    "sum_all": [{"n": 2}, {"n": 3}, {"n": 4}, {"n": 5}, {"n": 7}, {"n": 8}, {"n": 9}, {"n": 4099}],
    "transpose": [
        {"rows": 1, "cols": 65},
        {"rows": 65, "cols": 1},
        {"rows": 64, "cols": 64},
        {"rows": 129, "cols": 17},
    ],
    "matmul": [{"m": 2, "n": 3, "k": 4}, {"m": 129, "n": 65, "k": 17}, {"m": 17, "n": 130, "k": 9}],
    "rmsnorm": [{"rows": 2, "cols": 2}, {"rows": 3, "cols": 3}, {"rows": 9, "cols": 5}, {"rows": 33, "cols": 1030}],
}
"""Shapes beyond the manifest's test-shapes: every remainder modulo 4, rows shorter than a warp, tiles cut on
both sides."""

LAYOUTS: dict[str, tuple[int, ...] | None] = {
    "evaluator": None,  # the i-th array 4 * (1 + i % 3) bytes past a 16-byte boundary, as the GPU evaluator puts it
    "aligned": (0,),
    "same8": (8,),
    "same4": (4,),
    "mixed": (0, 8, 4, 12),
}
CALLS = [
    ("evaluator", "signed"),
    ("evaluator", "ties"),
    ("evaluator", "large"),
    ("evaluator", "precision"),
    ("aligned", "precision"),
    ("aligned", "signed"),
    ("aligned", "ties"),
    ("same8", "signed"),
    ("same4", "signed"),
    ("mixed", "signed"),
]
"""(layout, input distribution) of each call at each shape."""

C_TYPES = {"int64_t": "long long", "int32_t": "int", "int": "int", "float": "float"}


def harness(spec: KernelSpec) -> str:
    """A main() that makes the calls described in argv[1] and writes the outputs to argv[2]: per call, per array
    its element count, byte offset and (inputs) data; per scalar its value as a double."""
    lines = [
        '#include "cuda_runtime.h"',
        "#include <sanitizer/asan_interface.h>",
        '#include "kernel.cu"',
        "static FILE* in;",
        "template <typename T> T get() { T v; if (fread(&v, sizeof v, 1, in) != 1) std::exit(4); return v; }",
        "static size_t rounded(size_t bytes) { return (bytes + 63) / 64 * 64; }",
        "int main(int, char** argv) {",
        '  in = std::fopen(argv[1], "rb");',
        '  FILE* out = std::fopen(argv[2], "wb");',
        "  const int calls = get<int>();",
        "  for (int call = 0; call < calls; ++call) {",
    ]
    params = []
    for i, arg in enumerate(spec.args):
        if arg.shape is not None:
            lines += [
                f"    const long long n{i} = get<long long>(); const int off{i} = get<int>();",
                f"    const size_t size{i} = rounded(off{i} + n{i} * 4);",
                f"    char* base{i} = static_cast<char*>(aligned_alloc(64, size{i}));",
                f"    float* a{i} = reinterpret_cast<float*>(base{i} + off{i});",
                f"    if (fread(a{i}, 4, n{i}, in) != static_cast<size_t>(n{i})) return 4;",
                f"    __asan_poison_memory_region(base{i}, off{i});",
                f"    __asan_poison_memory_region(a{i} + n{i}, size{i} - off{i} - n{i} * 4);",
            ]
            params.append(f"a{i}")
        else:
            kind = C_TYPES[arg.c_type()]
            lines.append(f"    const {kind} s{i} = static_cast<{kind}>(get<double>());")
            params.append(f"s{i}")
    lines += [
        f"    const cudaError_t err = {spec.name}({', '.join(params)}, nullptr);",
        '    if (err != cudaSuccess) { std::fprintf(stderr, "the entry point returned %d\\n", err); return 5; }',
    ]
    for i, arg in enumerate(spec.args):
        if arg.shape is not None:
            if arg.role in ("out", "inout"):
                lines.append(f"    std::fwrite(a{i}, 4, n{i}, out);")
            lines += [f"    __asan_unpoison_memory_region(base{i}, size{i});", f"    std::free(base{i});"]
    lines += ["  }", "  std::fclose(out);", "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def dims(arg: Arg, shape: dict[str, int]) -> list[int]:
    assert arg.shape is not None
    return [d if isinstance(d, int) else shape[d] for d in arg.shape]


def plan_calls(spec: KernelSpec, shapes: list[dict[str, int]], seed: int) -> tuple[bytes, list[dict[str, Any]]]:
    """The calls' input file and, per call, its arrays and scalars (for the reference) and how it was made."""
    rng = np.random.default_rng(seed)
    blob = [struct.pack("<i", len(shapes) * len(CALLS))]
    calls = []
    for shape in shapes:
        for layout, dist in CALLS:
            values: dict[str, Any] = {}
            for i, arg in enumerate(spec.args):
                if arg.shape is None:
                    value = arg.value if arg.value is not None else shape[arg.name]
                    values[arg.name] = value
                    blob.append(struct.pack("<d", float(value)))
                    continue
                size = int(np.prod(dims(arg, shape)))
                fixed = LAYOUTS[layout]
                offset = 4 * (1 + i % 3) if fixed is None else fixed[i % len(fixed)]
                if arg.role == "out":
                    data = np.full(size, np.nan, dtype=np.float32)
                elif dist == "ties":
                    data = rng.integers(-3, 4, size).astype(np.float32)
                elif dist == "precision":
                    data = precision_floats(size, rng).astype(np.float32)
                else:
                    data = (rng.standard_normal(size) * (100.0 if dist == "large" else 1.0)).astype(np.float32)
                values[arg.name] = data.reshape(dims(arg, shape))
                blob.append(struct.pack("<qi", size, offset) + data.tobytes())
            calls.append({"shape": shape, "layout": layout, "dist": dist, "values": values})
    return b"".join(blob), calls


def check_variant(
    manifest: Manifest, spec: KernelSpec, candidate: Candidate, work: Path, *, extra: bool = True
) -> str | None:
    """None when every call matches the reference; else why not. ``extra``: the awkward shapes beyond the
    manifest's test-shapes too."""
    shapes = [dict(s) for s in spec.test_shapes] + (EXTRA_SHAPES.get(spec.name, []) if extra else [])
    work.mkdir(parents=True, exist_ok=True)
    source = LAUNCH.sub(r"emu::launch(emu::Config(\2), \1, ", candidate.source)
    (work / "kernel.cu").write_text(source, encoding="utf-8")
    (work / "main.cpp").write_text(harness(spec), encoding="utf-8")
    exe = work / "a.out"
    cmd = [
        "g++",
        "-std=c++17",
        "-O1",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-I",
        str(SHIM),
        "-I",
        str(work),
        *(f"-D{k}={v}" for k, v in candidate.defines.items()),
        str(work / "main.cpp"),
        "-o",
        str(exe),
    ]
    built = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if built.returncode:
        return "g++: " + built.stderr[-2000:]
    data, calls = plan_calls(spec, shapes, seed=len(candidate.source))
    (work / "calls.bin").write_bytes(data)
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
    ran = subprocess.run(
        [str(exe), str(work / "calls.bin"), str(work / "out.bin")],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )
    if ran.returncode:
        return f"exit {ran.returncode}: " + ran.stderr[-2000:]
    got_all = np.frombuffer((work / "out.bin").read_bytes(), dtype=np.float32)
    reference = load_reference(manifest.root, spec.reference)
    outputs = [a for a in spec.args if a.role in ("out", "inout")]
    pos = 0
    for call in calls:
        kwargs = {a.name: call["values"][a.name] for a in spec.args if a.role not in ("out",)}
        expected = reference(**kwargs)
        for arg, want in zip(outputs, expected if isinstance(expected, tuple) else (expected,), strict=True):
            want = np.asarray(want, dtype=np.float32).reshape(-1)
            got = got_all[pos : pos + want.size]
            pos += want.size
            where = f"{call['shape']}, {call['layout']} pointers, {call['dist']} inputs"
            if got.size != want.size or np.isnan(got).any():
                return f"{where}: {arg.name} has {int(np.isnan(got).sum())} unwritten (NaN) elements"
            atol = spec.tolerance.atol
            if call["dist"] == "large":
                atol *= max(1.0, float(np.sqrt(np.mean(want.astype(np.float64) ** 2))))
            if not np.allclose(got, want, rtol=spec.tolerance.rtol, atol=atol):
                bad = int(np.argmax(np.abs(got - want) - (atol + spec.tolerance.rtol * np.abs(want))))
                return f"{where}: {arg.name}[{bad}] = {got[bad]!r}, the reference {want[bad]!r}"
    if pos != got_all.size:
        return f"{got_all.size} output elements, {pos} expected"
    return None


def label(c: Candidate) -> str:
    return Path(c.origin.path or c.origin.kind).name + "".join(f" {k}={v}" for k, v in c.defines.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=ROOT / "kernels.toml")
    parser.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    manifest = load_manifest(args.manifest.resolve())
    specs = [s for s in manifest.kernels if not args.kernel or s.name in args.kernel]
    tasks = [(spec, c) for spec in specs for c in expand_variants(manifest, spec)]
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="r1build-cpu-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        futures = [
            pool.submit(check_variant, manifest, spec, c, Path(tmp) / f"{spec.name}-{i}")
            for i, (spec, c) in enumerate(tasks)
        ]
        for (spec, c), future in zip(tasks, futures, strict=True):
            why = future.result()
            rows.append({"kernel": spec.name, "candidate": label(c), "ok": why is None, "detail": why or ""})
            print(("ok   " if why is None else "FAIL ") + f"{spec.name} {label(c)}" + (f": {why}" if why else ""))
    wall = time.perf_counter() - start
    report = {"command": command_line(__file__, argv), "date": utc_now(), "host": host_info(), "wall_s": wall}
    report["rows"] = rows
    failed = [r for r in rows if not r["ok"]]
    per_kernel = {s.name: sum(1 for r in rows if r["kernel"] == s.name) for s in specs}
    lines = [
        "# The root manifest's variants on the CPU",
        "",
        f"`{report['command']}` on {report['date']}: {report['host']['cpu']}, {report['host']['cpus']} CPUs; "
        f"g++ with ASan and UBSan against bench/cpu_cuda/cuda_runtime.h, no GPU; {wall:.0f} s.",
        "",
        f"{len(rows) - len(failed)} of {len(rows)} variants match the numpy reference at every shape and pointer "
        f"layout ({len(CALLS)} calls a shape: {', '.join(f'{a}/{b}' for a, b in CALLS)}).",
        "",
        "| kernel | variants | failed |",
        "|---|---:|---:|",
        *(f"| {k} | {n} | {sum(1 for r in failed if r['kernel'] == k)} |" for k, n in per_kernel.items()),
    ]
    lines += ["", *(f"- {r['kernel']} {r['candidate']}: {r['detail']}" for r in failed)] if failed else []
    write_results(args.out, "kernels_on_cpu", report, "\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
