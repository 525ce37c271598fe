#!/usr/bin/env bash
# One batched GPU session on the lent machine (records: bench/results/gpu_session_*.md). Two lanes run at once
# where two GPUs are visible (nvidia-h200-x2), one after the other on one GPU:
#   lane A: the cheat corpus three times (tests/evaluate/test_evaluate_cheats.py), the other evaluate tests and
#           the GPU tests outside tests/evaluate;
#   lane B: bench/timing_vs_ncu.py; sample_project resolved again on the GPU and vendored (sample_relock.tar),
#           built locked on the GPU machine and its own tests run on cupy and torch; `r1build resolve` of the
#           root manifest on the GPU (winners locked per arch).
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
  timeout 320 python3 -m pytest tests/evaluate/test_evaluate_cheats.py -v -rfE --tb=line \
    -p no:cacheprovider > "$OUT/cheats.log" 2>&1
  echo "exit $?" >> "$OUT/cheats.log"
  {
    timeout 190 python3 -m pytest tests/evaluate -q -rfE --tb=short -p no:cacheprovider \
      --ignore=tests/evaluate/test_evaluate_cheats.py 2>&1
    echo "exit $?"
    echo "== GPU tests outside tests/evaluate"
    timeout 90 python3 -m pytest tests -q -rfE --tb=short -p no:cacheprovider -m gpu --ignore tests/evaluate 2>&1
    echo "exit $?"
  } > "$OUT/evaluate.log" 2>&1
}

lane_b() {
  export CUDA_VISIBLE_DEVICES=$B_GPU R1BUILD_CACHE_DIR=/tmp/r1build-cache-b
  {
    date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 --version; nvcc --version | tail -2
    python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)"
    echo "== timing vs ncu"
    timeout 120 python3 bench/timing_vs_ncu.py --out "$OUT" 2>&1 | tail -12
    echo "== sample_project: resolved again on the GPU (a fresh cache, no lock), vendored"
    rm -rf /tmp/sample && cp -r sample_project /tmp/sample && rm -rf /tmp/sample/.r1build /tmp/sample/kernels.lock
    timeout 130 python3 -m r1build.cli.main resolve -m /tmp/sample --offline 2>&1 | tail -30
    timeout 30 python3 -m r1build.cli.main vendor -m /tmp/sample 2>&1 | tail -3
    (cd /tmp/sample && tar cf "$OUT/sample_relock.tar" kernels.lock kernels/_r1build)
    echo "== sample_project: locked build on the GPU machine, then its tests"
    rm -rf /tmp/sample-site
    t0=$(date +%s%N)
    R1BUILD_LOCKED=1 timeout 150 python3 -m pip install -q --no-build-isolation --no-deps --no-index \
      --target /tmp/sample-site /tmp/sample > /tmp/sample_build.log 2>&1; rc=$?
    t1=$(date +%s%N)
    echo "sample build rc=$rc in $(( (t1 - t0) / 1000000 )) ms"; tail -15 /tmp/sample_build.log
    (cd /tmp && PYTHONPATH=/tmp/sample-site:$PYTHONPATH timeout 90 python3 -m pytest /tmp/sample/tests \
      -q -rfE --tb=short -p no:cacheprovider 2>&1) | tail -25
    echo "== r1build resolve of the root manifest on the GPU"
    rm -rf /tmp/root && mkdir /tmp/root && cp -r kernels.toml kernels /tmp/root/ && rm -rf /tmp/root/kernels/_r1build
    t0=$(date +%s%N)
    timeout 150 python3 -m r1build.cli.main resolve -m /tmp/root --offline --json > "$OUT/resolve_root.json" \
      2> /tmp/resolve_root.err; rc=$?
    t1=$(date +%s%N)
    echo "resolve rc=$rc in $(( (t1 - t0) / 1000000 )) ms"; tail -25 /tmp/resolve_root.err
    python3 -m r1build.cli.main status -m /tmp/root 2>&1
    cp /tmp/root/kernels.lock "$OUT/root_kernels.lock"
  } > "$OUT/lane_b.log" 2>&1
}

if (( GPUS > 1 )); then
  lane_a & lane_b & wait
else
  lane_b; lane_a
fi
tail -4 "$OUT/cheats.log"; grep -E "passed|failed" "$OUT/evaluate.log"
grep -E "^(sample build|resolve rc|Worst)|passed|failed" "$OUT/lane_b.log" "$OUT"/timing_vs_ncu.md
