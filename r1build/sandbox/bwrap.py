"""Bubblewrap (``bwrap``): the sandbox command line for one :class:`~.policy.Confinement`.

A confined process gets a new, empty root with only what it needs bound into it: ``/usr`` (programs, libraries,
headers; the toolkit when it is under ``/usr/local``) and the ``/bin``, ``/lib``... links or folders of the host,
read-only; the dynamic loader's cache; a fresh ``/tmp`` and ``/dev/shm`` of a size, a ``/proc`` of its own PID
namespace and a minimal ``/dev``; then the confinement's own folders; then its root and ``/dev`` made read-only.
Folders are bound shallowest first, and a secret folder (the home folder, the project) that lies inside a bound one
is covered by an empty one before anything deeper is bound, so binding a virtual environment inside the project
shows the environment and not the project. The command starts by joining a session keyring of its own.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..convert import record
from ..toolchain.runner import run_process
from .environment import confined_environment

if TYPE_CHECKING:
    from .policy import Confinement, SandboxKind

__all__ = ["Bubblewrap", "find_bwrap", "probe"]

_NAMESPACES = ("--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL")
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_LOADER = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
_SYSTEM_ROOTS = (Path("/"), Path("/usr"), Path("/tmp"), Path("/dev"), Path("/proc"), Path("/sys"), Path("/etc"))

Op = Literal["ro", "rw", "dev", "mask"]


def find_bwrap() -> str | None:
    """The ``bwrap`` on ``PATH`` (or Debian's ``/usr/bin/bwrap``), None when there is none."""
    found = shutil.which("bwrap")
    if found is None and os.access("/usr/bin/bwrap", os.X_OK):
        found = "/usr/bin/bwrap"
    return found


def _trial(exe: str, options: Sequence[str] = (), after: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """``true`` run in a sandbox of ``exe``, with ``options`` before its system folders and ``after`` them (raises
    what starting it raises)."""
    argv = [exe, *_NAMESPACES, *options, *_system_binds(), "--proc", "/proc", "--dev", "/dev", *after, "--", "true"]
    return run_process(argv, timeout_s=30)


def _works(exe: str, options: Sequence[str] = (), after: Sequence[str] = ()) -> bool:
    """Whether :func:`_trial` of these options succeeds here."""
    try:
        return _trial(exe, options, after).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.lru_cache(maxsize=4)
def probe(exe: str) -> str | None:
    """None when ``exe`` can build a sandbox here (it runs ``true`` in one), else why not, in a few words."""
    try:
        done = _trial(exe)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{exe} could not be run ({exc})"
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[:300]
        return f"{exe} cannot make a sandbox here ({said or f'exit code {done.returncode}'})"
    return None


@functools.lru_cache(maxsize=4)
def _no_more_namespaces(exe: str) -> tuple[str, ...]:
    """The options that keep a confined process from making user namespaces of its own, where ``exe`` has them
    (bubblewrap 0.8 and later, with user namespaces): in one it would hold every capability (mount, the netfilter
    tables of a network namespace of its own), the kernel's widest surface for a privilege escalation; none where
    they do not work here (an older or setuid bubblewrap)."""
    options = ("--unshare-user", "--disable-userns")
    return options if _works(exe, options) else ()


TMPFS_SIZE = 1 << 30
"""The most a confined process may write to its ``/tmp`` and its ``/dev/shm``, in bytes. They are memory (tmpfs),
and what is written there belongs to no process the kernel's out-of-memory killer could pick: without a size, a
candidate writing into them takes the machine's memory until the evaluator itself is killed. (Its home and
``TMPDIR`` are its folder, on disk: ``/tmp`` sees little use.)"""
COVER_SIZE = 1 << 20
"""The size of the empty folders that cover secret folders (:attr:`Bubblewrap.secrets`): they hold nothing."""


@functools.lru_cache(maxsize=4)
def _sized_memory(exe: str) -> bool:
    """Whether ``exe`` can give its memory folders a size (bubblewrap 0.5 and later, ``--size``): then ``/tmp`` and
    ``/dev/shm`` get :data:`TMPFS_SIZE`, the covers :data:`COVER_SIZE`, and the sandbox's root and ``/dev``, memory
    too, are made read-only once everything is bound (the bound folders keep their own modes)."""
    sized = ("--size", str(COVER_SIZE), "--tmpfs", "/tmp", "--remount-ro", "/dev", "--remount-ro", "/")
    return _works(exe, after=sized)


_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "ppc64": 271, "s390x": 280}
_OWN_KEYRING = f"""
import ctypes, errno, os, signal, sys
number = {_KEYCTL.get(os.uname().machine, 0)}
for name in ("SIGPIPE", "SIGXFSZ"):  # as a program started by subprocess gets them, not as Python set them
    signal.signal(getattr(signal, name), signal.SIG_DFL)
libc = ctypes.CDLL(None, use_errno=True)
if number and libc.syscall(ctypes.c_long(number), ctypes.c_long(1), None) < 0:  # KEYCTL_JOIN_SESSION_KEYRING
    if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):  # where keyctl is refused, it is refused inside too
        sys.exit(f"r1build: no session keyring of its own for the sandbox: {{os.strerror(ctypes.get_errno())}}")
os.execvp(sys.argv[1], sys.argv[1:])
"""
"""Joins a new, empty session keyring (``keyctl``'s anonymous one) and runs its arguments: what runs confined can
read no key of the keyring this process was started with (``KEYCTL_READ`` of the session keyring's keys works
across user namespaces)."""


def _system_binds() -> list[str]:
    """``/usr`` and the host's top-level links or folders into it, read-only."""
    out = ["--ro-bind", "/usr", "/usr"]
    for place in _SYSTEM_LINKS:
        if Path(place).is_symlink():
            out += ["--symlink", str(Path(place).readlink()), place]
        elif Path(place).is_dir():
            out += ["--ro-bind", place, place]
    for place in _LOADER:
        out += ["--ro-bind-try", place, place]
    return out


def _gpu_nodes() -> list[str]:
    """The NVIDIA device nodes of this host (``/dev/nvidia0``, ``nvidiactl``, ``nvidia-uvm``, ``nvidia-caps/*``)."""
    dev = Path("/dev")
    return sorted(str(p) for p in [*dev.glob("nvidia*"), *dev.glob("nvidia-caps/*")] if not p.is_dir())


def _inside(child: Path, parent: Path) -> bool:
    return child != parent and child.is_relative_to(parent)


@record(frozen=True)
class Bubblewrap:
    """The Bubblewrap sandbox: ``exe``, the Python places a confined worker needs, and the secret folders never
    shown."""

    exe: str
    python: tuple[Path, ...] = ()
    """What :func:`~.policy.python_places` found: prefixes, site-packages, r1build's package folder."""
    secrets: tuple[Path, ...] = ()
    """Folders covered by an empty one wherever a folder above them is bound (home, the project)."""

    @property
    def kind(self) -> SandboxKind:
        return "bwrap"

    def command(self, argv: Sequence[str], confinement: Confinement) -> list[str]:
        """``argv`` inside a new sandbox for ``confinement``, run in its working directory; :class:`FileNotFoundError`
        (as starting it unconfined would raise) where ``argv[0]`` is no program here."""
        if shutil.which(argv[0], path=os.environ.get("PATH", os.defpath)) is None:
            raise FileNotFoundError(errno.ENOENT, "no such program", argv[0])
        # a session keyring of its own (the one inherited from this process may hold its user's keys, and no
        # namespace hides it): joined inside by the Python the sandbox shows, else outside by this one, before bwrap
        launch = [sys.executable, "-I", "-S", "-c", _OWN_KEYRING]
        inside, outside = (launch, []) if confinement.python else ([], launch)
        out = [*outside, self.exe, *_NAMESPACES, *_no_more_namespaces(self.exe), *_system_binds()]
        out += ["--proc", "/proc", "--dev", "/dev"]
        sized = _sized_memory(self.exe)
        out += ["--size", str(TMPFS_SIZE), "--tmpfs", "/dev/shm"] if sized else []
        for op, place in self._places(confinement):
            if op == "mask":
                size = TMPFS_SIZE if place == Path("/tmp") else COVER_SIZE
                out += [*(["--size", str(size)] if sized else []), "--tmpfs", str(place)]
            elif op == "dev":
                out += ["--dev-bind-try", str(place), str(place)]
            else:
                out += ["--ro-bind" if op == "ro" else "--bind", str(place), str(place)]
        out += ["--remount-ro", "/dev", "--remount-ro", "/"] if sized else []
        return [*out, "--chdir", str(confinement.workdir), "--", *inside, *argv]

    def environment(self, base: Mapping[str, str], confinement: Confinement) -> dict[str, str]:
        """:func:`~.environment.confined_environment`, its search paths (``PATH``, ``LD_LIBRARY_PATH``) holding only
        folders the sandbox shows: a host folder it hides is of no use inside, and its name (a home folder, a
        project) is the host's business, not something a compile may read from its environment into an object."""
        env = confined_environment(base, confinement)
        shown: list[tuple[Op, Path]] = [
            ("ro", Path("/usr")),
            *(("ro", Path(p)) for p in _SYSTEM_LINKS if Path(p).exists()),
            *self._places(confinement),
        ]
        for name, fallback in (("PATH", "/usr/bin:/bin"), ("LD_LIBRARY_PATH", "")):
            if name in env:
                kept = [e for e in env[name].split(os.pathsep) if _shown(e, shown)]
                env[name] = os.pathsep.join(dict.fromkeys(kept)) or fallback
                if not env[name]:
                    del env[name]
        return env

    def _places(self, confinement: Confinement) -> list[tuple[Op, Path]]:
        """What to bind or cover, shallowest first (a place deeper than a covered secret is bound after it)."""
        places: dict[Path, Op] = {}
        for place in self._readable(confinement):
            places.setdefault(place, "ro")
        for place in (*confinement.writable, confinement.workdir):
            places[_absolute(place)] = "rw"
        if confinement.gpu:
            places.update({Path(node): "dev" for node in _gpu_nodes()})
        bound = [p for p, op in places.items() if op in ("ro", "rw")] + [Path("/usr")]
        for secret in self.secrets:
            shown = secret not in places and any(_inside(secret, p) for p in bound)
            if shown and not any(secret == root or _inside(root, secret) for root in _SYSTEM_ROOTS):
                places[secret] = "mask"
        for place, op in list(places.items()):  # a read-only place inside another, with no cover between, is shown
            if op == "ro" and any(
                _inside(place, up) and places[up] == "ro" and not _covered_between(places, up, place) for up in places
            ):
                del places[place]
        order = {"mask": 0, "ro": 1, "rw": 1, "dev": 1}
        ranked = sorted(places.items(), key=lambda item: (len(item[0].parts), order[item[1]], str(item[0])))
        return [("mask", Path("/tmp")), *((op, place) for place, op in ranked)]

    def _readable(self, confinement: Confinement) -> list[Path]:
        """The confinement's read-only places, and those of its toolkit and Python: never a place that is or holds a
        secret folder (a wrapper script in the home folder shows its own folder, not the home)."""
        found: list[Path] = []
        if confinement.toolkit:  # its folder, and the toolkit's root where it sits in one (<root>/bin/nvcc)
            tool = Path(confinement.toolkit)
            found += [tool.parent, tool.resolve().parent]
            found += [tool.resolve().parents[1]] if tool.resolve().parent.name == "bin" else []
        if confinement.python:
            found += [*self.python, Path(__file__).resolve().parents[1]]
        if confinement.gpu:
            found.append(Path("/sys"))
        found = [p for p in found if not any(s == p or _inside(s, p) for s in self.secrets)]
        out = [_absolute(p) for p in confinement.readable] + found
        return [p for p in out if p.exists() and not _under_usr(p)]


def _shown(entry: str, places: Sequence[tuple[Op, Path]]) -> bool:
    """Whether the absolute folder ``entry`` lies in a place bound into the sandbox and not under a cover deeper
    than that place (relative entries, which name a folder by the working directory, are never kept)."""
    if not entry or not Path(entry).is_absolute():
        return False
    path = _absolute(Path(entry))
    holding = [(place, op) for op, place in places if path == place or _inside(path, place)]
    if not holding:
        return False
    _, op = max(holding, key=lambda item: (len(item[0].parts), item[1] == "mask"))
    return op != "mask"


def _absolute(place: Path) -> Path:
    """``place`` made absolute without following links (the path a program inside names it by)."""
    return Path(os.path.abspath(place))  # noqa: PTH100


def _covered_between(places: Mapping[Path, Op], up: Path, down: Path) -> bool:
    return any(op == "mask" and _inside(p, up) and (p == down or _inside(down, p)) for p, op in places.items())


def _under_usr(place: Path) -> bool:
    return place == Path("/usr") or _inside(place, Path("/usr"))
