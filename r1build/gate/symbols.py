"""What a candidate's host object may reach: the symbol allowlist of the static gate.

nvcc's ``-c`` object holds the candidate's host code (the launcher, kernel stubs, fatbin registration) and the
device code as an embedded fatbin. Device code can only call into the GPU (``printf``, ``malloc`` and ``assert``
on the device are device-side and never appear as host symbols), so what a candidate can do to the machine it is
built and run on is decided by the host object's *undefined* symbols: the functions it calls that someone else
defines. The gate reads them with ``nm -u`` and allows, by the rules below, only what a kernel launcher needs.
Everything else (processes, files, sockets, dynamic loading, the environment, threads, signals, time) rejects
the candidate, naming the symbols.

The CUDA runtime is held to the candidate contract call by call: launches on the stream it is given, error
queries, its own kernels' attributes, occupancy and device-attribute queries, and copies and sets enqueued on that
stream. Nothing that allocates, synchronizes, creates streams or events, runs host functions from the stream,
changes device limits or stream attributes (they outlive the call and change other kernels' times), asks whether
the stream is being captured, or reaches the driver, other devices or other processes; nor the per-thread default
stream variants (``..._ptsz``/``..._ptds``). Each denied call is named with why and what to do instead, since the
reason is fed back to the model that wrote the candidate; a call no rule knows is denied with the list of what is
allowed. Only what the object calls directly is visible here; what a kernel does at run time is the GPU
evaluator's to check.

Two more checks guard the contract rather than the machine:

* **exports**: a variant links next to others into one library, so the only strong global it may define is its
  ``extern "C"`` entry point. Kernels and helpers belong in an anonymous namespace or are ``static`` (nvcc names
  the stubs of such kernels ``..._GLOBAL__N_...``, which is allowed). Weak definitions are merged by the linker:
  harmless for the standard library's and CUDA headers' inline functions (identical in every variant), silently
  wrong for the candidate's own (``inline dim3 grid(int n) { return (n + TILE - 1) / TILE; }`` would run with
  one variant's ``TILE`` in every variant), so those are rejected as well.
* **raw system calls**: inline assembly can reach the kernel without any symbol, so the host code's disassembly
  must not contain ``syscall``, ``sysenter`` or ``int 0x80`` (``svc`` on aarch64). On x86-64, where an
  instruction can hide inside another (a jump into the immediate of a ``mov`` whose bytes are ``0f 05``), the
  raw bytes of every executable section are searched for those encodings as well.
* **load-time code**: nothing of the candidate's may run when its library is loaded or unloaded (constructors,
  destructors, globals initialized by running code: ``.init_array``, ``.preinit_array``, ``.ctors``,
  ``.fini_array``, ``.dtors``, ``.init``, ``.fini``; resolvers of indirect functions), only nvcc's own fatbin
  registration: such code runs in every
  process that loads the library, whether or not the kernel is called, outside every check of the call.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ToolchainError
from ..sandbox import run_process

__all__ = ["ALLOWLIST_VERSION", "SymbolCheck", "check_object", "denied_reason", "is_allowed"]

ALLOWLIST_VERSION = 5
"""Part of the gate's cache key: bump it whenever a rule below changes, so old verdicts stop matching (3: the raw
bytes of x86-64 executable sections are searched for system-call encodings; 4: no host code runs at load or
unload; _GLOBAL_OFFSET_TABLE_ allowed, which -fPIC compiles of ordinary code reference; 5: ifunc resolvers count
as load-time code)."""

# -- the allowlist -----------------------------------------------------------------------------------------
# The CUDA runtime, call by call: what a launcher needs to enqueue work on the stream it is given, and nothing
# that allocates, synchronizes, makes streams or events, runs host code from the stream, changes device or
# stream state that outlives the call, or reaches the driver, other devices or other processes. Each rule:
# (pattern matched against the whole name, why a launcher needs it).
_CUDA_ALLOWED: tuple[tuple[str, str], ...] = (
    (
        r"cudaLaunchKernel|cudaLaunchKernelExC|cudaLaunchCooperativeKernel",
        "launching a kernel on the given stream (<<<>>>, cudaLaunchKernelEx for clusters, cooperative launches)",
    ),
    (
        r"__cuda(?:LaunchKernel|PushCallConfiguration|PopCallConfiguration|GetKernel|InitModule"
        r"|RegisterFatBinary|RegisterFatBinaryEnd|UnregisterFatBinary|RegisterFunction|RegisterVar"
        r"|RegisterLinkedBinary\w*)",
        "fatbin registration and <<<>>> launch glue generated by nvcc",
    ),
    (r"cudaGetLastError|cudaPeekAtLastError|cudaGetErrorString|cudaGetErrorName", "error reporting"),
    (
        r"cudaFuncSetAttribute|cudaFuncGetAttributes|cudaFuncSetCacheConfig|cudaFuncSetSharedMemConfig",
        "the candidate's own kernels' attributes (dynamic shared memory, carveout)",
    ),
    (
        r"cudaOccupancy(?:MaxActiveBlocksPerMultiprocessor(?:WithFlags)?|AvailableDynamicSMemPerBlock"
        r"|MaxActiveClusters|MaxPotentialClusterSize)",
        "occupancy queries for grid sizing (cudaOccupancyMaxPotentialBlockSize is an inline template over these)",
    ),
    (
        r"cudaGetDevice|cudaDeviceGetAttribute|cudaGetDeviceProperties(?:_v2)?",
        "device queries for grid sizing (the SM count)",
    ),
    (
        r"cudaMem(?:set|cpy)(?:2D)?Async|cudaMemcpy(?:To|From)SymbolAsync|cudaGetSymbolAddress|cudaGetSymbolSize",
        "copies and sets enqueued on the given stream, and the addresses of the candidate's __device__ tables",
    ),
)

# Everything else of the CUDA runtime and driver is denied; these classes say why, and what to do instead.
# The first matching rule names the reason (the per-thread-stream variants come first: their base names may be
# allowed). These sentences are fed back to the model that wrote the candidate.
_CUDA_DENIED: tuple[tuple[str, str], ...] = (
    (
        r"\w+_pt(?:sz|ds)",
        "the per-thread default stream variant (--default-stream per-thread or CUDA_API_PER_THREAD_DEFAULT_STREAM): "
        "drop that flag or macro and pass the stream argument to every launch and async call",
    ),
    (
        r"cudaMemcpy(?:3D)?Peer\w*|cudaIpc\w*|cudaDevice(?:Enable|Disable|Can)\w*Peer\w*|cudaDeviceGetP2P\w*"
        r"|cudaImportExternal\w*|cudaDestroyExternal\w*|cudaExternalMemory\w*|cuda(?:Signal|Wait)ExternalSemaphores\w*"
        r"|cudaDeviceFlushGPUDirectRDMAWrites|cudaDeviceGetNvSciSyncAttributes|cudaDevice(?:Unr|R)egisterAsyncNotification"
        r"|cudaGraphics\w*|cudaGL\w*|cudaEGL\w*|cudaVDPAU\w*",
        "reaches other devices, processes or graphics APIs; a candidate works only on the buffers it is given, on "
        "the current device",
    ),
    (
        r"cudaMalloc\w*|cudaFree\w*|cudaHostAlloc|cudaHost(?:Unr|R)egister|cudaHostGet\w*|cudaMemPool\w*"
        r"|cuda\w*MemPool|cudaArray\w*|cudaMipmappedArray\w*|cudaGetMipmappedArrayLevel|__cudaRegisterManagedVar"
        r"|cudaCreate(?:Texture|Surface)Object|cudaDestroy(?:Texture|Surface)Object",
        "allocates or frees memory (or a __managed__ variable, texture or surface) inside the call: the contract "
        "forbids allocation (it synchronizes or breaks graph capture, and its cost escapes the timer); keep scratch "
        "in registers or shared memory, or in a fixed-size __device__ array",
    ),
    (
        r"cudaMemcpy\w*|cudaMemset\w*",
        "a copy or set outside the allowlist (the synchronous forms run on the default stream and wait for the "
        "GPU; array, 3D and batch forms are not needed): use cudaMemcpyAsync or cudaMemsetAsync (or their 2D and "
        "symbol forms) with the stream argument, or do it in a kernel",
    ),
    (
        r"cuda(?:Device|Stream|Thread|Event)Synchronize|cuda(?:Stream|Event)Query",
        "waits for or polls the GPU from the host: the launcher must return as soon as its work is enqueued; "
        "kernels on the same stream already run in order, and a grid-wide barrier needs a cooperative launch "
        "(cudaLaunchCooperativeKernel with grid.sync()) or a second kernel",
    ),
    (
        r"cudaStreamCreate\w*|cudaStreamDestroy|cudaStreamWaitEvent|cudaEvent\w*",
        "creates, destroys or joins streams or events: all work goes on the stream argument, in order "
        "(<<<grid, block, smem, stream>>>); there is nothing to join or time inside the call",
    ),
    (
        r"cudaLaunchHostFunc|cudaStreamAddCallback",
        "runs host code from the stream: do the work in kernels on the stream",
    ),
    (
        r"cudaDevice(?:Set|Get)(?:Limit|CacheConfig|SharedMemConfig|GraphMemAttribute)|cudaDeviceGraphMemTrim"
        r"|cudaCtxResetPersistingL2Cache|cuda(?:Set|Get)DeviceFlags|cudaDeviceGetStreamPriorityRange",
        "reads or changes device-wide limits and configuration (persisting L2, stack and heap sizes, cache "
        "config), which outlive the call and change other kernels' behaviour and timing: set per-kernel options "
        "with cudaFuncSetAttribute or cudaFuncSetCacheConfig instead",
    ),
    (
        r"cudaStream(?:Set|Get|Copy)Attributes?|cudaStreamAttachMemAsync|cudaStreamGet(?:Flags|Priority|Id|Device)",
        "reads or changes attributes of the caller's stream (access-policy window, synchronization policy), "
        "which outlive the call: leave the stream as it is given",
    ),
    (
        r"cudaStream(?:IsCapturing|GetCaptureInfo\w*|BeginCapture\w*|EndCapture|UpdateCaptureDependencies\w*)"
        r"|cudaThreadExchangeStreamCaptureMode",
        "asks about or changes CUDA graph capture: the call must do the same work whether or not the stream is "
        "being captured",
    ),
    (
        r"cudaGraph\w*|cudaUserObject\w*",
        "builds or launches CUDA graphs: launch the kernels directly on the stream (the caller may capture them)",
    ),
    (
        r"cudaGetDriverEntryPoint\w*|cudaGetProcAddress\w*|__cudaGetProcAddress|cudaGetExportTable|cudaGetFuncBySymbol"
        r"|cudaGetKernel|cudaLibrary\w*|cudaKernelSetAttributeForDevice|cu[A-Z]\w*",
        "reaches the CUDA driver or loads code by handle, beyond what the gate can check: call only the runtime "
        "functions of the allowlist, and launch with <<<>>>",
    ),
    (
        r"cudaDeviceReset|cudaThreadExit|cudaSetDevice|cudaSetValidDevices|cudaInitDevice|cudaChooseDevice"
        r"|cudaGetDeviceCount",
        "selects, resets or enumerates devices: the call runs on the caller's current device and context",
    ),
    (
        r"cudaProfiler\w*|cudaLogs\w*",
        "controls the profiler or the runtime's logs, which belong to the caller",
    ),
    (
        r"cudaMemAdvise|cudaMemPrefetch\w*|cudaMemDiscard\w*|cudaMemRangeGetAttributes?|cudaMemGetInfo"
        r"|cudaPointerGetAttributes",
        "manages or inspects memory placement: the buffers arrive as device pointers, use them as they are",
    ),
    (
        r"_*cuda\w*",
        "a CUDA runtime call outside what a kernel launcher may use. Allowed: kernel launches on the stream "
        "argument (<<<>>>, cudaLaunchKernelEx, cudaLaunchCooperativeKernel), cudaGetLastError/cudaPeekAtLastError, "
        "cudaFuncSetAttribute/cudaFuncGetAttributes/cudaFuncSetCacheConfig, the cudaOccupancy* queries, "
        "cudaGetDevice/cudaDeviceGetAttribute/cudaGetDeviceProperties, cudaMemsetAsync/cudaMemcpyAsync (and 2D, "
        "symbol forms) on the stream argument",
    ),
)

# Everything else a host object may reach besides the CUDA runtime.
_ALLOWED: tuple[tuple[str, str], ...] = (
    *_CUDA_ALLOWED,
    (r"__nv\w*", "nvcc's generated helpers"),
    (r"__fatbinwrap\w*|fatbinData", "embedded fatbin"),
    (r"_GLOBAL_OFFSET_TABLE_", "the global offset table of position-independent code (-fPIC), defined by the linker"),
    # C++ runtime essentials: what any C++ translation unit may need from libstdc++ / libgcc.
    (
        r"_Znw[mj]|_Zna[mj]|_Znw[mj]St11align_val_t|_Zna[mj]St11align_val_t|_Znw[mj]RKSt9nothrow_t"
        r"|_Zna[mj]RKSt9nothrow_t",
        "operator new",
    ),
    (r"_Zd[la]Pv(?:[mj])?(?:St11align_val_t)?|_Zd[la]PvRKSt9nothrow_t", "operator delete"),
    (r"__cxa_\w+", "C++ ABI: static guards, exceptions, atexit, pure virtuals"),
    (r"__gxx_personality_v0|_Unwind_Resume", "exception unwinding"),
    (r"_ZSt9terminatev|_ZSt\d+__throw_\w+", "std::terminate and libstdc++'s throw helpers (std::vector etc.)"),
    (r"_ZTVN10__cxxabiv1\w+|_ZTISt\w+|_ZTSSt\w+", "RTTI of standard exception types"),
    (r"__stack_chk_fail|__stack_chk_guard", "stack protector"),
    (r"__dso_handle|atexit|__tls_get_addr", "static destructors and thread-local storage"),
    (
        r"abort|exit|__assert_fail",
        "abort, host-side assert, and exit, which nvcc's host shadow of every __device__ "
        "function calls (each ends the process and reaches nothing outside it)",
    ),
    # A small libc: memory and strings. No I/O: a launcher has nothing to print or read (device printf is
    # device-side); errors travel back as cudaError_t.
    (r"mem(?:cpy|set|move|cmp)|__mem(?:cpy|set|move)_chk|strlen|strcmp|strncmp", "memory and string helpers"),
    (r"malloc|calloc|realloc|free|posix_memalign|aligned_alloc", "host heap for small launch-side buffers"),
    # libm: grid-size arithmetic and host-side constants.
    (
        r"(?:sqrt|cbrt|exp|exp2|expm1|log|log2|log10|log1p|pow|sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|tanh"
        r"|erf|erfc|fabs|floor|ceil|round|lround|llround|trunc|fmod|fmin|fmax|fma|frexp|ldexp|modf|hypot|nearbyint"
        r"|rint|lrint|llrint|copysign|nan|isnan|isinf|finite|__isnan|__isinf|__finite)[fl]?",
        "libm",
    ),
)

_ALLOWED_RE = re.compile("|".join(f"(?:{pattern})" for pattern, _ in _ALLOWED))
_CUDA_DENIED_RES = tuple((re.compile(pattern), reason) for pattern, reason in _CUDA_DENIED)
_RAW_SYSCALL = re.compile(r"(?m)^\s*[0-9a-f]+:\s+(?:syscall|sysenter|int\s+\$0x80|svc)\b")
_ANONYMOUS = "_GLOBAL__N_"
_STRONG = frozenset("TDBRGS")
_WEAK = frozenset("WVui")

# Weak definitions a header may legitimately put into every variant (identical everywhere, so merging them is
# harmless): the standard library, CUDA's own headers and header-only CUDA libraries.
_LIBRARY_OWNERS = frozenset({"std", "__gnu_cxx", "cuda", "cub", "thrust", "nv", "dim3"})
_PLACEMENT_NEW = re.compile(r"_Z(?:nw|na)[mj]Pv|_Zd[la]PvS_")
_SPECIAL_NAME = re.compile(r"T[VTIS]|GV|GR|T[HW]")
_STD_SUBSTITUTION = ("St", "Sa", "Sb", "Ss", "Si", "So", "Sd")


def _owner(symbol: str) -> str | None:
    """The outermost name of a symbol: ``std`` for ``std::...``, the namespace, class or function otherwise,
    the symbol itself for C names; None where the mangling is not a plain name (operators, substitutions)."""
    if not symbol.startswith("_Z"):
        return symbol
    rest = symbol[2:]
    special = _SPECIAL_NAME.match(rest)
    if special:
        rest = rest[special.end() :]
    rest = rest.lstrip("Z")  # a local entity belongs to its enclosing function
    if rest.startswith("N"):
        rest = rest[1:].lstrip("rVKRO")
    if rest.startswith(_STD_SUBSTITUTION):
        return "std"
    digits = re.match(r"\d+", rest)
    if digits is None:
        return None
    return rest[digits.end() : digits.end() + int(digits.group())]


def _from_library(symbol: str) -> bool:
    """Whether a weak definition comes from a header every variant shares rather than from the candidate."""
    owner = _owner(symbol)
    if owner is None:
        return _PLACEMENT_NEW.fullmatch(symbol) is not None
    return (
        owner in _LIBRARY_OWNERS
        or owner.startswith("__")
        or re.match(r"_[A-Z]|cuda[A-Z]", owner) is not None
        or _ANONYMOUS in symbol
        or symbol.startswith("DW.ref.")
    )


def is_allowed(symbol: str) -> bool:
    """Whether a candidate's host code may call ``symbol`` (a mangled name)."""
    return _ALLOWED_RE.fullmatch(symbol) is not None


def denied_reason(symbol: str) -> str | None:
    """Why a CUDA runtime or driver call outside the allowlist is denied, and what to do instead; None for an
    allowed symbol and for names outside CUDA (those are explained together in :meth:`SymbolCheck.reason`)."""
    if is_allowed(symbol):
        return None
    for pattern, reason in _CUDA_DENIED_RES:
        if pattern.fullmatch(symbol):
            return reason
    return None


@dataclass(frozen=True)
class SymbolCheck:
    """What the gate found in one host object."""

    forbidden: list[str] = field(default_factory=list)
    """Undefined symbols outside the allowlist, demangled and sorted; denied CUDA calls grouped by their reason,
    which follows them: why, and what to do instead."""
    exported: list[str] = field(default_factory=list)
    """Global definitions of the candidate's own other than the entry point, demangled, sorted."""
    has_entry: bool = True
    """Whether the object defines the ``extern "C"`` entry point."""
    raw_syscalls: int = 0
    """System-call instructions in the host code."""
    load_time: list[str] = field(default_factory=list)
    """Functions of the candidate's that run when the library is loaded or unloaded, demangled."""

    @property
    def ok(self) -> bool:
        """Whether the object passes every check."""
        return (
            not self.forbidden and not self.exported and self.has_entry and not self.raw_syscalls and not self.load_time
        )

    def reason(self, entry: str) -> str:
        """Why the candidate is rejected, written to be fed back to a model; empty when ``ok``."""
        parts = []
        if self.forbidden:
            names = ", ".join(self.forbidden)
            parts.append(
                f"host code calls functions a kernel library may not use: {names}. A candidate may call only "
                "the launch-side CUDA runtime (kernel launches on the stream argument, cudaGetLastError, "
                "cudaFuncSetAttribute, occupancy and device-attribute queries, cudaMemsetAsync/cudaMemcpyAsync on "
                "the stream argument), C++ runtime essentials (operator new/delete, __cxa_*), memory and string "
                "helpers (memcpy, memset, strlen, malloc/free) and libm; no allocation on the GPU, no "
                "synchronization, no streams or events of its own, no processes, files, sockets, environment, "
                "dynamic loading or console output. Report failures through the returned cudaError_t."
            )
            if any("ios_base::Init" in name for name in self.forbidden):
                parts.append(
                    "std::ios_base::Init comes from <iostream>, which umbrella headers such as <cub/cub.cuh> "
                    "include (with NVTX, which brings dlopen and getenv): include only the headers you use, e.g. "
                    "<cub/block/block_reduce.cuh>."
                )
        if self.exported:
            names = ", ".join(self.exported)
            parts.append(
                f"defines global symbols other than the entry point: {names}. Several variants link into one "
                "library, so every kernel and helper must be in an anonymous namespace or declared static; only "
                f'extern "C" {entry}(...) may be visible.'
            )
        if not self.has_entry:
            parts.append(f'does not define the entry point extern "C" cudaError_t {entry}(..., cudaStream_t stream).')
        if self.raw_syscalls:
            parts.append("host code contains raw system-call instructions (inline assembly); remove them.")
        if self.load_time:
            names = ", ".join(self.load_time)
            parts.append(
                f"runs host code when the library is loaded or unloaded: {names} (a constructor, a destructor or a "
                "global initialized by running code). A kernel library does nothing until its entry point is "
                "called: make tables constexpr, const arrays of literals or __constant__ data, and do any setup "
                "inside the entry point."
            )
        return " ".join(parts)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise ToolchainError(f"{name} (GNU binutils) not found on PATH; the static gate needs it to inspect objects")
    return found


def _run(cmd: list[str]) -> str:
    try:
        proc = run_process(cmd, timeout_s=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {cmd[0]}: {exc}") from None
    if proc.returncode != 0:
        raise ToolchainError(f"{' '.join(cmd)} failed with code {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _demangle(names: list[str]) -> list[str]:
    """Readable names (c++filt when present), sorted; denied CUDA calls that share a reason are listed together,
    followed by it once."""
    if not names:
        return []
    cxxfilt = shutil.which("c++filt")
    readable = names
    if cxxfilt is not None:
        out = _run([cxxfilt, *names]).splitlines()
        readable = out if len(out) == len(names) else names
    plain: set[str] = set()
    by_note: dict[str, set[str]] = {}
    for text, name in zip(readable, names, strict=True):
        note = denied_reason(name)
        if note is None:
            plain.add(text)
        else:
            by_note.setdefault(note, set()).add(text)
    grouped = [f"{', '.join(sorted(texts))} ({note})" for note, texts in by_note.items()]
    return sorted([*plain, *grouped])


_X86_64 = 62
_SHF_EXECINSTR = 0x4
_SYSCALL_BYTES = re.compile(rb"\x0f\x05|\x0f\x34|\xcd\x80")


def hidden_syscalls(obj: Path) -> int:
    """System-call encodings (``syscall``, ``sysenter``, ``int 0x80``) anywhere in the bytes of the executable
    sections of an x86-64 ELF object, whatever the disassembly makes of them; 0 for other objects."""
    try:
        data = obj.read_bytes()
    except OSError:
        return 0
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # ELF64, little-endian
        return 0
    machine, _version, _entry, _phoff, shoff = struct.unpack_from("<HIQQQ", data, 18)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if machine != _X86_64 or shentsize < 64:
        return 0
    found = 0
    for k in range(shnum):
        at = shoff + k * shentsize
        if at + 64 > len(data):
            break
        _name, kind, flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, at)
        if flags & _SHF_EXECINSTR and kind != 8:  # SHT_NOBITS has no bytes
            found += len(_SYSCALL_BYTES.findall(data, offset, min(len(data), offset + size)))
    return found


_LOAD_SECTIONS = re.compile(r"\.(?:init_array|preinit_array|ctors|fini_array|dtors)(?:\.\d+)?")
_REGISTRATION = "__sti____cudaRegisterAll"
_RELOCATION = re.compile(r"^[0-9a-f]+\s+\S+\s+(?P<target>[^\s+-]+)(?:(?P<sign>[+-])0x(?P<offset>[0-9a-f]+))?\s*$")
_INDIRECT = re.compile(r"^[0-9a-f]+\s.*\si\s+\S+\s+[0-9a-f]+\s+(?:\.hidden\s+)?(?P<name>\S+)$")
_FUNCTION = re.compile(r"^(?P<value>[0-9a-f]+)\s.*\sF\s+(?P<section>\S+)\s+[0-9a-f]+\s+(?:\.hidden\s+)?(?P<name>\S+)$")


def load_time_functions(obj: Path) -> list[str]:
    """The (mangled) names of the functions an object runs when it is loaded or unloaded, other than nvcc's fatbin
    registration; code placed in ``.init`` or ``.fini`` counts as one, named by its section, and so does the
    resolver of a GNU indirect function (``__attribute__((ifunc))``), which runs while the library is loaded."""
    objdump = _tool("objdump")
    functions: dict[tuple[str, int], str] = {}
    sections: set[str] = set()
    found: list[str] = []
    for line in _run([objdump, "-t", str(obj)]).splitlines():
        m = _FUNCTION.match(line.strip())
        if m:
            functions[m["section"], int(m["value"], 16)] = m["name"]
        indirect = _INDIRECT.match(line.strip())
        if indirect:  # an ifunc's resolver runs while the library's relocations are processed, before any call
            found.append(f"the resolver of the indirect function {indirect['name']}")
    current: str | None = None
    for line in _run([objdump, "-r", "-h", str(obj)]).splitlines():
        fields = line.split()
        if current is None and not found and len(fields) > 2 and re.fullmatch(r"\d{1,5}", fields[0]):
            sections.add(fields[1])  # a section header line: "idx name size ..."
            continue
        if line.startswith("RELOCATION RECORDS FOR ["):
            name = line[len("RELOCATION RECORDS FOR [") :].rstrip("]:")
            current = name if _LOAD_SECTIONS.fullmatch(name) else None
            continue
        m = _RELOCATION.match(line.strip()) if current else None
        if m is None:
            continue
        target, offset = m["target"], int(m["offset"] or "0", 16) * (-1 if m["sign"] == "-" else 1)
        name = functions.get((target, offset), target) if target.startswith(".") else target
        if _REGISTRATION not in name:
            found.append(name if not name.startswith(".") else f"code at {target}+{offset:#x}")
    found += [f"code in the {section} section" for section in sorted(sections & {".init", ".fini"})]
    # the translation unit's dynamic initialization is named after a temporary file: name it by what it does
    return ["the initialization of its globals" if re.match(r"_GLOBAL__sub_[ID]_", name) else name for name in found]


def check_object(obj: Path, entry: str) -> SymbolCheck:
    """Inspect a host object from nvcc: its calls, its exports and its instructions."""
    nm = _tool("nm")
    undefined = [line.split()[-1] for line in _run([nm, "-u", str(obj)]).splitlines() if line.strip()]
    forbidden = [s for s in undefined if not is_allowed(s)]

    exported: list[str] = []
    has_entry = False
    for line in _run([nm, "-g", "--defined-only", str(obj)]).splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        kind, symbol = fields[1], fields[2]
        if symbol == entry and kind == "T":
            has_entry = True
        elif (kind in _STRONG and _ANONYMOUS not in symbol) or (kind in _WEAK and not _from_library(symbol)):
            exported.append(symbol)
    # a kernel's launch stub always comes with the kernel itself: name the kernel only
    exported = [s for s in exported if "__device_stub__" not in s]

    disassembly = _run([_tool("objdump"), "-d", "--no-show-raw-insn", str(obj)])
    raw = max(len(_RAW_SYSCALL.findall(disassembly)), hidden_syscalls(obj))
    load_time = load_time_functions(obj)
    return SymbolCheck(
        forbidden=_demangle(forbidden),
        exported=_demangle(exported),
        has_entry=has_entry,
        raw_syscalls=raw,
        load_time=_demangle(load_time),
    )
