#!/usr/bin/env bash
# One batched GPU session on the lent machine (records: bench/results/gpu_session_*.md). Two lanes run at once
# where two GPUs are visible (nvidia-h200-x2), one after the other on one GPU:
#   lane A: the cheat corpus three times (tests/evaluate/test_evaluate_cheats.py), then the other evaluate tests;
#   lane B: bench/timing_vs_ncu.py, sample_project built locked on the GPU machine and its own tests on cupy and
#           torch, `r1build resolve` of the root manifest on the GPU (winners locked per arch), and the GPU
#           tests outside tests/evaluate.
# Needs the wheels in .whl/ (diskcache, platformdirs, openai and its deps). Logs go to $OUT (at most 8 files).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
export PYTHONUNBUFFERED=1
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
A_GPU=0; B_GPU=$(( GPUS > 1 ? 1 : 0 ))
LIMIT=${LIMIT:-540}

lane_a() {
  export CUDA_VISIBLE_DEVICES=$A_GPU R1BUILD_CACHE_DIR=/tmp/r1build-cache-a
  timeout $(( LIMIT - 20 )) python3 -m pytest tests/evaluate/test_evaluate_cheats.py -q -rfE --tb=line \
    -p no:cacheprovider > "$OUT/cheats.log" 2>&1
  echo "exit $?" >> "$OUT/cheats.log"
  timeout 300 python3 -m pytest tests/evaluate -q -rfE --tb=short -p no:cacheprovider \
    --ignore=tests/evaluate/test_evaluate_cheats.py > "$OUT/evaluate.log" 2>&1
  echo "exit $?" >> "$OUT/evaluate.log"
}

lane_b() {
  export CUDA_VISIBLE_DEVICES=$B_GPU R1BUILD_CACHE_DIR=/tmp/r1build-cache-b
  {
    date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 --version; nvcc --version | tail -2
    python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)"
    echo "== timing vs ncu"
    timeout 200 python3 bench/timing_vs_ncu.py --out "$OUT" 2>&1 | tail -12
    echo "== sample_project: locked build on the GPU machine, then its tests"
    rm -rf /tmp/sample-site sample_project/.r1build
    t0=$(date +%s%N)
    R1BUILD_LOCKED=1 timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --no-index \
      --target /tmp/sample-site ./sample_project > /tmp/sample_build.log 2>&1; rc=$?
    t1=$(date +%s%N)
    echo "sample build rc=$rc in $(( (t1 - t0) / 1000000 )) ms"; tail -15 /tmp/sample_build.log
    (cd /tmp && PYTHONPATH=/tmp/sample-site:$PYTHONPATH timeout 120 python3 -m pytest "$OLDPWD/sample_project/tests" \
      -q -rfE --tb=short -p no:cacheprovider 2>&1) | tail -25
    echo "== r1build resolve of the root manifest on the GPU"
    rm -rf /tmp/root && mkdir /tmp/root && cp -r kernels.toml kernels /tmp/root/ && rm -rf /tmp/root/kernels/_r1build
    t0=$(date +%s%N)
    timeout 240 python3 -m r1build.cli.main resolve -m /tmp/root --offline --json > "$OUT/resolve_root.json" \
      2> /tmp/resolve_root.err; rc=$?
    t1=$(date +%s%N)
    echo "resolve rc=$rc in $(( (t1 - t0) / 1000000 )) ms"; tail -25 /tmp/resolve_root.err
    python3 -m r1build.cli.main status -m /tmp/root 2>&1
    cp /tmp/root/kernels.lock "$OUT/root_kernels.lock"
    echo "== GPU tests outside tests/evaluate"
    timeout 150 python3 -m pytest tests -q -rfE --tb=short -p no:cacheprovider -m gpu --ignore tests/evaluate 2>&1 | tail -25
  } > "$OUT/lane_b.log" 2>&1
}

if (( GPUS > 1 )); then
  lane_a & lane_b & wait
else
  lane_b; lane_a
fi
tail -3 "$OUT/cheats.log" "$OUT/evaluate.log"; grep -E "^(sample build|resolve rc|Worst)" "$OUT/lane_b.log" "$OUT"/timing_vs_ncu.md
