"""A minimal driver of candidates under compute-sanitizer: run by path, standard library only.

``python harness.py job.json`` (a :class:`~.messages.SanitizeJob`; run by path, so it reads the file without
importing that module) calls every library the job names, one after another, at every shape: it allocates every
array with the CUDA driver API (exact sizes, so memcheck sees an access one element past the end), uploads
``in`` / ``inout`` data from the files the job names, leaves ``out`` arrays uninitialized (initcheck reports a
kernel that reads them before writing), calls the entry point on a non-blocking stream, synchronizes and frees.
Around each library it prints ``BEGIN <i> <token>`` and ``END <i> <token>`` (the parent reads them live: which
candidate runs, where a report or a hang came); the last line is ``DONE`` with the shape and library counts and
the token. ``python harness.py --probe`` only initializes CUDA and allocates, to find out whether the sanitizer
works on this machine at all.

A job names its libraries either as a list (``libs``: the markers count from 0) or as a queue folder (``queue``)
that several runs of one tool share: the evaluator adds ``<n>.lib`` files (a library's path) as candidates become
ready, and a run takes the lowest one nobody took yet by linking a ``<n>.claim`` file holding its token into place
(:func:`claim`: one taker wins), calls it, and looks again, until none is left or it took ``limit``; its markers
count by ``n``. So a kernel whose candidates are slow under the sanitizer gets as many runs as there are free places,
each taking work as it goes, instead of two fixed halves that run long after everything else has finished. CUDA is
set up at the first library, so a run that finds nothing left to take ends without a context (under the sanitizer
the slow part of a start, and GPU memory).

A job may name a ``hold`` file: while it exists (the evaluator is timing on the GPU) the harness starts no GPU work
(and ends, exit 3, once the evaluator whose process id the job names as ``parent`` is gone).
It looks before it touches CUDA and before every call (each call ends synchronized, so nothing of it is left on
the GPU), and while held it prints ``HELD <generation> <token>`` (the file holds the generation: a hold lifted
and taken again while the harness slept is a new one) and ``RESUMED <token>`` once the file is gone.

Exit status: 0 when every call returned success (and the last line printed is ``DONE``), 3 when a call or a CUDA
call failed (the message on stderr).
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DONE = "r1build-harness: done, shapes:"
"""Printed after the last library's last shape (``DONE <shapes> libraries <n> <token>``): a run that exits 0
without it (a candidate that ended the process early) did not check every candidate at every shape."""
BEGIN = "r1build-harness: begin"
"""Printed before a library is loaded (``BEGIN <index> <token>``)."""
END = "r1build-harness: end"
"""Printed once a library's last shape was called and synchronized (``END <index> <token>``)."""
HELD = "r1build-harness: held"
"""Printed when the harness stops for a hold (``HELD <generation> <token>``): no GPU work of it is running."""
RESUMED = "r1build-harness: resumed"
"""Printed when the hold file is gone and the harness goes on (``RESUMED <token>``)."""
FAILED = "r1build-harness: failed:"
"""Printed (on stderr) before the harness exits 3: what failed (a CUDA call, a call of the candidate)."""
PARENT_POLL_S = 0.5
"""How often a held harness looks whether the evaluator that holds the GPU still exists."""
HOLD_POLL_S = 0.002
"""How often a held harness looks whether its hold was lifted."""

CTYPES: dict[str, Any] = {
    # ctypes of the entry point's parameter codes (``checks.arg_codes``); the GPU worker reads this table too
    "ptr": ctypes.c_void_p,
    "bool": ctypes.c_bool,
    "i8": ctypes.c_int8,
    "i16": ctypes.c_int16,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "u8": ctypes.c_uint8,
    "u16": ctypes.c_uint16,
    "u32": ctypes.c_uint32,
    "u64": ctypes.c_uint64,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
}


class _Driver:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")

    def check(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(text))
            raise RuntimeError(f"{name} failed: {(text.value or b'?').decode()} ({rc})")


def _setup(drv: _Driver) -> ctypes.c_void_p:
    dev = ctypes.c_int()
    ctx = ctypes.c_void_p()
    drv.check("cuInit", 0)
    drv.check("cuDeviceGet", ctypes.byref(dev), 0)
    drv.check("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    drv.check("cuCtxSetCurrent", ctx)
    stream = ctypes.c_void_p()
    drv.check("cuStreamCreate", ctypes.byref(stream), 1)  # CU_STREAM_NON_BLOCKING
    return stream


def _alloc(drv: _Driver, nbytes: int) -> int:
    ptr = ctypes.c_uint64()
    drv.check("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1)))
    return int(ptr.value)


def _call(drv: _Driver, stream: ctypes.c_void_p, fn: Any, shape: dict[str, Any], base: Path) -> None:
    pointers = []
    for array in shape["arrays"]:
        ptr = _alloc(drv, int(array["nbytes"]))
        pointers.append(ptr)
        if array.get("input"):
            data = (base / array["input"]).read_bytes()
            buf = ctypes.create_string_buffer(data, len(data))
            drv.check("cuMemcpyHtoD_v2", ctypes.c_uint64(ptr), buf, ctypes.c_size_t(len(data)))
    args = [pointers[a["array"]] if "array" in a else a["scalar"] for a in shape["args"]]
    rc = fn(*args, stream)
    if rc != 0:
        raise RuntimeError(f"the call returned CUDA error {rc} at {shape['key']}")
    drv.check("cuStreamSynchronize", stream)
    drv.check("cuCtxSynchronize")
    for ptr in pointers:
        drv.check("cuMemFree_v2", ctypes.c_uint64(ptr))


def _generation(hold: str) -> str | None:
    """The hold's generation ("" while the file is being written), or None when the file is gone (or cannot be
    read: taken for lifted)."""
    try:
        return Path(hold).read_text().strip()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: it exists
        return True
    return True


def wait_while_held(hold: str, token: str, parent: int = 0) -> None:
    """Return once ``hold`` (a path, "" for none) does not exist; while it does, say so (see the module
    docstring). With ``parent`` (the evaluator's process id), a hold whose evaluator is gone (killed while timing:
    nobody will lift it) ends the harness instead of holding it, and the GPU memory of its sanitizer, for ever."""
    if not hold:
        return
    said = None
    looked = time.monotonic()
    while True:
        generation = _generation(hold)
        if generation is None:
            break
        if generation and generation != said:
            print(f"{HELD} {generation} {token}", flush=True)
            said = generation
        if parent and time.monotonic() - looked >= PARENT_POLL_S:
            looked = time.monotonic()
            if not _alive(parent):
                raise RuntimeError(f"held, and the evaluator that holds the GPU (process {parent}) is gone")
        time.sleep(HOLD_POLL_S)
    if said is not None:
        print(f"{RESUMED} {token}", flush=True)


def claim(queue: Path, n: int, owner: str) -> bool:
    """Take entry ``n`` of a queue folder for ``owner`` (a run's token, or the evaluator's word for a candidate it
    dropped): the ``<n>.claim`` file appears whole, holding ``owner``, for exactly one taker (a hard link fails
    when the name exists). The temporary file is the calling thread's own, under a name nobody can foresee and made
    anew (``x``: never through a link a run planted in the folder): the evaluator's threads take entries under one
    word."""
    tmp = queue / f".{n}.{owner}.{secrets.token_hex(8)}.tmp"
    with tmp.open("x") as f:
        f.write(owner)
    try:
        os.link(tmp, queue / f"{n}.claim")
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink()


def entries(queue: Path) -> list[int]:
    """The numbers of a queue folder's entries (``<n>.lib``), lowest first."""
    found = []
    for path in queue.iterdir():
        stem, dot, ext = path.name.partition(".")
        if dot and ext == "lib" and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def libraries(job: dict[str, Any], token: str) -> Iterator[tuple[int, str]]:
    """The job's libraries with their marker numbers: its list, or what it takes from its queue folder."""
    if "queue" not in job:
        yield from enumerate(str(p) for p in job["libs"])
        return
    queue, limit, taken, tried = Path(job["queue"]), int(job.get("limit") or 0), 0, set()
    while not limit or taken < limit:
        for n in entries(queue):
            if n not in tried:
                tried.add(n)
                if claim(queue, n, token):
                    break
        else:
            return
        taken += 1
        yield n, (queue / f"{n}.lib").read_text()


def run(job: dict[str, Any], base: Path) -> None:
    token = str(job["token"])
    hold = str(job.get("hold") or "")
    parent = int(job.get("parent") or 0)
    wait_while_held(hold, token, parent)
    cuda: tuple[_Driver, ctypes.c_void_p] | None = None
    called = 0
    for index, path in libraries(job, token):
        if cuda is None:  # at the first library: a run that finds its queue empty never touches CUDA
            wait_while_held(hold, token, parent)
            drv = _Driver()
            cuda = drv, _setup(drv)
        drv, stream = cuda
        called += 1
        print(f"{BEGIN} {index} {token}", flush=True)
        lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL | os.RTLD_NOW)
        fn = getattr(lib, str(job["entry"]))
        fn.argtypes = [CTYPES[c] for c in job["argtypes"]] + [ctypes.c_void_p]
        fn.restype = ctypes.c_int
        for shape in job["shapes"]:
            wait_while_held(hold, token, parent)
            _call(drv, stream, fn, shape, base)
        print(f"{END} {index} {token}", flush=True)
    print(f"{DONE} {len(job['shapes'])} libraries {called} {token}", flush=True)


def main(argv: list[str]) -> int:
    try:
        if len(argv) > 1 and argv[1] == "--probe":
            drv = _Driver()
            _setup(drv)
            drv.check("cuMemFree_v2", ctypes.c_uint64(_alloc(drv, 1024)))
            return 0
        path = Path(argv[1])
        run(json.loads(path.read_text()), path.parent)
    except Exception as exc:
        print(f"{FAILED} {exc}", file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
