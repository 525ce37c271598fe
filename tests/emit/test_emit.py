"""Emission: generated sources, header, dispatcher and CMake file; built with the real CMake and nvcc."""

from __future__ import annotations

import os
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from r1build.emit import CMAKE_NAME, DISPATCH_NAME, HEADER_NAME, MARKER, Winner, render_files, write_generated
from r1build.errors import ToolchainError
from r1build.manifest import Arg, KernelSpec, Manifest, load_manifest
from r1build.records import Candidate, Origin
from r1build.toolchain.nvcc import Toolchain, toolchain

ROOT = Path(__file__).resolve().parents[2]


def source_options(cmake: str) -> dict[str, str]:
    """Each source's own ``COMPILE_OPTIONS`` in a generated CMake file, by file name."""
    found = re.findall(
        r'set_source_files_properties\("\$\{_r1build_dir\}/([^"]+)" PROPERTIES COMPILE_OPTIONS\n  "([^"]*)"\)', cmake
    )
    return dict(found)


def cmake_archs(options: str) -> str:
    """The ``--generate-code`` options among ``options`` in CMake's ``CUDA_ARCHITECTURES`` notation (``80-real``:
    machine code, ``90``: machine code and PTX, ``90-virtual``: PTX)."""
    archs = []
    for number, codes in re.findall(r"--generate-code=arch=compute_(\w+),code=\[([^\]]*)\]", options):
        kinds = {code.partition("_")[0] for code in codes.split(",")}
        archs.append(number + {"sm": "-real", "compute": "-virtual"}.get("".join(kinds) if len(kinds) == 1 else "", ""))
    return ";".join(archs)


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest(ROOT / "kernels.toml")


def source_of(manifest: Manifest, path: str, kind: str = "baseline", **defines: int | str) -> Candidate:
    origin = Origin("baseline", path) if kind == "baseline" else Origin("file", path)
    return Candidate((manifest.root / path).read_text(), origin, dict(defines))


def mixed_winners(manifest: Manifest) -> list[Winner]:
    """silu_mul with a different winner per arch, matmul and transpose with one winner for both."""
    silu, matmul, transpose = (manifest.kernel(n) for n in ("silu_mul", "matmul", "transpose"))
    base = source_of(manifest, "kernels/silu_mul.cu")
    vec = source_of(manifest, "kernels/silu_mul_vec4.cu", "file", BLOCK=512)
    tiled = source_of(manifest, "kernels/matmul.cu", TILE=32)
    generated = Candidate(
        (manifest.root / "kernels/transpose.cu").read_text(),
        Origin("generated", model="deepseek-reasoner", round=1, sample=3),
    )
    return [
        Winner(silu, "sm_80", base),
        Winner(silu, "sm_90", vec),
        Winner(matmul, "sm_80", tiled),
        Winner(matmul, "90", tiled),
        Winner(transpose, "sm_80", generated),
        Winner(transpose, "90-real", generated),
    ]


def read_dir(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_same_inputs_give_byte_identical_files(manifest: Manifest, tmp_path: Path) -> None:
    winners = mixed_winners(manifest)
    first = write_generated(tmp_path / "a" / "generated", manifest, winners)
    shuffled = list(winners)
    random.Random(7).shuffle(shuffled)
    second = write_generated(tmp_path / "elsewhere" / "deeper" / "generated", manifest, shuffled)
    assert first.changed and second.changed
    files = read_dir(first.out_dir)
    assert files == read_dir(second.out_dir)  # no absolute paths, no order dependence
    for name, data in files.items():
        assert str(tmp_path).encode() not in data, name
        assert MARKER.encode() in data.splitlines()[0], name


def test_unchanged_files_are_not_rewritten(manifest: Manifest, tmp_path: Path) -> None:
    out = tmp_path / "generated"
    first = write_generated(out, manifest, mixed_winners(manifest))
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = write_generated(out, manifest, mixed_winners(manifest))
    assert not again.changed and again.updated == () and again.removed == ()
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    assert again.sources == first.sources
    assert [p.name for p in first.sources][-1] == DISPATCH_NAME
    assert first.cmake_file == out / CMAKE_NAME and first.header == out / HEADER_NAME


def test_different_winners_are_renamed_and_dispatched(manifest: Manifest) -> None:
    files = render_files(manifest, mixed_winners(manifest))
    silu_files = sorted(name for name in files if name.startswith("silu_mul__"))
    assert len(silu_files) == 2
    stems = [name.removesuffix(".cu") for name in silu_files]
    for name, stem in zip(silu_files, stems, strict=True):
        assert f"#define silu_mul {stem}\n" in files[name]
    vec_file = next(name for name in silu_files if "silu_mul_vec4" in files[name])
    assert "\n#define BLOCK 512\n" in files[vec_file]
    assert files[vec_file].index("#define BLOCK 512") < files[vec_file].index("// Hand-written candidate")

    # one winner for both archs: its own name, no rename, not in the dispatcher
    [matmul_file] = [name for name in files if name.startswith("matmul__")]
    assert "#define matmul" not in files[matmul_file] and "#define TILE 32\n" in files[matmul_file]
    dispatcher = files[DISPATCH_NAME]
    assert "matmul" not in dispatcher and "transpose" not in dispatcher
    assert 'extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, ' in dispatcher
    vec_stem = vec_file.removesuffix(".cu")
    [base_stem] = [stem for stem in stems if stem != vec_stem]
    assert f"case 80: return {base_stem}(gate, up, out, n, stream);" in dispatcher
    assert f"case 90: return {vec_stem}(gate, up, out, n, stream);" in dispatcher
    assert "cudaGetDevice(&device)" in dispatcher and "cudaDevAttrComputeCapabilityMajor" in dispatcher
    # sm_90, the highest arch, carries PTX: a newer GPU (sm_100) runs the sm_90 variant's PTX, JIT-compiled
    assert dispatcher.index(f"if (r1build_cc >= 90) return {vec_stem}(gate, up, out, n, stream);") < dispatcher.index(
        "return cudaErrorNoKernelImageForDevice;"
    )
    assert "r1build_cc >= 80" not in dispatcher

    header = files[HEADER_NAME]
    assert "cudaError_t matmul(const float* a, const float* b, float* c, int32_t m, int32_t n, int32_t k, " in header
    assert "//   sm_90: hand-written kernels/silu_mul_vec4.cu with BLOCK=512" in header
    assert "//   sm_80: generated by deepseek-reasoner (round 1, sample 3)" in header

    cmake = files[CMAKE_NAME]
    options = source_options(cmake)
    archs = [cmake_archs(o) for o in options.values()]
    assert "80-real" in archs and "90" in archs  # silu_mul
    assert archs.count("80-real;90") == 1  # matmul: PTX of its highest arch too
    assert archs.count("80-real;90-real") == 2  # transpose (90-real in the manifest), dispatcher
    assert len(archs) == 5  # every source: 2 silu_mul, matmul, transpose, dispatch
    assert cmake.count("add_library(") == 2 and "CUDA_ARCHITECTURES OFF" in cmake  # one library (and its alias)
    assert cmake.count("CUDA_VISIBILITY_PRESET hidden") == 1
    assert {name for name in files if name.endswith(".cu")} == set(options)
    for name, opts in options.items():
        assert opts.startswith(f"-Xcudafe;--orig_src_path_name={name};")  # no checkout path in the objects
    assert "add_library(r1build::kernels ALIAS r1build_kernels)" in cmake
    assert "CMAKE_CURRENT_LIST_DIR" in cmake


def test_dispatch_prefers_exact_then_same_major(tmp_path: Path) -> None:
    spec = KernelSpec(
        name="scale",
        description="y = 2 * x\nin half precision",
        args=[
            Arg("x", "float16", ["n"], "in"),
            Arg("y", "bfloat16", ["n"], "out"),
            Arg("n", "int64"),
            Arg("flag", "bool", value=1),
        ],
        reference="ref:scale",
        test_shapes=[{"n": 1}],
        bench_shapes=[{"n": 1}],
    )
    manifest = Manifest(
        path=tmp_path / "kernels.toml", settings=load_manifest(ROOT / "kernels.toml").settings, kernels=[spec]
    )

    def variant(tag: str) -> Candidate:
        return Candidate(f"// {tag}\n", Origin("generated", model="m"))

    archs = {"sm_80": variant("a"), "sm_86": variant("b"), "sm_90": variant("c"), "sm_90a": variant("d")}
    files = render_files(manifest, [Winner(spec, arch, cand) for arch, cand in archs.items()])
    symbol = {arch: f"scale__{cand.digest[:12]}" for arch, cand in archs.items()}
    dispatcher = files[DISPATCH_NAME]
    call = "(x, y, n, flag, stream);"
    exact = [
        f"case 80: return {symbol['sm_80']}{call}",
        f"case 86: return {symbol['sm_86']}{call}",
        f"case 90: return {symbol['sm_90a']}{call}",
    ]  # an "a" arch beats its plain sibling on its own device
    fallback = [
        f"if (r1build_cc / 10 == 9) return {symbol['sm_90']}{call}",  # "a" code runs on exactly one capability
        f"if (r1build_cc / 10 == 8 && r1build_cc % 10 >= 6) return {symbol['sm_86']}{call}",
        f"if (r1build_cc / 10 == 8) return {symbol['sm_80']}{call}",
        f"if (r1build_cc >= 90) return {symbol['sm_90']}{call}",  # sm_90's PTX, on any newer GPU
    ]
    positions = [dispatcher.index(line) for line in exact + fallback]
    assert positions == sorted(positions)
    assert dispatcher.count("case ") == 3

    header = files[HEADER_NAME]
    assert "#include <cuda_fp16.h>" in header and "#include <cuda_bf16.h>" in header
    assert "cudaError_t scale(const __half* x, __nv_bfloat16* y, int64_t n, bool flag, cudaStream_t stream);" in header
    assert "// scale: y = 2 * x in half precision" in header
    compiled = [cmake_archs(o) for o in source_options(files[CMAKE_NAME]).values()]
    assert "90a-real" in compiled and "90" in compiled


def test_dispatch_runs_family_code_on_its_whole_family(tmp_path: Path) -> None:
    manifest = load_manifest(ROOT / "kernels.toml")
    spec = manifest.kernel("silu_mul")

    def variant(tag: str) -> Candidate:
        return Candidate(f"// {tag}\n", Origin("generated", model="m"))

    archs = {"sm_90": variant("a"), "sm_100": variant("b"), "sm_100f": variant("c"), "sm_100a": variant("d")}
    archs |= {"sm_120f": variant("e")}
    files = render_files(manifest, [Winner(spec, arch, cand) for arch, cand in archs.items()])
    symbol = {arch: f"silu_mul__{cand.digest[:12]}" for arch, cand in archs.items()}
    dispatcher = files[DISPATCH_NAME]
    call = "(gate, up, out, n, stream);"
    ordered = [
        f"case 100: return {symbol['sm_100a']}{call}",  # "a" first on its own device, then family, then plain
        f"case 120: return {symbol['sm_120f']}{call}",
        f"if (r1build_cc / 10 == 12) return {symbol['sm_120f']}{call}",  # 12.1 runs sm_120f code
        f"if (r1build_cc / 10 == 10) return {symbol['sm_100f']}{call}",  # 10.3 runs sm_100f, before plain sm_100
        f"if (r1build_cc / 10 == 10) return {symbol['sm_100']}{call}",
        f"if (r1build_cc >= 90) return {symbol['sm_90']}{call}",  # family PTX runs on no later major
    ]
    positions = [dispatcher.index(line) for line in ordered]
    assert positions == sorted(positions)
    assert f"if (r1build_cc >= 120) return {symbol['sm_120f']}" not in dispatcher
    options = {cmake_archs(o) for o in source_options(files[CMAKE_NAME]).values()}
    assert {"100f-real", "120f-real", "100a-real"} <= options
    assert "--generate-code=arch=compute_100f,code=[sm_100f]" in files[CMAKE_NAME]


def test_no_source_is_compiled_for_a_plain_arch_and_its_family_sibling_together() -> None:
    # one kernel targets sm_100, another sm_100f: the dispatcher of both (host code only) must not ask nvcc for
    # both, which it refuses ("The same GPU code (`sm_100f`) generated for non family-specific and ...")
    manifest = load_manifest(ROOT / "kernels.toml")

    def variant(tag: str) -> Candidate:
        return Candidate(f"// {tag}\n", Origin("generated", model="m"))

    winners = [Winner(manifest.kernel("silu_mul"), a, variant(f"s{a}")) for a in ("sm_90", "sm_100")]
    winners += [Winner(manifest.kernel("matmul"), a, variant(f"m{a}")) for a in ("sm_90", "sm_100f")]
    cmake = render_files(manifest, winners)[CMAKE_NAME]
    for name, options in source_options(cmake).items():
        numbers = set(cmake_archs(options).replace("-real", "").split(";"))
        assert not {"100", "100f"} <= numbers, name
    assert "100f-real" in {cmake_archs(o) for o in source_options(cmake).values()}


def test_header_compiles_as_cxx_and_c(manifest: Manifest, tmp_path: Path) -> None:
    tc = require_toolchain()
    out = tmp_path / "generated"
    write_generated(out, manifest, mixed_winners(manifest))
    for lang, name in (("c++", "use.cpp"), ("c", "use.c")):
        src = tmp_path / name
        src.write_text(f'#include "{HEADER_NAME}"\nint main(void) {{ return silu_mul == 0; }}\n')
        proc = subprocess.run(
            [tc.nvcc, "-x", lang, "-I", str(out), "-c", str(src), "-o", str(tmp_path / f"{name}.o")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr


def test_stale_generated_files_are_removed_and_others_kept(manifest: Manifest, tmp_path: Path) -> None:
    out = tmp_path / "generated"
    first = write_generated(out, manifest, mixed_winners(manifest))
    (out / "notes.txt").write_text("mine\n")
    (out / "helper.cu").write_text("// written by hand\n")
    silu = manifest.kernel("silu_mul")
    only = source_of(manifest, "kernels/silu_mul.cu")
    second = write_generated(out, manifest, [Winner(silu, "sm_80", only), Winner(silu, "sm_90", only)])
    assert second.changed
    names = {p.name for p in out.iterdir()}
    assert names == {f"silu_mul__{only.digest[:12]}.cu", HEADER_NAME, CMAKE_NAME, "notes.txt", "helper.cu"}
    assert {p.name for p in second.removed} == {p.name for p in first.sources} - names
    assert "#define silu_mul" not in (out / f"silu_mul__{only.digest[:12]}.cu").read_text()
    assert "matmul" not in (out / HEADER_NAME).read_text()


def test_inconsistent_winners_are_refused(manifest: Manifest) -> None:
    silu = manifest.kernel("silu_mul")
    base = source_of(manifest, "kernels/silu_mul.cu")
    with pytest.raises(ValueError, match="two winners for kernel silu_mul on sm_90"):
        render_files(manifest, [Winner(silu, "sm_90", base), Winner(silu, "90", base)])


# -- the real build ----------------------------------------------------------------------------------------
FATBIN_MAGIC = 0xBA55ED50


def fatbin_entries(data: bytes) -> list[tuple[str, int]]:
    """(kind, sm) of every entry of every fatbin in a binary, read from the fatbin headers (what cuobjdump
    lists): a 16-byte header (magic, version, header size, payload size), then entries each starting with
    kind (1 PTX, 2 ELF), header size, payload size, and the sm number at offset 28."""
    found = []
    pos = data.find(struct.pack("<I", FATBIN_MAGIC))
    while pos != -1:
        _, _, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        entry, end = pos + header_size, pos + header_size + fat_size
        while entry < end:
            kind, _, entry_header, size = struct.unpack_from("<HHIQ", data, entry)
            (sm,) = struct.unpack_from("<I", data, entry + 28)
            found.append(({1: "ptx", 2: "elf"}.get(kind, str(kind)), sm))
            entry += entry_header + size
        pos = data.find(struct.pack("<I", FATBIN_MAGIC), end)
    return found


def require_toolchain() -> Toolchain:
    try:
        return toolchain()
    except ToolchainError as exc:  # pragma: no cover - every development and CI machine has nvcc
        pytest.skip(str(exc))


def cmake_build(host: Path, build: Path, cmake_file: Path, tc: Toolchain) -> None:
    """Configure and build the CMake project ``host`` in ``build`` with the generated kernels and ``tc``'s nvcc."""
    env = {k: v for k, v in os.environ.items() if k != "CUDAARCHS"} | {"CUDACXX": tc.nvcc}
    for cmd in (
        ["cmake", "-S", str(host), "-B", str(build), "-G", "Ninja", f"-DR1BUILD_KERNELS_CMAKE={cmake_file}"],
        ["cmake", "--build", str(build)],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr


HOST_CMAKE = """cmake_minimum_required(VERSION 3.18)
project(host LANGUAGES C CXX)
include(${R1BUILD_KERNELS_CMAKE})
add_executable(host main.cpp check.c)
target_link_libraries(host PRIVATE r1build::kernels)
"""
HOST_MAIN = """#include "r1build_kernels.h"
#include <cstdio>
extern "C" int header_is_c(void);
int main() {
    // No GPU is needed: the dispatcher's device lookup fails cleanly and its error comes back.
    const cudaError_t err = silu_mul(nullptr, nullptr, nullptr, 0, nullptr);
    std::printf("silu_mul -> %d, matmul at %p, transpose at %p, c %d\\n", static_cast<int>(err),
                reinterpret_cast<void*>(&matmul), reinterpret_cast<void*>(&transpose), header_is_c());
    return 0;
}
"""
HOST_C = '#include "r1build_kernels.h"\nint header_is_c(void) { return 1; }\n'


@pytest.mark.slow
@pytest.mark.heavy  # a CMake project built for every arch: 15 s
def test_cmake_builds_a_host_program_with_per_arch_code(manifest: Manifest, tmp_path: Path, cuobjdump: str) -> None:
    tc = require_toolchain()
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("cmake and ninja are needed")
    generated = write_generated(tmp_path / "generated", manifest, mixed_winners(manifest))
    host = tmp_path / "host"
    host.mkdir()
    (host / "CMakeLists.txt").write_text(HOST_CMAKE)
    (host / "main.cpp").write_text(HOST_MAIN)
    (host / "check.c").write_text(HOST_C)
    build = tmp_path / "build"
    cmake_build(host, build, generated.cmake_file, tc)

    run = subprocess.run([str(build / "host")], capture_output=True, text=True, check=False, timeout=60)
    assert run.returncode == 0 and run.stdout.startswith("silu_mul -> ") and run.stdout.endswith("c 1\n")

    # each variant's object holds exactly its archs' machine code, and the PTX of the kernel's highest arch
    # (transpose's is spelled 90-real in the manifest: machine code only)
    def archs_of(stem: str) -> list[tuple[str, int]]:
        [obj] = (build / "CMakeFiles" / "r1build_kernels.dir").rglob(f"{stem}.cu.o")
        return sorted(fatbin_entries(obj.read_bytes()))

    silu_stems = sorted(p.stem for p in generated.sources if p.name.startswith("silu_mul__"))
    silu_archs = sorted(archs_of(stem) for stem in silu_stems)
    assert silu_archs == [[("elf", 80)], [("elf", 90), ("ptx", 90)]]
    matmul_stem = next(p.stem for p in generated.sources if p.name.startswith("matmul__"))
    assert archs_of(matmul_stem) == [("elf", 80), ("elf", 90), ("ptx", 90)]
    transpose_stem = next(p.stem for p in generated.sources if p.name.startswith("transpose__"))
    assert archs_of(transpose_stem) == [("elf", 80), ("elf", 90)]

    binary = (build / "host").read_bytes()
    entries = fatbin_entries(binary)
    # 2 silu variants, matmul, transpose, dispatch; PTX of silu_mul's sm_90 variant and matmul
    assert sorted(entries) == [("elf", 80)] * 4 + [("elf", 90)] * 4 + [("ptx", 90)] * 2
    elf = subprocess.run([cuobjdump, "--list-elf", str(build / "host")], capture_output=True, text=True, check=True)
    assert elf.stdout.count(".sm_80.cubin") == 4 and elf.stdout.count(".sm_90.cubin") == 4
    ptx = subprocess.run([cuobjdump, "--list-ptx", str(build / "host")], capture_output=True, text=True, check=True)
    assert ptx.stdout.count(".sm_90.ptx") == 2 and ".sm_80.ptx" not in ptx.stdout

    # hidden visibility: each entry point is linked in as a local or hidden symbol, which no shared object
    # could export (readelf -s: Num, Value, Size, Type, Bind, Vis, Ndx, Name)
    table = subprocess.run(["readelf", "-sW", str(build / "host")], capture_output=True, text=True, check=True).stdout
    binding = {f[7]: (f[4], f[5]) for f in (line.split() for line in table.splitlines()) if len(f) == 8}
    for name in ("silu_mul", "matmul", "transpose", *silu_stems):
        assert binding[name] in (("LOCAL", "DEFAULT"), ("GLOBAL", "HIDDEN")), (name, binding[name])


def test_text_from_a_lock_cannot_escape_the_comments_it_is_written_into(manifest: Manifest) -> None:
    """Origin text (model, path) reaches comments of the CMake file, the header and the sources: a newline or a
    line-splicing backslash in it must not become a CMake command or swallow the next line of C."""
    silu = manifest.kernel("silu_mul")
    evil = Candidate(
        (manifest.root / "kernels/silu_mul.cu").read_text(),
        Origin("generated", model="r1\nmessage(FATAL_ERROR pwned)\r\nset(X 1) \\", round=0, sample=0),
    )
    files = render_files(manifest, [Winner(silu, "sm_90", evil)])
    for name, text in files.items():
        for line in text.splitlines():
            assert not line.lstrip().startswith(("message(FATAL_ERROR pwned", "set(X")), (name, line)
            if line.lstrip().startswith(("//", "#")) and not line.startswith("#define"):
                assert not line.endswith("\\"), (name, line)
    assert "message(FATAL_ERROR pwned)" in files[CMAKE_NAME]  # still shown, inside the comment


@pytest.mark.parametrize("value", ["128\nmessage(WARNING pwned)", "128 -DEVIL=1", "64\n#error", '"x"', ""])
def test_unsafe_define_values_are_refused_where_they_are_written(manifest: Manifest, value: str) -> None:
    from r1build.gate.nvcc import nvcc_command

    silu = manifest.kernel("silu_mul")
    bad = source_of(manifest, "kernels/silu_mul_vec4.cu", "file", BLOCK=value)
    with pytest.raises(ValueError, match="refusing to write define"):
        render_files(manifest, [Winner(silu, "sm_90", bad)])
    with pytest.raises(ValueError, match="refusing to write define"):
        nvcc_command("nvcc", [], "sm_90", {"BLOCK": value}, "x.cu", "x.o")
    good = source_of(manifest, "kernels/silu_mul_vec4.cu", "file", BLOCK="0x80")
    assert "#define BLOCK 0x80" in next(iter(render_files(manifest, [Winner(silu, "sm_90", good)]).values()))


def test_symbol_prefix_renames_every_exported_name(manifest: Manifest) -> None:
    from dataclasses import replace

    prefixed = replace(manifest, settings=replace(manifest.settings, symbol_prefix="mylib_"))
    files = render_files(prefixed, mixed_winners(prefixed))
    header = files[HEADER_NAME]
    assert "cudaError_t mylib_matmul(const float* a" in header and "cudaError_t mylib_silu_mul(" in header
    assert "cudaError_t matmul(" not in header and "cudaError_t silu_mul(" not in header
    [matmul_file] = [name for name in files if name.startswith("matmul__")]
    assert "\n#define matmul mylib_matmul\n" in files[matmul_file]  # the candidate still defines matmul
    silu_stems = sorted(name.removesuffix(".cu") for name in files if name.startswith("silu_mul__"))
    for stem in silu_stems:
        assert f"\n#define silu_mul mylib_{stem}\n" in files[f"{stem}.cu"]
    dispatcher = files[DISPATCH_NAME]
    assert 'extern "C" cudaError_t mylib_silu_mul(const float* gate' in dispatcher
    assert all(f"return mylib_{stem}(gate, up, out, n, stream);" in dispatcher for stem in silu_stems)


def test_default_visibility_exports_the_entry_points(manifest: Manifest) -> None:
    from dataclasses import replace

    exported = replace(manifest, settings=replace(manifest.settings, visibility="default"))
    assert "VISIBILITY_PRESET" not in render_files(exported, mixed_winners(exported))[CMAKE_NAME]


GPU_HOST_CMAKE = """cmake_minimum_required(VERSION 3.18)
project(gpuhost LANGUAGES CXX)
include(${R1BUILD_KERNELS_CMAKE})
add_executable(gpuhost main.cpp)
target_link_libraries(gpuhost PRIVATE r1build::kernels)
"""
GPU_HOST_MAIN = r"""#include "r1build_kernels.h"
#include <cmath>
#include <cstdio>
#include <vector>
// silu_mul on the GPU present, checked on the CPU: prints "ok <capability>" or what failed.
int main() {
    const long n = 100003;
    std::vector<float> gate(n), up(n), out(n);
    for (long i = 0; i < n; ++i) { gate[i] = (i % 211) * 0.05f - 5.0f; up[i] = (i % 97) * 0.01f - 0.5f; }
    float *g = nullptr, *u = nullptr, *o = nullptr;
    cudaError_t err = cudaMalloc(&g, n * 4);
    if (err == cudaSuccess) err = cudaMalloc(&u, n * 4);
    if (err == cudaSuccess) err = cudaMalloc(&o, n * 4);
    if (err == cudaSuccess) err = cudaMemcpy(g, gate.data(), n * 4, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) err = cudaMemcpy(u, up.data(), n * 4, cudaMemcpyHostToDevice);
    if (err == cudaSuccess) err = silu_mul(g, u, o, n, nullptr);
    if (err == cudaSuccess) err = cudaMemcpy(out.data(), o, n * 4, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) { std::printf("error %s\n", cudaGetErrorName(err)); return 1; }
    long wrong = 0;
    for (long i = 0; i < n; ++i) {
        const double x = gate[i], want = x / (1.0 + std::exp(-x)) * up[i];
        wrong += std::fabs(out[i] - want) > 1e-5 + 1e-4 * std::fabs(want);
    }
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (wrong) { std::printf("wrong %ld\n", wrong); return 1; }
    std::printf("ok %d%d\n", major, minor);
    return 0;
}
"""


@pytest.mark.slow
@pytest.mark.gpu
def test_a_gpu_newer_than_every_variant_runs_the_one_carrying_ptx(manifest: Manifest, tmp_path: Path) -> None:
    """silu_mul with one variant for sm_80 and another for sm_86 (the highest, so it carries PTX), built into a
    program and run on the GPU present (sm_90 on an H200): no variant's machine code runs there, so the
    dispatcher must call the sm_86 variant, whose PTX the driver JIT-compiles; the outputs are checked."""
    from dataclasses import replace

    tc = require_toolchain()
    older = replace(manifest, settings=replace(manifest.settings, archs=["sm_80", "sm_86"]), targets={})
    silu = replace(manifest.kernel("silu_mul"), archs=None)
    older = replace(older, kernels=[silu])
    winners = [
        Winner(silu, "sm_80", source_of(manifest, "kernels/silu_mul.cu")),
        Winner(silu, "sm_86", source_of(manifest, "kernels/silu_mul_vec4.cu", "file", BLOCK=256)),
    ]
    generated = write_generated(tmp_path / "generated", older, winners)
    assert "r1build_cc >= 86" in (generated.out_dir / DISPATCH_NAME).read_text()
    host = tmp_path / "host"
    host.mkdir()
    (host / "CMakeLists.txt").write_text(GPU_HOST_CMAKE)
    (host / "main.cpp").write_text(GPU_HOST_MAIN)
    build = tmp_path / "build"
    cmake_build(host, build, generated.cmake_file, tc)
    run = subprocess.run([str(build / "gpuhost")], capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr
    if run.stdout.split()[1].startswith("8"):
        pytest.skip("this GPU runs the sm_80/sm_86 machine code itself: the PTX path is not what ran")


PREFIXED_MAIN = """#include "r1build_kernels.h"
#include <cstdio>
int main() {
    const cudaError_t err = mylib_silu_mul(nullptr, nullptr, nullptr, 0, nullptr);
    std::printf("%d %p %p\\n", static_cast<int>(err), reinterpret_cast<void*>(&mylib_matmul),
                reinterpret_cast<void*>(&mylib_transpose));
    return 0;
}
"""


@pytest.mark.slow
@pytest.mark.heavy  # the root's kernels compiled for every arch: 18 s
def test_a_symbol_prefix_renames_what_the_objects_define(manifest: Manifest, tmp_path: Path) -> None:
    """With symbol-prefix = "mylib_", the program links against mylib_* only: the candidates' own extern "C"
    names (silu_mul, matmul, transpose) and the variants' are defined nowhere."""
    from dataclasses import replace

    tc = require_toolchain()
    prefixed = replace(manifest, settings=replace(manifest.settings, symbol_prefix="mylib_"))
    generated = write_generated(tmp_path / "generated", prefixed, mixed_winners(prefixed))
    host = tmp_path / "host"
    host.mkdir()
    (host / "CMakeLists.txt").write_text(HOST_CMAKE.replace(" check.c", ""))
    (host / "main.cpp").write_text(PREFIXED_MAIN)
    build = tmp_path / "build"
    cmake_build(host, build, generated.cmake_file, tc)
    table = subprocess.run(
        ["nm", "--defined-only", str(build / "host")], capture_output=True, text=True, check=True
    ).stdout
    defined = {line.split()[-1] for line in table.splitlines() if line.strip()}
    assert {"mylib_silu_mul", "mylib_matmul", "mylib_transpose"} <= defined
    assert not defined & {"silu_mul", "matmul", "transpose"}
    assert sum(name.startswith("mylib_silu_mul__") for name in defined) == 2
