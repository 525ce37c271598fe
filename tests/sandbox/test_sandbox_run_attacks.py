"""Attacks on the sandbox of a run: what a candidate's host code (a constructor run at ``dlopen``, code run during a
call) can do from inside a GPU or check worker, a sanitizer run or a profiler run, and what the evaluator then does
with what it left. Each runs the real command of a slot (:func:`~r1build.evaluate.slots.make_slot`) with a probe in
place of the worker module, or a library built by nvcc whose constructor makes the system calls itself.

The evaluator reads and writes beside its confined runs: their folders are bound read-write into their sandboxes,
and the processes go on running while it reads what they left. So besides what a run can reach (the session
keyring, user namespaces of its own, the reference's outputs), these tests plant links, FIFOs and modules where the
evaluator, or a process of it that runs unconfined, would read, write or import them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from r1build.convert import replace
from r1build.evaluate.correctness.bench import bench_verdict, plan_bench
from r1build.evaluate.devices import GpuInfo
from r1build.evaluate.process import WorkerHandle, log_tail
from r1build.evaluate.sanitizer.runner import uses_shared_memory
from r1build.evaluate.slots import SHOWN, Slot, make_slot
from r1build.judge import Job
from r1build.manifest import load_manifest
from r1build.manifest.reference import load_reference
from r1build.sandbox import Confinement, confined
from r1build.sandbox.bwrap import _no_more_namespaces
from tests.sandbox.support import BWRAP, TOOLCHAIN, needs_sandbox

pytestmark = needs_sandbox
CANARY = "R1BUILD-RUN-CANARY-7e2a"
ROOT = Path(__file__).resolve().parents[2]
GPU = GpuInfo(name="none", arch="sm_90", index=0, memory=1 << 30)

PROBE_SOURCE = r"""
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* What a candidate's host code does when its library is loaded: the keys of the session keyring it inherited, and
   a user namespace of its own (every capability in it). */
__attribute__((constructor)) static void r1build_probe(void) {
    long ring = syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* the session keyring */, 0);
    int32_t ids[64];
    long n = ring < 0 ? -1 : syscall(SYS_keyctl, 11 /* KEYCTL_READ */, ring, ids, sizeof ids);
    for (long i = 0; i < n / 4 && i < 64; i++) {
        char payload[256] = {0};
        if (syscall(SYS_keyctl, 11, (long)ids[i], payload, sizeof payload - 1) > 0) printf("key %s\n", payload);
    }
    pid_t pid = fork();
    if (pid == 0) _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : errno);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("userns %s\n", WEXITSTATUS(status) == 0 ? "made" : strerror(WEXITSTATUS(status)));
    fflush(stdout);
}

extern "C" int run(void) { return 0; }
"""


@pytest.fixture(scope="module")
def probe_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe built as a candidate's library is: by nvcc, a shared library with host code of its own."""
    if TOOLCHAIN is None:  # pragma: no cover - every development and CI machine has nvcc
        pytest.skip("nvcc not found")
    folder = tmp_path_factory.mktemp("probe")
    (folder / "probe.cu").write_text(PROBE_SOURCE)
    done = subprocess.run(
        [TOOLCHAIN.nvcc, "-shared", "-Xcompiler", "-fPIC", "-o", "probe.so", "probe.cu"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return folder / "probe.so"


def _slot(root: Path, **options: Any) -> Slot:
    return make_slot(GPU, root, sanitize=False, nvcc=None, **options)


def _confined(slot: Slot, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by the Python of the slot's worker, as its worker runs: the same sandbox, environment and
    folder."""
    command = [*slot.worker.command[:-2], "-c", script, *args]
    return subprocess.run(
        command, env=slot.worker.env, cwd=slot.workdir, capture_output=True, text=True, timeout=60, check=False
    )


PLANT_MODULES = """
import os, sys
code = f"open({sys.argv[1]!r}, 'w').write('escaped')\\n"
for folder in [".", *sys.argv[2:]]:  # its own folder, and the comparer's folder and home if it can reach them
    for name in ("r1build/__init__.py", "numpy/__init__.py", "cupy/__init__.py", "sitecustomize.py", "cupy.py"):
        try:
            os.makedirs(os.path.dirname(os.path.join(folder, name)) or ".", exist_ok=True)
            with open(os.path.join(folder, name), "w") as f:
                f.write(code)
        except OSError:
            pass
"""


def test_the_unconfined_comparer_imports_nothing_a_worker_planted(tmp_path: Path) -> None:
    """The comparer process never loads a library and runs unconfined: a module a candidate's host code wrote in
    the worker's folder must not be what it imports (Python looks first in its working directory)."""
    slot = _slot(tmp_path / "evaluate", comparer=True)
    comparer = slot.comparer
    assert comparer is not None
    escaped = tmp_path / "escaped"
    planted = _confined(slot, PLANT_MODULES, str(escaped), str(comparer.workdir), comparer.env["HOME"])
    assert planted.returncode == 0, planted.stderr
    assert (slot.workdir / "r1build" / "__init__.py").exists()  # the worker could write its own folder
    imports = "import r1build, numpy, r1build.evaluate.child.worker"
    done = subprocess.run(
        [*comparer.command[:-2], "-c", imports],
        env=comparer.env,
        cwd=comparer.workdir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert not escaped.exists(), "the unconfined comparer ran a module a confined worker wrote"
    assert done.returncode == 0, done.stderr


HELLO = """
import os, sys
from r1build.evaluate.child.protocol import write_message
for name in ("worker.log", "gpu0-worker.log", "comparer.log"):  # where the evaluator would append its output
    try:
        os.unlink(name)
    except OSError:
        pass
    os.symlink(sys.argv[1], name)
print("appended by the worker", flush=True)
write_message(int(sys.argv[-1]), {"ready": True})
"""


def test_the_workers_output_goes_through_no_link_it_planted(tmp_path: Path) -> None:
    """A worker's output goes to a log file the evaluator opens at every start and whose end it quotes when the
    worker dies: a link planted in the worker's folder under that name must not make it append to (``~/.bashrc``)
    or quote (``~/.ssh/id_ed25519``) a file of its user."""
    secret = tmp_path / "home" / ".bashrc"
    secret.parent.mkdir()
    secret.write_text(f"{CANARY}\n")
    slot = _slot(tmp_path / "evaluate")
    command = [*slot.worker.command[:-2], "-c", HELLO, str(secret)]
    handle = WorkerHandle(command, slot.worker.env, slot.workdir, log_path=slot.worker.log_path, start_timeout_s=60)
    for _ in range(2):  # the second start opens the log again, after the first planted its links
        assert handle.start() == {"ready": True}
        handle.kill()
    assert secret.read_text() == f"{CANARY}\n"
    assert CANARY not in log_tail(handle.log_path)
    assert "appended by the worker" in log_tail(handle.log_path)


def test_a_log_is_read_from_its_end_and_never_from_a_link_or_a_fifo(tmp_path: Path) -> None:
    """The evaluator quotes a dead worker's log: only its end (a worker can print a terabyte), never a FIFO it would
    wait on for good, never the file a link names."""
    huge = tmp_path / "huge.log"
    with huge.open("wb") as f:
        f.truncate(1 << 36)  # 64 GiB, sparse
        f.seek((1 << 36) - 5)
        f.write(b"tail\n")
    assert log_tail(huge, 100).endswith("tail")
    secret = tmp_path / "secret"
    secret.write_text(CANARY)
    (tmp_path / "link.log").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo.log")
    said = _within_seconds(lambda: [log_tail(tmp_path / "link.log"), log_tail(tmp_path / "fifo.log")])
    assert said == ["", ""]


def _within_seconds(fn: Callable[[], Any], seconds: float = 20.0) -> Any:
    """``fn()``, failing the test where it does not return in time (a read of a FIFO blocks for good)."""
    done: Future[Any] = Future()
    threading.Thread(target=lambda: done.set_result(fn()), daemon=True).start()
    return done.result(timeout=seconds)


def _silu_plan(folder: Path) -> tuple[Any, Any]:
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = replace(manifest.kernel("silu_mul"), bench_shapes=[{"n": 64}])
    return spec, plan_bench(spec, load_reference(manifest.root, spec.reference), 50 << 20, folder)


def test_outputs_are_read_only_from_beneath_the_workers_folder(tmp_path: Path) -> None:
    """The worker names the files of what the timed calls left, in a folder it writes: a path outside it, a link
    planted in it (to a file or in place of a folder) or a FIFO is judged a missing output, and no byte of the file
    it names reaches the verdict."""
    spec, plan = _silu_plan(tmp_path / "in")
    shape = plan.shapes[0]
    secret = tmp_path / "secret.bin"
    np.full(64, 1234.5678, dtype=np.float32).tofile(secret)  # the values a verdict would quote
    work = tmp_path / "work"
    (work / "bench-out" / "lib-1").mkdir(parents=True)
    (work / "bench-out" / "lib-1" / "link.bin").symlink_to(secret)
    os.mkfifo(work / "bench-out" / "lib-1" / "fifo.bin")
    (work / "elsewhere").symlink_to(tmp_path)  # a folder swapped for a link
    names = [str(secret), str(work / "bench-out/lib-1/link.bin"), str(work / "bench-out/lib-1/fifo.bin")]
    names.append(str(work / "elsewhere" / "secret.bin"))
    for name in names:
        reply = {"outputs": [[None, None, name] for _ in shape.sets], "tweak_outputs": [None, None, name]}
        verdict = _within_seconds(lambda r=reply: bench_verdict(spec, plan, [r], within=work))  # type: ignore[misc]
        assert verdict is not None and verdict.status == "incorrect", name
        assert "could not be read" in verdict.detail and "1234" not in verdict.detail, verdict.detail


def test_a_run_sees_of_the_evaluators_folder_only_what_it_needs(tmp_path: Path) -> None:
    """A worker reads the libraries and the benchmark inputs; not the reference's outputs (a candidate that read
    them could copy the answers at the benchmark shapes), the logs, the comparer's folder, the evaluator's private
    cache, nor the folder of what the sanitizer runs are given, which it may not change either."""
    from r1build.evaluate.compare_pool import ComparePool
    from r1build.evaluate.timing.measure import Timer

    root = tmp_path / "evaluate"
    slot = _slot(root, comparer=True)
    assert slot.given is not None and slot.quiet.hold_file is not None
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = replace(manifest.kernel("silu_mul"), bench_shapes=[{"n": 64}])

    def now(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(fn(*args, **kwargs))
        return done

    timer = Timer(
        cache=lambda: None,  # type: ignore[arg-type,return-value]
        submit=now,
        note=lambda *_: None,
        count=lambda *_: None,
        root=root,
        seed=0,
        call_timeout_s=10,
        timeout_s=10,
        budget_s=1,
        compare_pool=ComparePool(0),
    )
    plan = timer.bench_plan(Job(manifest, spec, "sm_90", []), "sm_90", slot).result()
    inputs = [f for s in plan.shapes[0].sets for f in s.files if f is not None]
    expected = [f for s in plan.shapes[0].sets for f in s.expected_files.values()]
    (root / "cache").mkdir()
    (root / "cache" / "decisions.db").write_text(CANARY)
    log = slot.worker.log_path
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(CANARY)
    comparer = slot.comparer
    assert comparer is not None and inputs and expected
    hidden = [*expected, str(root / "cache" / "decisions.db"), str(log), str(comparer.workdir)]
    script = """
import json, os, sys
seen = {}
for path in json.loads(sys.argv[1]):
    seen[path] = os.access(path, os.R_OK)
for path in json.loads(sys.argv[2]):
    try:
        os.symlink("/", path)
        seen[path] = True
    except OSError:
        seen[path] = False
print(json.dumps(seen))
"""
    planted = [str(slot.given / "planted"), str(slot.quiet.hold_file)]
    done = _confined(slot, script, json.dumps([*inputs, *hidden]), json.dumps(planted))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert [seen[p] for p in inputs] == [True] * len(inputs)
    assert {p: seen[p] for p in [*hidden, *planted]} == dict.fromkeys([*hidden, *planted], False)
    assert all(not Path(p).is_relative_to(root / part) for p in expected for part in SHOWN)


FAKE_SANITIZER = """#!/bin/sh
for arg; do job=$arg; done
folder=$(dirname "$job")
ln -s "$CANARY_FILE" "$folder/in-0-gate.bin" 2>/dev/null && echo "planted an input"
ln -sf "$CANARY_FILE" "$job" 2>/dev/null && echo "planted the job"
echo held > "$HOLD_FILE" 2>/dev/null && echo "planted the hold"
mkfifo "$folder/queue-memcheck/0.claim" && echo "made a claim a FIFO"
"""


def test_a_sanitizer_run_changes_nothing_it_was_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sanitizer run (here compute-sanitizer itself stands in for the candidate's code) may claim entries of its
    queue and nothing else: it cannot plant a link where the evaluator writes a job file or an input, replace a job
    file, nor make the hold file exist (a run held for good is never stopped); and what it leaves in its queue (a
    FIFO in place of a claim) does not stop the evaluator."""
    fake = tmp_path / "tools" / "compute-sanitizer"
    fake.parent.mkdir()
    fake.write_text(FAKE_SANITIZER)
    fake.chmod(0o755)
    monkeypatch.setenv("R1BUILD_COMPUTE_SANITIZER", str(fake))
    secret = tmp_path / "secret"
    secret.write_text(CANARY)
    slot = make_slot(GPU, tmp_path / "evaluate", sanitize=True, nvcc=None)
    runner, hold = slot.sanitizer, slot.quiet.hold_file
    assert runner is not None and hold is not None and slot.given is not None
    runner.env.update(CANARY_FILE=str(secret), HOLD_FILE=str(hold))
    folder = slot.given / "kernel"
    (folder / "queue-memcheck").mkdir(parents=True)
    job_file = folder / "run-memcheck-1.json"
    job = {"libs": [], "entry": "run", "argtypes": [], "shapes": [], "token": "t0k", "hold": str(hold)}
    job_file.write_text(json.dumps({**job, "queue": str(folder / "queue-memcheck"), "limit": 1}))
    found = _within_seconds(lambda: runner.run("memcheck", job_file), 60)
    assert found.claimed == ()
    assert json.loads(job_file.read_text())["token"] == "t0k" and not job_file.is_symlink()
    assert not (folder / "in-0-gate.bin").exists() and not hold.exists()


def test_cuobjdump_reads_a_candidates_library_confined(tmp_path: Path) -> None:
    """Before racecheck, cuobjdump parses a candidate's library (hostile input to its parsers, as an object is to
    binutils'): where the sanitizer runs are confined, so is it, with the library's folder only."""
    secret = tmp_path / "secret"
    secret.write_text("LDS\n")  # what makes the library look as if it used shared memory
    tool = tmp_path / "tools" / "cuobjdump"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\ncat {secret}\necho Function\n")
    tool.chmod(0o755)
    library = tmp_path / "build" / "candidate.so"
    library.parent.mkdir()
    library.write_bytes(b"\x7fELF")
    assert uses_shared_memory(library, str(tool))  # the user's own library: as this process
    assert not uses_shared_memory(library, str(tool), confined())


def test_a_candidates_library_that_lists_without_end_gets_racecheck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuobjdump's SASS of a candidate's library came back through a pipe without a cap (a library of the compile's
    file size lists as gigabytes into the evaluator); it is held to the readers' listing limit, and a listing past
    it counts as using shared memory (racecheck runs) rather than as none."""
    from r1build.gate import symbols

    monkeypatch.setattr(symbols, "LISTING_LIMIT", 1 << 20)
    tool = tmp_path / "tools" / "cuobjdump"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho Function\nexec head -c 50000000 /dev/zero\n")
    tool.chmod(0o755)
    library = tmp_path / "build" / "candidate.so"
    library.parent.mkdir()
    library.write_bytes(b"\x7fELF")
    assert uses_shared_memory(library, str(tool), confined())
    assert sorted(p.name for p in library.parent.iterdir()) == ["candidate.so"]  # its listing file removed


KEYS = """
import ctypes, json, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
number = {"x86_64": 250, "aarch64": 219}[sys.argv[1]]
if libc.syscall(ctypes.c_long(number), ctypes.c_long(1), b"r1build-test-session") < 0:  # KEYCTL_JOIN_SESSION_KEYRING
    sys.exit(77)
payload = sys.argv[2].encode()
add_key = {"x86_64": 248, "aarch64": 217}[sys.argv[1]]
assert libc.syscall(ctypes.c_long(add_key), b"user", b"r1build-canary", payload, len(payload), ctypes.c_long(-3)) > 0
for command, cwd, env in json.loads(sys.argv[3]):
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    print(done.stdout + done.stderr)
"""


def test_a_run_reads_no_key_of_the_evaluators_session_keyring(tmp_path: Path, probe_library: Path) -> None:
    """The session keyring is inherited and no namespace hides it: a key the evaluator's session holds (a Kerberos
    ticket, a token stored with ``keyctl``) must not be readable by a candidate's constructor, in a worker (loaded by
    ctypes) or in a run without Python (a profiler run of a harness: here ``/bin/true`` with the library preloaded)."""
    machine = os.uname().machine
    if machine not in ("x86_64", "aarch64"):  # pragma: no cover - the machines r1build runs on
        pytest.skip(f"no keyctl system call number for {machine} here")
    slot = _slot(tmp_path / "evaluate")
    library = tmp_path / "evaluate" / "build" / "probe.so"
    library.write_bytes(probe_library.read_bytes())
    load = [*slot.worker.command[:-2], "-c", f"import ctypes; ctypes.CDLL({str(library)!r})"]
    work = tmp_path / "profile"
    work.mkdir()
    (work / "probe.so").write_bytes(probe_library.read_bytes())
    preload = ["/bin/sh", "-c", "LD_PRELOAD=./probe.so /bin/true"]
    box = confined()
    profile = Confinement(workdir=work, gpu=True)
    runs = [
        [load, str(slot.workdir), slot.worker.env],
        [box.command(preload, profile), str(work), box.environment(os.environ, profile)],
    ]
    done = subprocess.run(
        [sys.executable, "-c", KEYS, machine, CANARY, json.dumps(runs)], capture_output=True, text=True, check=False
    )
    if done.returncode == 77:
        pytest.skip("no session keyring can be joined here")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("userns") == 2, done.stdout  # both constructors ran
    assert CANARY not in done.stdout


def test_a_run_makes_no_user_namespace(tmp_path: Path, probe_library: Path) -> None:
    """In a user namespace of its own a candidate's code would hold every capability (mounts, the netfilter tables
    of a network namespace of its own): the kernel's widest surface for a privilege escalation."""
    assert BWRAP is not None
    if not _no_more_namespaces(BWRAP):  # pragma: no cover - bubblewrap before 0.8
        pytest.skip("this bubblewrap cannot forbid user namespaces")
    slot = _slot(tmp_path / "evaluate")
    library = tmp_path / "evaluate" / "build" / "probe.so"
    library.write_bytes(probe_library.read_bytes())
    done = _confined(slot, f"import ctypes; ctypes.CDLL({str(library)!r})")
    assert done.returncode == 0, done.stderr
    assert "userns" in done.stdout and "userns made" not in done.stdout, done.stdout


MEMORY = """
import json, os
sizes = {p: os.statvfs(p).f_blocks * os.statvfs(p).f_frsize for p in ("/tmp", "/dev/shm")}
written = []
for path in ("/r1build-fill", "/dev/r1build-fill"):
    try:
        with open(path, "w") as f:
            f.write("x")
        written.append(path)
    except OSError:
        pass
print(json.dumps({"sizes": sizes, "written": written}))
"""


def test_a_run_cannot_fill_the_machines_memory_through_its_memory_folders(tmp_path: Path) -> None:
    """``/tmp``, ``/dev/shm``, ``/dev`` and the sandbox's root are memory (tmpfs) that no process owns: written
    without end they take the machine's memory and the out-of-memory killer picks the evaluator, not the
    candidate. The two a run may need are sized, the others read-only."""
    from r1build.sandbox.bwrap import TMPFS_SIZE, _sized_memory

    assert BWRAP is not None
    if not _sized_memory(BWRAP):  # pragma: no cover - bubblewrap before 0.5
        pytest.skip("this bubblewrap cannot size its memory folders")
    done = _confined(_slot(tmp_path / "evaluate"), MEMORY)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["written"] == [] and all(0 < size <= TMPFS_SIZE for size in found["sizes"].values()), found


def test_a_timings_folder_is_made_and_removed_through_no_link_a_worker_planted(tmp_path: Path) -> None:
    """The parent makes ``bench-out/<timing>`` in the worker's folder and removes it after the judging; a worker that
    put a link to a folder of the parent's user in place of ``bench-out`` had the folder made there, and a removal
    that followed it would remove a folder there."""
    from r1build.sandbox.files import make_beneath, remove_beneath

    worker, home = tmp_path / "root" / "gpu0", tmp_path / "home"
    worker.mkdir(parents=True)
    (home / "t-1").mkdir(parents=True)
    (home / "t-1" / "keep").write_text("the user's file")
    (worker / "bench-out").symlink_to(home)
    with pytest.raises(OSError):
        make_beneath(worker, "bench-out/t-2")
    assert not (home / "t-2").exists()
    remove_beneath(worker, worker / "bench-out" / "t-1", tmp_path / "root" / "trash")
    assert (home / "t-1" / "keep").read_text() == "the user's file"
    remove_beneath(worker, "bench-out", tmp_path / "root" / "trash")  # the link itself goes, not what it names
    assert not (worker / "bench-out").is_symlink() and (home / "t-1" / "keep").exists()

    made = make_beneath(worker, worker / "bench-out" / "t-3")
    (made / "out.bin").write_bytes(b"x" * 10)
    assert made.is_dir() and made == worker / "bench-out" / "t-3"
    remove_beneath(worker, made, tmp_path / "root" / "trash")
    assert not made.exists() and list((tmp_path / "root" / "trash").iterdir()) == []
