"""What the emitted bindings cost per call over a bare launch of the same kernel (issue 32; goal under 5 us).

``tests/packages/bound`` (``[bindings] python = "boundpkg._k"``) is built by pip into a wheel for this GPU's arch
and unpacked; then, on the GPU, ``axpy`` of one element (so the kernel itself is next to nothing) is called
``--calls`` times back to back on the current stream, and the wall time per call is taken over the whole loop
with one synchronize at its end (best of ``--repeats`` loops), for:

- **bare launch**: the same kernel source as a ``cupy.RawKernel``, launched on the current stream (no checks);
- **nanobind entry**: the compiled module's function (``boundpkg._k._ext.axpy``: every check, then the launch), given
  the stream as an integer;
- **wrapper, cupy**: ``boundpkg._k.axpy(x, y, 0.5)`` on cupy arrays (the stream found from cupy);
- **wrapper, torch** and **custom op, torch** (``torch.ops.boundtest.axpy``) on torch tensors, where torch with
  CUDA is installed, beside a bare launch on torch's current stream.

Each row's overhead is its per-call time less the bare launch's. Writes ``bench/results/binding_overhead.json`` /
``.md``. Needs nvcc, cmake, nanobind and a GPU; the build alone runs anywhere (``--build-only``).

    python bench/binding_overhead.py [--calls 20000] [--repeats 5] [--arch sm_90] [--build-only]
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402

BOUND = ROOT / "tests" / "packages" / "bound"
GOAL_US = 5.0
OP_ROW = "custom op"
"""The row of ``torch.ops.<ns>.<kernel>``: the binding called through torch's dispatcher."""
"""The most the binding may add per call over a bare launch."""
BARE = r"""
extern "C" __global__ void axpy_kernel(const float* x, float* y, float a, long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""


def build(work: Path, arch: str) -> Path:
    """The bound package's wheel, built by pip for ``arch`` (``sm_90`` -> ``90-real``), unpacked; the folder to put
    first on the path."""
    project = work / "bound"
    shutil.copytree(BOUND, project, ignore=shutil.ignore_patterns("__pycache__", "kernels.lock", "build"))
    toml = project / "kernels.toml"
    real = arch.removeprefix("sm_") + "-real"
    toml.write_text(toml.read_text(encoding="utf-8").replace('archs = ["80-real"]', f'archs = ["{real}"]'))
    wheels = work / "wheels"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)]
    proc = subprocess.run([*cmd, str(project)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the bound package did not build:\n{(proc.stdout + proc.stderr)[-6000:]}")
    (wheel,) = wheels.glob("boundpkg-*.whl")
    site = work / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return site


def per_call_us(call: Callable[[], Any], sync: Callable[[], Any], calls: int, repeats: int) -> float:
    """Wall microseconds per call of ``calls`` back-to-back calls and one ``sync`` at the end, best of
    ``repeats`` (after a warm-up loop)."""
    best = float("inf")
    for _ in range(repeats + 1):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return round(best, 3)


def cupy_rows(k: Any, calls: int, repeats: int) -> dict[str, float]:
    """The bare launch, the nanobind entry and the wrapper, on cupy arrays of one element."""
    import cupy as cp

    x, y = cp.ones(1, cp.float32), cp.ones(1, cp.float32)
    kernel = cp.RawKernel(BARE, "axpy_kernel")
    a, n = cp.float32(0.5), cp.int64(1)
    sync = cp.cuda.get_current_stream().synchronize

    def stream() -> int:
        return int(cp.cuda.get_current_stream().ptr)

    return {
        "bare launch (cupy.RawKernel)": per_call_us(lambda: kernel((1,), (256,), (x, y, a, n)), sync, calls, repeats),
        "nanobind entry (_ext.axpy)": per_call_us(lambda: k._ext.axpy(x, y, 0.5, stream()), sync, calls, repeats),
        "wrapper on cupy (boundpkg._k.axpy)": per_call_us(lambda: k.axpy(x, y, 0.5), sync, calls, repeats),
    }


def torch_rows(k: Any, calls: int, repeats: int) -> dict[str, float]:
    """The wrapper and the custom op on torch tensors, where torch with CUDA is here; empty otherwise."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    x, y = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")
    sync = torch.cuda.synchronize
    rows = {"wrapper on torch (boundpkg._k.axpy)": per_call_us(lambda: k.axpy(x, y, 0.5), sync, calls, repeats)}
    op = getattr(getattr(torch.ops, "boundtest", None), "axpy", None)
    if op is not None:
        rows["custom op (torch.ops.boundtest.axpy)"] = per_call_us(lambda: op(x, y, 0.5), sync, calls, repeats)
    return rows


def _arch() -> str:
    import cupy as cp

    major, minor = cp.cuda.Device().compute_capability
    return f"sm_{major}{minor}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--arch", help="the arch to build for (default: the GPU's)")
    parser.add_argument("--build-only", action="store_true", help="build and import the module; time nothing")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    arch = args.arch or _arch()
    with tempfile.TemporaryDirectory() as tmp:
        site = build(Path(tmp), arch)
        sys.path.insert(0, str(site))
        k = importlib.import_module("boundpkg._k")
        if args.build_only:
            print(f"built and imported {k.__name__} for {arch}: devices {k.device_count()}")
            return 0
        import cupy as cp

        rows = cupy_rows(k, args.calls, args.repeats) | torch_rows(k, args.calls, args.repeats)
        device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    bare = rows["bare launch (cupy.RawKernel)"]
    result = {
        "benchmark": "binding_overhead",
        "date": utc_now(),
        "host": host_info(device=device),
        "command": command_line(__file__),
        "arch": arch,
        "per_call_us": rows,
        "over_bare_us": {name: round(us - bare, 3) for name, us in rows.items()},
        "goal_us": GOAL_US,
        "ok": all(us - bare <= GOAL_US for name, us in rows.items() if not name.startswith(OP_ROW)),
    }
    write_results(args.out, "binding_overhead", result, _markdown(result))
    return 0 if result["ok"] else 1


def _markdown(r: dict[str, Any]) -> str:
    lines = [
        "# The emitted bindings' cost per call over a bare launch (axpy of one element)",
        "",
        f"- date: {r['date']}; device: {r['host']['device']} ({r['arch']}); host: {r['host']['cpu']}",
        f"- command: `{r['command']}`",
        "",
        "| call | per call | over the bare launch |",
        "| --- | ---: | ---: |",
        *[f"| {name} | {us:.2f} us | {r['over_bare_us'][name]:+.2f} us |" for name, us in r["per_call_us"].items()],
        "",
        f"Goal: the binding (nanobind entry and wrappers, cupy and torch) at most {r['goal_us']:g} us over the bare "
        f"launch: {'met' if r['ok'] else 'MISSED'}. The custom-op row adds torch's dispatcher (an autograd kernel "
        "and the CUDA kernel, both Python) to the torch wrapper; it is shown, not held to the goal.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
