#!/usr/bin/env bash
# One batched GPU session on the lent machine (see bench/results/gpu_session_*.md for runs):
#   1. the evaluate stage's tests (GPU and CPU),
#   2. sample_project built there (locked, no network) and its own tests on cupy and torch,
#   3. `r1build resolve` of the root manifest on the GPU: baseline, hand-written files and every tunable value
#      set validated and timed, a winner locked per arch (arches without a local GPU keep the gate's verdict).
#   4. (STEPS has "bench") bench/evaluate_root.py over every visible GPU, results under $OUT/bench.
# STEPS picks the steps (default "evaluate sample resolve"). Needs the wheels in .whl/ (diskcache,
# platformdirs, rich and its deps). Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
export R1BUILD_CACHE_DIR=/tmp/r1build-cache
export PYTHONUNBUFFERED=1
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 --version; nvcc --version | tail -2
  python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)"
  git rev-parse --short HEAD 2>/dev/null || true
} 2>&1 | tee "$OUT/env.txt"

STEPS=${STEPS:-evaluate sample resolve}
has() { [[ " $STEPS " == *" $1 "* ]]; }

if has evaluate; then
echo "== 1. tests/evaluate"
python3 -m pytest tests/evaluate -q -rfEs -p no:cacheprovider 2>&1 | tee "$OUT/evaluate_tests.log" | tail -15

fi

if has sample; then
echo "== 2. sample_project: locked build on the GPU machine, then its tests"
rm -rf /tmp/sample-site sample_project/.r1build
t0=$(date +%s%N)
R1BUILD_LOCKED=1 python3 -m pip install -q --no-build-isolation --no-deps --no-index --target /tmp/sample-site \
  ./sample_project > "$OUT/sample_build.log" 2>&1; rc=$?
t1=$(date +%s%N)
echo "sample build rc=$rc in $(( (t1 - t0) / 1000000 )) ms"; tail -5 "$OUT/sample_build.log"
(cd /tmp && PYTHONPATH=/tmp/sample-site:$PYTHONPATH python3 -m pytest "$OLDPWD/sample_project/tests" -q -rfEs \
  -p no:cacheprovider 2>&1) | tee "$OUT/sample_tests.log" | tail -8

fi

if has resolve; then
echo "== 3. r1build resolve of the root manifest on the GPU"
rm -rf /tmp/root && mkdir /tmp/root && cp -r kernels.toml kernels /tmp/root/ && rm -rf /tmp/root/kernels/_r1build
t0=$(date +%s%N)
python3 -m r1build.cli.main resolve -m /tmp/root --offline --json > "$OUT/resolve_root.json" 2> "$OUT/resolve_root.err"; rc=$?
t1=$(date +%s%N)
echo "resolve rc=$rc in $(( (t1 - t0) / 1000000 )) ms"; tail -5 "$OUT/resolve_root.err"
python3 -m r1build.cli.main status -m /tmp/root 2>&1 | tee "$OUT/status_root.txt"
cp /tmp/root/kernels.lock "$OUT/root_kernels.lock"
t0=$(date +%s%N)
python3 -m r1build.cli.main resolve -m /tmp/root --locked > /dev/null 2>&1; rc=$?
t1=$(date +%s%N)
echo "warm resolve --locked rc=$rc in $(( (t1 - t0) / 1000000 )) ms"
fi

if has bench; then
echo "== 4. bench/evaluate_root.py"
python3 bench/evaluate_root.py --runs 1 --out "$OUT/bench" 2>&1 | tail -30
fi
