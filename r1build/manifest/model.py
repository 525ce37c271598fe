"""The typed manifest: what ``kernels.toml`` (or ``[tool.r1build]`` in pyproject.toml) declares.

Every field carries a docstring; :mod:`r1build.manifest.schema` turns these classes and docstrings into the
committed JSON schema. TOML keys are the field names in kebab-case (``test-shapes`` for ``test_shapes``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from ..convert import field, record
from .archs import ArchTarget, settle_codes
from .bounds import bounded

__all__ = [
    "DTYPES",
    "Arg",
    "BindingsSettings",
    "Budget",
    "CacheSettings",
    "EvaluationSettings",
    "Generation",
    "KernelSpec",
    "Limits",
    "Manifest",
    "Prices",
    "ProjectSettings",
    "Tolerance",
]

DTYPES: dict[str, str] = {
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "bool": "bool",
}
"""Supported dtypes (numpy names) and the C type of one element."""

DTYPE_BYTES: dict[str, int] = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
}
"""Bytes of one element of each dtype."""

INTEGER_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})

Role = Literal["in", "out", "inout"]
Provider = Literal["deepseek", "vllm", "sglang", "nim", "openai"]
Visibility = Literal["hidden", "default"]
MustBeat = Literal["library", "torch", "library-and-torch", "none"]
TimingRegime = Literal["back-to-back", "idle-gaps"]
"""How candidates are timed for ranking: ``back-to-back`` (calls queued one after another: small kernels as a CUDA
graph, an L2 flush before each larger call) or ``idle-gaps`` (an idle GPU before every call and a cold L2, as a
serving engine calls a kernel now and then)."""


@record(frozen=True)
class Arg:
    """One parameter of the exported function, in declaration order."""

    name: str
    """C identifier of the parameter: not a C, C++ or CUDA keyword, a reserved name (``__x``, ``_X``), a CUDA
    built-in or type (``threadIdx``, ``int64_t``), nor a function of the C library, libm, the CUDA runtime or
    CUDA's device functions (``memcpy``, ``printf``, ``cudaMalloc``, ``min``)."""
    dtype: str
    """Element type, a numpy name: float32, float16, bfloat16, float64, int8..int64, uint8..uint64, bool."""
    shape: list[str | int] | None = None
    """Array arguments: the dimensions (at least one), each a size name (an integer scalar argument of this
    kernel) or a fixed integer; ``[1]`` for a single element. Absent for a scalar argument."""
    role: Role | None = None
    """Array arguments: ``in`` (read only, checked unchanged), ``out`` (written), ``inout`` (read and written)."""
    value: bool | int | float | None = None
    """Scalar arguments that are not sizes (e.g. ``eps``): the value passed in tests and benchmarks, within the
    dtype's range (an integer for integer dtypes, ``true`` / ``false`` for ``bool``, finite for floats). An
    integer scalar without a value is a size and takes its value from each shape."""

    @property
    def is_array(self) -> bool:
        """Whether the argument is a device pointer."""
        return self.shape is not None

    @property
    def is_size(self) -> bool:
        """Whether the argument is a named size (an integer scalar without a fixed value)."""
        return self.shape is None and self.value is None

    def c_type(self) -> str:
        """The C type of the parameter in the exported signature."""
        elem = DTYPES[self.dtype]
        if not self.is_array:
            return elem
        return f"const {elem}*" if self.role == "in" else f"{elem}*"


@record(frozen=True)
class Tolerance:
    """How close a candidate's outputs must be to the reference's."""

    rtol: float = bounded(1e-5, ge=0, lt=1)
    """Relative tolerance, elementwise (numpy.allclose semantics) and for the relative norm of the error; below 1
    (at 1 an output of zeros would pass)."""
    atol: float = bounded(1e-6, ge=0)
    """Absolute tolerance, elementwise."""


@record(frozen=True)
class Limits:
    """Resource limits the static gate enforces on the ptxas report; a candidate over any is rejected."""

    registers: int | None = bounded(None, ge=1, le=255)
    """Most registers per thread; the arch's limit when absent."""
    spill_bytes: int | None = bounded(None, ge=0)
    """Most spill bytes (stores plus loads); 0 rejects any spilling; any amount is allowed when absent."""
    shared_bytes: int | None = bounded(None, ge=0)
    """Most static shared memory per block in bytes; the arch's limit when absent."""


@record(frozen=True, kw_only=True)
class Budget:
    """How much a kernel's search for candidates may spend (used by generation)."""

    candidates: int = bounded(32, ge=1)
    """Most candidates generated for one kernel and arch."""
    rounds: int = bounded(4, ge=1)
    """Most rounds of generate, evaluate and feed back."""
    samples: int = bounded(8, ge=1)
    """Parallel samples (requests) per round."""
    tokens: int | None = bounded(None, ge=1)
    """Most completion tokens spent, all requests together; no limit when absent."""
    wall_time_s: float = bounded(1800.0, gt=0)
    """Most wall-clock seconds for one kernel and arch."""
    money_usd: float | None = bounded(None, ge=0)
    """Most money spent, from the usage the provider reports and the configured prices; no limit when absent."""
    target_share: float = bounded(0.9, gt=0, le=1.5)
    """Stop early once the best candidate reaches this share of the hardware floor. The floor's bandwidth is
    measured with a device-to-device copy, which a kernel can beat, so shares a little above 1 occur (a time below
    the floor by more than its uncertainty is rejected, except for calls under 10 µs, timed warm): 1.5 in effect
    never stops early."""
    patience: int = bounded(2, ge=1)
    """Stop early after this many rounds without improvement."""


@record(frozen=True)
class Prices:
    """Prices per million tokens, to account spend."""

    input_per_mtok: float = bounded(0.0, ge=0)
    """US dollars per million prompt tokens."""
    output_per_mtok: float = bounded(0.0, ge=0)
    """US dollars per million completion tokens (reasoning included)."""


@record(frozen=True, kw_only=True)
class Generation:
    """How candidates are generated on a cache miss. Without an endpoint, resolution is offline."""

    provider: Provider = "deepseek"
    """Provider profile: ``deepseek`` (api.deepseek.com), ``vllm``, ``sglang``, ``nim`` (NVIDIA NIM) or
    ``openai`` (any OpenAI-compatible endpoint)."""
    base_url: str | None = None
    """Endpoint URL (``http://`` or ``https://`` with a host); the profile's default when absent.
    ``R1BUILD_BASE_URL`` overrides it."""
    model: str | None = None
    """Model name; the profile's default when absent."""
    api_key_env: str | None = None
    """Environment variable that holds the API key; ``DEEPSEEK_API_KEY`` / ``OPENAI_API_KEY`` when absent."""
    max_concurrency: int = bounded(8, ge=1)
    """Most requests in flight at once."""
    max_tokens: int = bounded(32768, ge=256)
    """``max_tokens`` of each request (reasoning included)."""
    request_timeout_s: float = bounded(1800.0, gt=0)
    """Overall deadline of one request, streaming included (a 32K-token R1 answer at 25 tokens/s takes ~20
    minutes)."""
    retries: int = bounded(4, ge=0)
    """Retries of one request after 429, 5xx, connection errors and timeouts."""
    retry_backoff_s: float = bounded(2.0, ge=0)
    """Seconds of the pause after a failed request when the server sends no ``retry-after``; doubled for each
    further failure in a row (with jitter), at most 60. One pause holds back every request of the search."""
    max_consecutive_failures: int = bounded(12, ge=1)
    """Failed requests in a row (all samples together, no answer in between) after which the search stops: the
    circuit breaker for an endpoint that is down."""
    stream: bool = True
    """Stream answers (server-sent events). Long answers keep the connection alive this way; turn it off only
    for servers that cannot stream."""
    temperatures: list[float] = field(default_factory=lambda: [0.6])
    """Temperature schedule (each 0..2), cycled over samples, where the provider honours temperature."""
    top_p: float = bounded(0.95, gt=0, le=1)
    """``top_p`` where the provider honours it."""
    directions: list[str] = field(default_factory=list)
    """Named optimization directions for prompt diversity; a built-in list when empty."""
    prices: Prices = field(default_factory=Prices)
    """Token prices for spend accounting."""
    search: Literal["continuous", "rounds"] = "continuous"
    """How requests are scheduled: ``continuous`` refills a request slot the moment an answer arrives (from the
    best lineage judged so far), judges each answer as it arrives (its code as soon as its block closes in the
    stream) and stops as soon as a stop rule is met; ``rounds`` sends the samples of a round together and plans
    the next round once every answer of this one is judged. Not part of the decision key."""


@record(frozen=True, kw_only=True)
class KernelSpec:
    """One kernel: its contract, its reference and how to test and time it."""

    name: str
    """C identifier of the exported function, by the rules of an argument's name and moreover no symbol the C
    library or libm exports (``index``, ``select``) and not starting with ``_``."""
    description: str
    """What the kernel computes, in words (goes into the prompt)."""
    args: list[Arg]
    """Parameters of the exported function in order; the trailing ``cudaStream_t stream`` is implied."""
    reference: str
    """``module:function`` next to the manifest (a dotted module path): numpy code computing the outputs from
    the inputs. Called with
    every ``in`` / ``inout`` array and every scalar as keyword arguments; returns the ``out`` / ``inout`` arrays
    (one array, a tuple in declaration order, or a dict by name)."""
    test_shapes: list[dict[str, int]]
    """Sizes for correctness checks, each giving every size (at least 1, within the size's dtype); include
    awkward ones (1, primes, non-multiples of 32); all arrays together at most 1 GiB at each. ``r1build
    check`` runs the reference at each one."""
    bench_shapes: list[dict[str, int]]
    """Sizes for timing; the first one ranks candidates. All arrays together at most 256 GiB at each (more than
    any GPU holds)."""
    tolerance: Tolerance = field(default_factory=Tolerance)
    """How close outputs must be to the reference."""
    baseline: str | None = None
    """Hand-written ``.cu`` (path relative to the manifest) used when nothing better is known."""
    candidates: list[str] = field(default_factory=list)
    """Further hand-written ``.cu`` candidates, evaluated like generated ones."""
    tunables: dict[str, list[int | str]] = field(default_factory=dict)
    """Tunable parameters, name to the values to try; each value set is passed as ``-DNAME=value``. Names are
    upper-case macros (``BLOCK``) that are no standard or CUDA macro and no argument's name; values are
    integers or strings holding one numeric literal or identifier (``"0x80"``, ``"1.5f"``, ``"float"``)."""
    archs: list[str] | None = None
    """Target archs of this kernel; the manifest's ``archs`` when absent."""
    budget: Budget = field(default_factory=Budget)
    """Search budget for generation."""
    alignment: int | None = bounded(None, ge=1, le=256)
    """Byte alignment every array pointer is guaranteed to have, a power of two up to 256 (what ``cudaMalloc``
    guarantees); arrays are offset from aligned allocations during validation when absent."""
    flops: str | None = None
    """Arithmetic operations per call, an expression over the sizes (e.g. ``2*m*n*k``), for the floor: sizes,
    numbers and ``+ - * / // % **``, finite and not negative at every test and bench shape."""
    limits: Limits = field(default_factory=Limits)
    """Resource limits from the ptxas report (registers, spills, shared memory)."""
    gpu_reference: str | None = None
    """``module:function`` next to the manifest, like ``reference``: the same computation written for cupy
    arrays (called with cupy arrays, the same keyword arguments), timed on the GPU as "the library" that a
    winner's speedup is set against. Absent: the numpy ``reference`` is run on cupy arrays (its ``numpy``
    rebound to cupy), which fails for code cupy cannot run (``r1build check`` names the likely cases). Not part
    of the decision key: it changes the figure, never the winner."""
    torch_reference: str | None = None
    """``module:function`` next to the manifest, like ``reference``: the same computation written for torch
    tensors (called with torch tensors on the GPU, the same keyword arguments; scalars as Python numbers). Where
    ``torch`` is installed in the GPU worker's environment it is timed eager and under ``torch.compile`` at the
    benchmark shapes, and the faster of the two is the torch bar a winner's ``speedup-vs-torch`` is set against;
    ``r1build check`` runs it on CPU tensors of the first test shape against the numpy reference where torch is
    installed. Not part of the decision key: it changes the figure, never the winner."""
    must_beat: MustBeat | None = None
    """``library``: a winner measured slower than the library (by less than ``margin``) fails this kernel × arch
    as when no candidate may win (nothing is locked or emitted for it); ``torch``: the same against the torch bar
    (the faster of eager and ``torch.compile`` of the ``torch-reference``); ``library-and-torch``: both;
    ``none``: only a warning. The project's ``must-beat`` when absent."""
    margin: float | None = bounded(None, ge=0, le=10)
    """With ``must-beat = "library"``: how much faster than the library the winner must be, as a fraction
    (``0.05``: a speedup of at least 1.05). The project's ``margin`` when absent."""
    timing_regime: TimingRegime | None = None
    """Which timing regime ranks this kernel's candidates: ``back-to-back`` (calls one after another) or
    ``idle-gaps`` (an idle GPU and a cold L2 before each call, as a serving engine calls a kernel). The finalists
    are timed in both and a winner that wins in one only is marked so. The project's ``timing-regime`` when
    absent. Part of the decision key when it is not ``back-to-back``."""


@record(frozen=True)
class CacheSettings:
    """The shared cache and whose signatures it trusts (the ``[cache]`` table). The remote cache is a second
    layer behind the local one; builds read it, and writing needs ``--remote-write`` / ``R1BUILD_REMOTE_WRITE=1``
    on the run that publishes (never the manifest: every build of the project would publish then)."""

    url: str | None = None
    """Remote cache URL: ``http://`` or ``https://`` with a host and an optional path prefix (a server taking
    GET, HEAD and PUT, such as nginx's WebDAV module), or ``s3://bucket/prefix`` (boto3's credentials and
    endpoint). ``R1BUILD_REMOTE_CACHE`` and ``--remote-cache`` override it."""
    timeout_s: float = bounded(5.0, gt=0, le=600)
    """Seconds one request to the remote may take; the first failure turns the remote off for the run (one
    warning). ``R1BUILD_REMOTE_TIMEOUT`` overrides it."""
    trusted_keys: list[str] = field(default_factory=list)
    """Public keys whose signed decisions and bundle entries are accepted, each ``ed25519:<base64 of the 32-byte
    raw public key>`` as ``r1build key generate`` and ``r1build key public`` print it. With keys listed,
    ``cache import`` (in the project, or ``-m``) refuses unsigned and untrusted decisions; with none, signatures
    are not checked there. Decisions and gate results from the remote cache are always checked: with no key
    listed, none is used."""


@record(frozen=True)
class EvaluationSettings:
    """Where GPU evaluation runs (the ``[evaluation]`` table): on this machine's GPUs, or on a Dask cluster of GPU
    hosts (``r1build worker``)."""

    cluster: str | None = None
    """Address of the Dask scheduler whose workers measure every target arch they have and spread the gate's
    compiles: ``tls://host:8786`` (a plain ``tcp://`` one off the loopback interface is refused unless ``resolve
    --insecure-cluster`` says so); none, local GPUs only. ``R1BUILD_CLUSTER`` and ``r1build resolve --cluster``
    override it."""
    connect_timeout_s: float = bounded(10.0, gt=0, le=600)
    """Seconds to wait for the scheduler at the start; an unreachable one ends the resolve (exit 2)."""


@record(frozen=True)
class BindingsSettings:
    """Python bindings r1build writes for the kernels (the ``[bindings]`` table); none unless ``python`` is set.
    The host project's ``CMakeLists.txt`` builds them with one line, ``r1build_python_bindings()``, after
    ``include(${R1BUILD_KERNELS_CMAKE})`` (see the bindings guide)."""

    python: str | None = None
    """Dotted name of the Python module r1build writes, inside one of the project's packages
    (``mypkg._kernels``): one function per kernel that checks every argument against the manifest (device,
    dtype, shape, contiguity, alignment), allocates the outputs with the input's array library, runs on that
    library's current stream and accepts ``out=``; with ``.pyi`` stubs. Its compiled part (a nanobind module) is
    installed beside it as ``<name>_ext``. Absent: no bindings."""
    torch_namespace: str | None = None
    """Namespace of the PyTorch custom ops the module registers when torch is importable (``mypkg`` makes
    ``torch.ops.mypkg.softmax_rows``), each with a fake implementation computed from the shapes, so
    ``torch.compile`` traces through them; torch is never a build requirement. An identifier; needs ``python``.
    Absent: no custom ops."""


@record(frozen=True, kw_only=True)
class ProjectSettings:
    """Manifest-wide settings."""

    archs: list[str] = field(default_factory=lambda: ["sm_80", "sm_90"])
    """Target GPU archs of every kernel, as nvcc and CMake spell them, which also says the code embedded:
    ``sm_90`` / ``9.0`` machine code (and PTX for the highest, see ``ptx``), ``90-real`` machine code only,
    ``90`` machine code and PTX, ``90-virtual`` / ``compute_90`` PTX only; ``a`` and family ``f`` archs alike
    (``sm_90a``, ``sm_100f``). Any arch the installed nvcc lists (``nvcc --list-gpu-code``, ``nvcc --help``) is
    accepted."""
    ptx: bool = True
    """Embed the PTX of each kernel's highest arch spelled ``sm_XY`` / ``X.Y`` (not an ``a`` or ``f`` arch) beside its
    machine code, so a GPU newer than every target JIT-compiles it instead of failing with
    ``cudaErrorNoKernelImageForDevice``. ``false``: machine code only, but for archs spelled ``90``,
    ``90-virtual`` or ``compute_90``."""
    max_wheel_mib: float | None = bounded(None, ge=0)
    """Most MiB of device code the kernels may add to a binary, all archs together (PyPI takes files up to 100 MiB
    unless a project asks for more): generated code over it is refused, naming each arch's share, so a project
    drops archs to fit. The gate's machine code is counted (the PTX the build adds for the highest arch is not).
    Absent: no cap."""
    visibility: Visibility = "hidden"
    """Symbol visibility of the kernels' entry points in the objects built: ``hidden`` (they link into your
    extension but are not exported from it, so two extensions with a kernel of the same name never call each
    other's) or ``default`` (exported, for a shared library whose users call the kernels)."""
    symbol_prefix: str = ""
    """Prefix of every kernel's C name in the generated header and objects (``mylib_`` makes ``softmax_rows``
    ``mylib_softmax_rows``), so kernel libraries of several projects link into one binary; a C identifier
    start, not beginning with ``_`` or ``r1build``, without ``__``. Candidates still define the plain name."""
    target: str = "r1build::kernels"
    """Name of the CMake target the generated CMake file defines (an ALIAS of ``r1build_kernels``): letters,
    digits, ``_ . + -``, parts joined by ``::``."""
    lock_file: str = "kernels.lock"
    """Lock file, relative to the manifest; must stay inside the project (no ``..``, no absolute path, no symbolic link
    leading out) and not be the manifest itself or a file a kernel names (a reference, baseline or candidate)."""
    vendor_dir: str = "kernels/_r1build"
    """Where ``r1build vendor`` writes the winners' sources, relative to the manifest: a folder of its own inside the
    project (not its root), since vendoring writes and removes files there (only those it wrote)."""
    nvcc_flags: list[str] = field(default_factory=lambda: ["-O3", "-std=c++17"])
    """Flags passed to nvcc for every candidate (part of the gate's and the build's key), each one token
    (``-maxrregcount=64``). Not allowed: flags that select archs (``-arch``, ``-gencode``, ``-code``), outputs,
    the compile mode, the host compiler or an options file (r1build sets those), nor ``-D`` / ``-U`` of a
    kernel, argument or tunable name."""
    generation: Generation = field(default_factory=Generation)
    """Candidate generation settings."""
    cache: CacheSettings = field(default_factory=CacheSettings)
    """The shared cache: the remote cache's URL, and the public keys trusted to sign decisions."""
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    """Where GPU evaluation runs: a Dask cluster of GPU hosts, or this machine's GPUs."""
    must_beat: MustBeat = "none"
    """Every kernel's ``must-beat`` where it sets none: ``library`` makes a winner measured slower than the
    library (the reference on cupy, or the kernel's ``gpu-reference``) by less than ``margin`` fail its kernel ×
    arch; ``torch`` the same against the torch bar (each kernel then needs a ``torch-reference``);
    ``library-and-torch`` both; ``none`` (the default) says such a winner in a warning and keeps it."""
    margin: float = bounded(0.0, ge=0, le=10)
    """Every kernel's ``margin`` where it sets none: the fraction by which a winner must beat the library under
    ``must-beat = "library"`` (0: not slower)."""
    bindings: BindingsSettings = field(default_factory=BindingsSettings)
    """Python bindings and PyTorch custom ops written for the kernels; none unless asked for."""
    timing_regime: TimingRegime = "back-to-back"
    """Every kernel's ``timing-regime`` where it sets none: ``back-to-back`` (the default) or ``idle-gaps`` ranks
    the candidates (both are recorded for the finalists)."""


@record(frozen=True)
class Manifest:
    """A loaded, validated manifest."""

    path: Path
    """The file it was read from."""
    settings: ProjectSettings
    """Manifest-wide settings."""
    kernels: list[KernelSpec]
    """The kernels, in declaration order."""
    reference_digests: dict[str, str] = field(default_factory=dict)
    """Kernel name to sha256 of its reference module's source."""
    targets: dict[str, tuple[ArchTarget, ...]] = field(default_factory=dict)
    """Kernel name to its target archs as spelled, each with the code to embed (decided at load)."""
    data_digest: str | None = field(default=None, compare=False)
    """sha256 of the manifest's table as parsed (:func:`r1build.digests.toml_digest`: comments and layout aside),
    None for a manifest not read from a file."""

    @property
    def root(self) -> Path:
        """Directory relative paths in the manifest are resolved against."""
        return self.path.parent

    def kernel(self, name: str) -> KernelSpec:
        """The kernel called ``name`` (KeyError otherwise)."""
        for spec in self.kernels:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def archs_of(self, spec: KernelSpec) -> list[str]:
        """The canonical target archs of one kernel."""
        return list(spec.archs) if spec.archs is not None else list(self.settings.archs)

    def must_beat_library(self, spec: KernelSpec) -> bool:
        """Whether a winner of ``spec`` must beat the library (the kernel's ``must-beat``, else the project's)."""
        return (spec.must_beat or self.settings.must_beat) in ("library", "library-and-torch")

    def must_beat_torch(self, spec: KernelSpec) -> bool:
        """Whether a winner of ``spec`` must beat the torch bar (the kernel's ``must-beat``, else the project's)."""
        return (spec.must_beat or self.settings.must_beat) in ("torch", "library-and-torch")

    def timing_regime_of(self, spec: KernelSpec) -> TimingRegime:
        """The timing regime that ranks ``spec``'s candidates (the kernel's, else the project's)."""
        return spec.timing_regime or self.settings.timing_regime

    def margin_of(self, spec: KernelSpec) -> float:
        """The margin by which a winner of ``spec`` must beat the library (the kernel's, else the project's)."""
        return spec.margin if spec.margin is not None else self.settings.margin

    def target(self, spec: KernelSpec, arch: str) -> ArchTarget:
        """The code embedded for one of a kernel's archs (canonical): what the load decided, else the default
        rule over its archs (a manifest built in code)."""
        targets = self.targets.get(spec.name) or tuple(
            settle_codes([ArchTarget(a, "default") for a in self.archs_of(spec)], self.settings.ptx)
        )
        return next((t for t in targets if t.arch == arch), ArchTarget(arch, "sass"))
