"""The emitted bindings' files: written only when the manifest asks, removed when it stops asking, the generated
C++ compiles against nanobind, the Python wrapper and its stubs parse, and the CMake file gains
``r1build_python_bindings()``."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from r1build.emit import Winner, write_generated
from r1build.manifest import Manifest, load_manifest
from r1build.records import Candidate, Origin

ROOT = Path(__file__).resolve().parents[2]
BOUND = ROOT / "tests" / "packages" / "bound"
BINDING_FILES = {"r1build_bindings.cpp", "r1build_bindings.py", "r1build_bindings.pyi"}


def winners(manifest: Manifest) -> list[Winner]:
    return [
        Winner(
            spec, arch, Candidate((manifest.root / str(spec.baseline)).read_text(), Origin("baseline", spec.baseline))
        )
        for spec in manifest.kernels
        for arch in manifest.archs_of(spec)
    ]


def test_bindings_are_written_only_when_asked_and_removed_after(tmp_path: Path) -> None:
    project = shutil.copytree(BOUND, tmp_path / "bound")
    manifest = load_manifest(project / "kernels.toml")
    out = tmp_path / "generated"
    emitted = write_generated(out, manifest, winners(manifest))
    assert {p.name for p in out.iterdir()} >= BINDING_FILES
    cmake = emitted.cmake_file.read_text()
    assert "function(r1build_python_bindings)" in cmake
    assert 'install(FILES "${_r1build_bindings_dir}/r1build_bindings.py" DESTINATION "boundpkg" RENAME _k.py)' in cmake
    assert "nanobind_add_module(_k_ext NB_STATIC" in cmake

    text = (project / "kernels.toml").read_text().replace('python = "boundpkg._k"\ntorch-namespace = "boundtest"\n', "")
    (project / "kernels.toml").write_text(text)
    plain = load_manifest(project / "kernels.toml")
    emitted = write_generated(out, plain, winners(plain))
    assert not BINDING_FILES & {p.name for p in out.iterdir()}
    assert {p.name for p in emitted.removed} == BINDING_FILES
    assert "r1build_python_bindings" not in emitted.cmake_file.read_text()


def test_wrapper_and_stubs_parse_with_one_function_per_kernel(tmp_path: Path) -> None:
    manifest = load_manifest(BOUND / "kernels.toml")
    out = tmp_path / "generated"
    write_generated(out, manifest, winners(manifest))
    for name in ("r1build_bindings.py", "r1build_bindings.pyi"):
        tree = ast.parse((out / name).read_text())
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert {"device_count", "scale_rows", "axpy", "iota"} <= set(functions), name
        scale = functions["scale_rows"]
        assert [a.arg for a in scale.args.args] == ["x", "bias", "alpha", "out"]
        assert [a.arg for a in scale.args.kwonlyargs] == ["stream"]
        assert "y[r, c] = alpha * x[r, c] + bias[c]" in str(ast.get_docstring(scale))
        assert [a.arg for a in functions["iota"].args.args] == ["n", "out"]  # a size no input names is passed
    wrapper = (out / "r1build_bindings.py").read_text()
    assert "_register(\"boundtest::axpy\", _axpy_op, _axpy_fake, ('y',))" in wrapper


@pytest.mark.slow
def test_the_generated_module_compiles_against_nanobind(tmp_path: Path) -> None:
    nanobind = pytest.importorskip("nanobind")
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    manifest = load_manifest(BOUND / "kernels.toml")
    out = tmp_path / "generated"
    write_generated(out, manifest, winners(manifest))
    include = Path(nanobind.include_dir())
    found = [Path(shutil.which("nvcc") or "nvcc").resolve().parents[1] / "include", Path("/usr/local/cuda/include")]
    found += sorted(Path("/usr/local").glob("cuda-*/include"))
    cuda = next((p for p in found if (p / "cuda_runtime.h").is_file()), None)
    if cuda is None:
        pytest.skip("no CUDA headers")
    args = [compiler, "-std=c++17", "-fsyntax-only", f"-I{out}", f"-I{include}", f"-I{cuda}"]
    args += [f"-I{include.parent / 'ext' / 'robin_map' / 'include'}", f"-I{sysconfig.get_paths()['include']}"]
    proc = subprocess.run([*args, str(out / "r1build_bindings.cpp")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
