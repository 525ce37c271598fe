#!/usr/bin/env bash
# The GPU side of issue 12 (resolve --cluster) in one call on the lent machine (nvidia-h200-x2; runs on one GPU too):
#   1. bench/cluster_throughput.py: the root manifest through a scheduler here and `r1build worker` on 1, then
#      every, GPU (ratio N ÷ 1, target ≥ 1.8), results to $OUT;
#   2. the cluster GPU tests (tests/cluster/test_cluster_gpu.py: a crash and a hang are candidates' results, the
#      winner validated with GPU and host; with two GPUs, both take jobs);
#   3. sample_project resolved through the cluster (fresh cache, no lock), built locked from those winners, and
#      its own tests run.
# Needs the wheels in .whl/ (as bench/gpu_session.sh), distributed and its dependencies among them. Logs in $OUT.
# One phase per call keeps each under the 10-minute limit: bench/cluster_session.sh throughput|tests|sample|all
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
export PYTHONUNBUFFERED=1

throughput() {
{
  date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  python3 --version; nvcc --version | tail -2
  echo "== throughput: the root manifest on N GPU workers vs 1"
  timeout 540 python3 bench/cluster_throughput.py --runs 2 --out "$OUT" 2>&1 | tail -30
  echo "exit ${PIPESTATUS[0]}"
} > "$OUT/cluster_throughput.log" 2>&1
}

tests() {
timeout 240 python3 -m pytest tests/cluster/test_cluster_gpu.py -v -rfE --tb=short -p no:cacheprovider \
  > "$OUT/cluster_gpu_tests.log" 2>&1
echo "exit $?" >> "$OUT/cluster_gpu_tests.log"
}

sample() {
{
  echo "== sample_project through the cluster"
  python3 -m distributed.cli.dask_scheduler --host 127.0.0.1 --port 8786 --no-dashboard > /tmp/sched.log 2>&1 &
  sched=$!
  sleep 3
  python3 -m r1build.cli.main worker --scheduler tcp://127.0.0.1:8786 --compile-slots 4 > /tmp/workers.log 2>&1 &
  workers=$!
  python3 -c "import sys; from distributed import Client
Client('tcp://127.0.0.1:8786', timeout=60).wait_for_workers(int(sys.argv[1]), timeout=180)" \
    $(( $(nvidia-smi -L | wc -l) + 1 )) || echo "the workers did not all join"
  rm -rf /tmp/sample-c && cp -r sample_project /tmp/sample-c && rm -rf /tmp/sample-c/.r1build /tmp/sample-c/kernels.lock
  R1BUILD_CACHE_DIR=/tmp/r1build-cache-sample-c timeout 150 python3 -m r1build.cli.main resolve -m /tmp/sample-c \
    --offline --cluster tcp://127.0.0.1:8786 2>&1 | tail -30
  echo "resolve exit ${PIPESTATUS[0]}"
  cat /tmp/sample-c/kernels.lock | grep -E "^(name|arch|validation|gpu|time-us)" | paste - - - - - 2>/dev/null
  R1BUILD_LOCKED=1 R1BUILD_CACHE_DIR=/tmp/r1build-cache-sample-c timeout 120 python3 -m pip install -q \
    --no-build-isolation --no-deps --no-index --target /tmp/sample-c-site /tmp/sample-c 2>&1 | tail -15
  echo "build exit ${PIPESTATUS[0]}"
  (cd /tmp && PYTHONPATH=/tmp/sample-c-site:$PYTHONPATH timeout 60 python3 -m pytest /tmp/sample-c/tests \
    -q -rfE --tb=short -p no:cacheprovider 2>&1) | tail -15
  kill -TERM "$workers"; wait "$workers"; echo "workers exit $?"
  kill -TERM "$sched"; wait "$sched" 2>/dev/null
  tail -20 /tmp/workers.log
} > "$OUT/cluster_sample.log" 2>&1
}

case "${1:-all}" in
  throughput) throughput ;;
  tests) tests ;;
  sample) sample ;;
  all) throughput; tests; sample ;;
  *) echo "usage: $0 throughput|tests|sample|all" >&2; exit 2 ;;
esac
