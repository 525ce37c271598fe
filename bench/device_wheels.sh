#!/usr/bin/env bash
# What a GPU call carries that the lent machine cannot fetch (it reaches no package index), made on the CPU machine
# in the repository root (the three folders are git-ignored through .git/info/exclude):
#   .whl/   the Python packages r1build and its GPU tests need that the device's image lacks, for its Python 3.12
#           (bench/gpu_session.sh installs them with --target /tmp/site);
#   .sbx/   Debian's bubblewrap and libcap2, unpacked there where the image has no bwrap (the sandbox);
#   .prof/  py-spy, for the `profile` phase.
# The device's package list: /work/.library/device/KINDS.md. Carry: [".whl", ".sbx"] (and ".prof" for `profile`).
set -euo pipefail
cd "$(dirname "$0")/.."
for ignored in /.whl/ /.sbx/ /.prof/ /ab/ /cur/; do
  grep -qxF "$ignored" .git/info/exclude 2>/dev/null || echo "$ignored" >> .git/info/exclude
done

fetch() {  # fetch DIR NAME...: binary wheels for CPython 3.12 on manylinux x86_64, no dependencies (named instead)
  local dir=$1
  shift
  mkdir -p "$dir"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
    --platform manylinux1_x86_64 -d "$dir" "$@"
}

pin() {  # pin NAME: NAME==VERSION as a downloaded wheel in .whl pins it exactly, else NAME
  local found
  found=$(for w in .whl/*.whl; do unzip -p "$w" '*.dist-info/METADATA'; done | grep -iE "^Requires-Dist: $1 ?==" |
    head -1 | sed -E 's/^Requires-Dist: ([^ ;]+) ?(==[^ ;,]+).*/\1\2/')
  echo "${found:-$1}"
}

rm -rf .whl
# r1build's own needs (pyproject.toml) and the openai client's, where the image has none of them; the packages that
# pin a sibling exactly (pydantic its core, httpx2 its httpcore2) first, the sibling at that pin
fetch .whl diskcache platformdirs tomli cryptography cffi pycparser openai pydantic httpx2
fetch .whl "$(pin pydantic-core)" "$(pin httpcore2)" distro jiter sniffio typing-inspection annotated-types \
  typing-extensions anyio h11 idna truststore
# the GPU tests outside tests/evaluate: the report's browser test, the build-package test's wheel build, the report's
# figures (the ncu feedback test draws its report), the dataset export's schema check
fetch .whl websockets hatchling pathspec trove-classifiers plotly narwhals packaging jsonschema attrs referencing \
  rpds-py jsonschema-specifications
# one version of each name, or the install on the device stops
dupes=$(ls .whl | sed -E 's/-[0-9].*//' | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dupes" ] || { echo "two versions of: $dupes" >&2; exit 1; }

rm -rf .sbx && mkdir .sbx
(cd .sbx && apt-get download bubblewrap libcap2)

rm -rf .prof
fetch .prof py-spy
du -sh .whl .sbx .prof
