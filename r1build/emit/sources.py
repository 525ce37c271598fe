"""The generated translation units: one per winning variant, and the per-arch dispatcher.

A variant's file is its tunable values as ``#define`` lines followed by the candidate's source, unchanged. When
the kernel has several variants the entry point is renamed by a macro placed before the source
(``#define silu_mul silu_mul__1a2b3c4d5e6f``): the contract says the entry point is ``extern "C" silu_mul(``
and everything else is internal, so the rename touches exactly the one symbol that would clash.

The dispatcher defines the real ``extern "C" <kernel>(...)``. It looks up the running device's compute
capability once per device (``cudaGetDevice`` + ``cudaDeviceGetAttribute``, cached in a static table) and calls:
the variant built for exactly that capability (an ``a`` arch such as ``sm_100a`` preferred over its family
sibling ``sm_100f``, preferred over the plain one); else the variant of the highest plain or family arch with the
same major and a minor not above the device's (cubins run on later minors of their major); else the variant
carrying the PTX of the highest plain arch not above the device's (the driver JIT-compiles it for a newer GPU);
else it returns ``cudaErrorNoKernelImageForDevice``, as a launch of a kernel without code for the device would.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..manifest.archs import arch_info, suffix_of
from ..toolchain.defines import check_defines
from .header import HEADER_NAME, signature
from .plan import MARKER, KernelPlan, Variant, arch_order, describe_origin

__all__ = ["DISPATCH_NAME", "render_dispatcher", "render_variant"]

DISPATCH_NAME = "r1build_dispatch.cu"


def render_variant(variant: Variant) -> str:
    """The translation unit of one variant; :class:`ValueError` for a define that is not an identifier set to a
    plain number or identifier (validated where it came from; refused again here, where it would become code)."""
    candidate = variant.candidate
    check_defines(candidate.defines)
    lines = [
        f"// {MARKER}: do not edit, it is rewritten on every build.",
        f"// kernel {variant.kernel}, variant {candidate.digest}",
        f"// for {', '.join(variant.archs)}: {describe_origin(candidate)}",
    ]
    lines += [f"#define {name} {candidate.defines[name]}" for name in sorted(candidate.defines)]
    if variant.symbol != variant.kernel:
        lines.append(f"#define {variant.kernel} {variant.symbol}")
    source = candidate.source if candidate.source.endswith("\n") else candidate.source + "\n"
    return "\n".join(lines) + "\n\n" + source


def _capability(arch: str) -> int:
    major, minor = arch_info(arch).capability
    return 10 * major + minor


def _dispatch_function(p: KernelPlan) -> list[str]:
    call_args = ", ".join([arg.name for arg in p.spec.args] + ["stream"])
    exact: dict[int, Variant] = {}
    for arch in p.archs:  # plain, then "f", then "a": the narrowest variant overwrites its siblings
        exact[_capability(arch)] = p.variant_for(arch)
    # plain and family code runs on later minors of its major; a family variant before its plain sibling
    plain = sorted((a for a in p.archs if suffix_of(a) != "a"), key=arch_order, reverse=True)

    lines = [
        "",
        f"// {p.entry}: " + ", ".join(f"{a} -> {p.variant_for(a).symbol}" for a in p.archs),
        f'extern "C" {signature(p.spec, p.entry)} {{',
        "    int r1build_cc = 0;",
        "    const cudaError_t r1build_err = r1build_capability(&r1build_cc);",
        "    if (r1build_err != cudaSuccess) return r1build_err;",
        "    switch (r1build_cc) {",
    ]
    lines += [f"        case {cc}: return {v.symbol}({call_args});" for cc, v in sorted(exact.items())]
    lines += ["        default: break;", "    }"]
    for arch in plain:
        major, minor = arch_info(arch).capability
        condition = f"r1build_cc / 10 == {major}" + (f" && r1build_cc % 10 >= {minor}" if minor else "")
        lines.append(f"    if ({condition}) return {p.variant_for(arch).symbol}({call_args});")
    for arch in (a for a in plain if p.target(a).ptx and not suffix_of(a)):  # PTX JIT-compiled for any later GPU
        lines.append(f"    if (r1build_cc >= {_capability(arch)}) return {p.variant_for(arch).symbol}({call_args});")
    lines += ["    return cudaErrorNoKernelImageForDevice;", "}"]
    return lines


def render_dispatcher(plans: Sequence[KernelPlan]) -> str:
    """The dispatcher of every kernel with several variants (callers emit it only when there is one)."""
    dispatched = [p for p in plans if p.dispatched]
    lines = [
        f"// {MARKER}: do not edit, it is rewritten on every build.",
        "// Each kernel below won with different variants on different archs: its entry point calls the variant",
        "// built for the running device's compute capability.",
        f'#include "{HEADER_NAME}"',
        "",
        "#include <atomic>",
        "",
        'extern "C" {',
    ]
    lines += [f"{signature(p.spec, v.symbol)};" for p in dispatched for v in p.variants]
    lines += [
        "}",
        "",
        "namespace {",
        "",
        "constexpr int kCachedDevices = 128;",
        "// 10 * major + minor of each device ordinal; 0 until looked up. Lookups are idempotent, so racing",
        "// threads at most look up the same value twice.",
        "std::atomic<int> g_capability[kCachedDevices] = {};",
        "",
        "cudaError_t r1build_capability(int* capability) {",
        "    int device = 0;",
        "    cudaError_t err = cudaGetDevice(&device);",
        "    if (err != cudaSuccess) return err;",
        "    const bool cacheable = device >= 0 && device < kCachedDevices;",
        "    if (cacheable) {",
        "        const int known = g_capability[device].load(std::memory_order_relaxed);",
        "        if (known != 0) {",
        "            *capability = known;",
        "            return cudaSuccess;",
        "        }",
        "    }",
        "    int major = 0;",
        "    int minor = 0;",
        "    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);",
        "    if (err != cudaSuccess) return err;",
        "    err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);",
        "    if (err != cudaSuccess) return err;",
        "    *capability = 10 * major + minor;",
        "    if (cacheable) g_capability[device].store(*capability, std::memory_order_relaxed);",
        "    return cudaSuccess;",
        "}",
        "",
        "}  // namespace",
    ]
    for p in dispatched:
        lines += _dispatch_function(p)
    return "\n".join(lines) + "\n"
