#!/usr/bin/env bash
# One batched GPU session on the lent machine, inside one 10-minute call (records: bench/results/gpu_session_*.md):
#   1. alone on the GPU, what measures time: bench/timing_vs_ncu.py; `r1build resolve` of the root manifest
#      (winners locked per arch, root_kernels.lock); sample_project resolved again and vendored
#      (sample_relock.tar);
#   2. then at once: the cheat corpus three times (tests/evaluate/test_evaluate_cheats.py), beside the sample's
#      locked build and its own tests on cupy and torch, the bad-kernel corpus and the other GPU tests.
# Named phases run instead where given; after a change to the evaluator, `checks speed` fits one call (about 8
# minutes: the correctness groups side by side, then issue 11's figures alone on the GPU).
# Needs the wheels in .whl/ (diskcache, platformdirs, openai and its deps) and bubblewrap in .sbx/, both made by
# bench/device_wheels.sh on the CPU machine. Logs go to $OUT (at most 8 files).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD
export PYTHONUNBUFFERED=1
# the sandbox of model-written code (r1build/sandbox): the machine reaches no package index, so Debian's bubblewrap
# travels in .sbx/ (apt-get download bubblewrap libcap2) and is unpacked here where the image lacks it
if ! command -v bwrap >/dev/null 2>&1 && ls .sbx/bubblewrap_*.deb >/dev/null 2>&1; then
  rm -rf /tmp/bw && for deb in .sbx/*.deb; do dpkg -x "$deb" /tmp/bw; done
  cp /tmp/bw/usr/bin/bwrap /usr/local/bin/bwrap
  ldd /usr/local/bin/bwrap | grep -q "not found" && cp -n /tmp/bw/usr/lib/x86_64-linux-gnu/libcap.so.2* /usr/lib/x86_64-linux-gnu/ 2>/dev/null
fi
echo "sandbox: $(bwrap --version 2>&1) $(python3 -c 'from r1build.sandbox.bwrap import find_bwrap, probe; e = find_bwrap(); print(e, probe(e) if e else "none")' 2>&1)"

quiet() {  # what measures time, alone on the GPU
  {
    date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 --version; nvcc --version | tail -2
    python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)"
    if [ -z "${SKIP_NCU:-}" ]; then
      echo "== timing vs ncu"
      timeout 200 python3 bench/timing_vs_ncu.py --out "$OUT" 2>&1 | tail -12
    fi
    echo "== r1build resolve of the root manifest on the GPU"
    # a fresh cache every time: a machine kept warm between calls still holds the last call's decisions
    rm -rf /tmp/root /tmp/r1build-cache-root && mkdir /tmp/root && cp -r kernels.toml kernels /tmp/root/ && rm -rf /tmp/root/kernels/_r1build
    t0=$(date +%s%N)
    R1BUILD_CACHE_DIR=/tmp/r1build-cache-root timeout "${RESOLVE_LIMIT:-400}" python3 -m r1build.cli.main resolve -m /tmp/root \
      --offline --json -vv > "$OUT/resolve_root.json" 2> /tmp/resolve_root.err; rc=$?
    t1=$(date +%s%N)
    # the debug lines of resolve's phases carry the clock: their first against t0 is the start (imports), their
    # last against t1 the end (rendering, interpreter exit); bench/results/resolve_overhead.md
    echo "resolve rc=$rc in $(( (t1 - t0) / 1000000 )) ms (clock $t0 to $t1 ns)"
    grep -E "r1build.resolve: (resolve|judges):|r1build.evaluate.evaluator: closed" /tmp/resolve_root.err
    grep -v "^DEBUG" /tmp/resolve_root.err | tail -25
    R1BUILD_CACHE_DIR=/tmp/r1build-cache-root python3 -m r1build.cli.main status -m /tmp/root 2>&1
    cp /tmp/root/kernels.lock "$OUT/root_kernels.lock"
    [ -n "${SKIP_SAMPLE:-}" ] && return
    echo "== sample_project: resolved again on the GPU (a fresh cache, no lock), vendored"
    rm -rf /tmp/sample && cp -r sample_project /tmp/sample && rm -rf /tmp/sample/.r1build /tmp/sample/kernels.lock
    R1BUILD_CACHE_DIR=/tmp/r1build-cache-sample timeout 100 python3 -m r1build.cli.main resolve -m /tmp/sample \
      --offline 2>&1 | tail -30
    R1BUILD_CACHE_DIR=/tmp/r1build-cache-sample timeout 30 python3 -m r1build.cli.main vendor -m /tmp/sample 2>&1 | tail -3
    (cd /tmp/sample && tar cf "$OUT/sample_relock.tar" kernels.lock kernels/_r1build)
  } > "$OUT/quiet.log" 2>&1
}

cheats() {
  timeout "${CHEATS_LIMIT:-260}" python3 -m pytest tests/evaluate/test_evaluate_cheats.py -v -rfE --tb=line \
    -p no:cacheprovider -p no:benchmark > "$OUT/cheats.log" 2>&1
  echo "exit $?" >> "$OUT/cheats.log"
}

rest() {  # correctness work beside the cheats: the sample's build and tests, the corpus, the other GPU tests
  {
    echo "== sample_project: locked build on the GPU machine, then its tests"
    [ -d /tmp/sample ] || cp -r sample_project /tmp/sample  # the vendored winners as committed
    rm -rf /tmp/sample-site
    t0=$(date +%s%N)
    R1BUILD_LOCKED=1 R1BUILD_CACHE_DIR=/tmp/r1build-cache-sample timeout 120 python3 -m pip install -q \
      --no-build-isolation --no-deps --no-index --target /tmp/sample-site /tmp/sample > /tmp/sample_build.log 2>&1
    rc=$?; t1=$(date +%s%N)
    echo "sample build rc=$rc in $(( (t1 - t0) / 1000000 )) ms"; tail -15 /tmp/sample_build.log
    (cd /tmp && PYTHONPATH=/tmp/sample-site:$PYTHONPATH timeout 60 python3 -m pytest /tmp/sample/tests \
      -q -rfE --tb=short -p no:cacheprovider -p no:benchmark 2>&1) | tail -25
    [ -n "${SAMPLE_ONLY:-}" ] && return
    echo "== the bad-kernel corpus and the other evaluate GPU tests"
    R1BUILD_CACHE_DIR=/tmp/r1build-cache-rest timeout 150 python3 -m pytest tests/evaluate -q -rfE --tb=short \
      -p no:cacheprovider -p no:benchmark -m gpu --ignore=tests/evaluate/test_evaluate_cheats.py 2>&1 | tail -30
    echo "== GPU tests outside tests/evaluate"
    R1BUILD_CACHE_DIR=/tmp/r1build-cache-rest timeout 90 python3 -m pytest tests -q -rfE --tb=short \
      -p no:cacheprovider -p no:benchmark -m gpu --ignore tests/evaluate 2>&1 | tail -25
  } > "$OUT/rest.log" 2>&1
}

verify() {  # after a change to the evaluator: the timing test alone, then the GPU tests side by side (`checks`)
  {
    echo "== the root kernels' timing test, alone on the GPU"
    R1BUILD_CACHE_DIR=/tmp/c-timing timeout 400 python3 -m pytest tests/evaluate/test_evaluate_gpu.py \
      -k root_kernels -v -rfE --tb=short -p no:cacheprovider -p no:benchmark 2>&1 | tail -15
  } > "$OUT/verify.log" 2>&1
  tail -n 3 "$OUT/verify.log"
  CHECKS_LIMIT="${VERIFY_LIMIT:-300}" checks
}

sandbox() {  # the sandbox on the GPU: its tests (a slot's worker runs cupy confined), then a confined worker's start
  timeout 120 python3 -m pytest tests/sandbox -q -rfEs --tb=short -p no:cacheprovider -p no:benchmark \
    > "$OUT/sandbox.log" 2>&1
  echo "exit $?" >> "$OUT/sandbox.log"
  timeout 100 python3 bench/sandbox_overhead.py --gpu --out "$OUT" >> "$OUT/sandbox.log" 2>&1
  tail -n 12 "$OUT/sandbox.log"
}

checks() {  # the correctness groups side by side, limit CHECKS_LIMIT (260 s) each: the cheat corpus once, the evaluate GPU
  # tests (corpus, quiet, pristine, gpu_compare), every GPU test outside tests/evaluate; then `speed` may follow alone
  local limit=${CHECKS_LIMIT:-260} site
  timeout "$limit" python3 -m pytest tests/evaluate/test_evaluate_cheats.py -k "${CHEATS_K:-run1 or gate}" -q -rfE --tb=line \
    -p no:cacheprovider -p no:benchmark > "$OUT/cheats.log" 2>&1 &
  R1BUILD_CACHE_DIR=/tmp/c-corpus timeout "$limit" python3 -m pytest tests/evaluate -m gpu \
    --ignore=tests/evaluate/test_evaluate_cheats.py -k "not root_kernels" -q -rfE --tb=short -p no:cacheprovider \
    -p no:benchmark > "$OUT/corpus.log" 2>&1 &
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  PYTHONPATH="$PYTHONPATH:$site" R1BUILD_TEST_SITE_PATH="/tmp/site:$site" R1BUILD_TEST_SYSTEM_SITE=1 \
    R1BUILD_CACHE_DIR=/tmp/c-outside timeout "$limit" python3 -m pytest tests -m gpu --ignore tests/evaluate -q -rfE \
    --tb=short -p no:cacheprovider -p no:benchmark --continue-on-collection-errors > "$OUT/rest.log" 2>&1 &
  wait
  for f in cheats corpus rest; do echo "== $f"; tail -n 4 "$OUT/$f.log"; done
}

throughput() {  # GPU evaluation at scale, alone on the GPU: COPIES distinct copies of every root candidate
  timeout "${THROUGHPUT_LIMIT:-300}" python3 bench/evaluate_root.py --runs 1 --no-job-by-job --no-resolve \
    --copies "${COPIES:-6}" ${THROUGHPUT_ARGS:-} --out "$OUT/bench" > "$OUT/throughput.log" 2>&1
  echo "exit $?" >> "$OUT/throughput.log"
  tail -n 3 "$OUT/throughput.log"
}

profile() {  # where the processes' time goes in evaluate_all of the root's variants, alone on the GPU: py-spy (its wheel
  # carried in .prof/) samples the evaluator and every process it starts (workers, sanitizer runs, compiles) at 97 Hz,
  # idle threads included; the folded stacks (first frame: the process) come back gzipped with the run's tables and
  # nvidia-smi dmon's utilization each second
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/spy .prof/py_spy-*.whl || return 3
  nvidia-smi dmon -s u -o T > "$OUT/dmon.txt" 2>&1 &  # the GPU's busy share each second (SM, memory)
  local dmon=$!
  timeout "${PROFILE_LIMIT:-200}" /tmp/spy/bin/py-spy record --subprocesses --idle --rate 97 --format raw \
    -o /tmp/spy.txt -- python3 bench/evaluate_root.py --runs 1 --no-job-by-job --no-resolve --copies 1 \
    ${THROUGHPUT_ARGS:-} --out "$OUT/profile" > "$OUT/profile.log" 2>&1
  echo "exit $?" >> "$OUT/profile.log"
  kill "$dmon" 2>/dev/null
  rm -f "$OUT/profile/evaluate_root.json"
  gzip -c /tmp/spy.txt > "$OUT/spy.txt.gz"
  grep -E "^run 1" "$OUT/profile.log"; tail -n 2 "$OUT/profile.log"
}

speed() {  # issue 11's figures, alone on the GPU: evaluate_all of the root's variants (with the per-job timeline),
  # then `r1build resolve` of the root from a fresh cache (about 4 minutes together)
  timeout "${THROUGHPUT_LIMIT:-200}" python3 bench/evaluate_root.py --runs 1 --no-job-by-job --no-resolve \
    --copies "${COPIES:-1}" ${THROUGHPUT_ARGS:-} --out "$OUT/bench" > "$OUT/throughput.log" 2>&1
  echo "exit $?" >> "$OUT/throughput.log"
  grep -E "^run 1" "$OUT/throughput.log"
  SKIP_NCU=1 SKIP_SAMPLE=1 RESOLVE_LIMIT="${RESOLVE_LIMIT:-200}" quiet
  grep -E "resolve rc" "$OUT/quiet.log"
}

variants() {  # evaluate_all of the root's variants once per evaluator option set, alone on the GPU one after another
  # (about 95 s each; VARIANTS is a ;-separated list of bench/evaluate_root.py options, "" the defaults; by
  # default each option alone against the defaults), each
  # run's tables (per candidate, per job) in $OUT/variant-<n>/evaluate_root.md
  # (a word NAME=value sets that variable for the run: TMPDIR=/dev/shm puts the evaluator's files in memory)
  local n=0 args word
  IFS=';' read -r -a sets <<< "${VARIANTS:-;--time-before-sanitized;--check-workers 8;TMPDIR=/dev/shm}"
  for args in "${sets[@]}"; do
    n=$((n + 1))
    local envs=() opts=()
    for word in $args; do
      case $word in --*) opts+=("$word") ;; *=*) envs+=("$word") ;; *) opts+=("$word") ;; esac
    done
    env "${envs[@]}" timeout "${THROUGHPUT_LIMIT:-150}" python3 bench/evaluate_root.py --runs 1 --no-job-by-job \
      --no-resolve --copies 1 "${opts[@]}" --out "$OUT/variant-$n" > /tmp/variant-$n.log 2>&1
    echo "variant $n [$args]: $(grep -E "^run 1" /tmp/variant-$n.log || tail -n 1 /tmp/variant-$n.log)"
    rm -f "$OUT/variant-$n/evaluate_root.json"  # the tables are in its .md; few files come back from a call
  done | tee "$OUT/variants.log"
}

final() {  # the session's last call: the root resolved alone (cache kept for the perf model and the report), the
  # perf model measured against it, then the sample's locked build and tests beside every GPU test outside
  # tests/evaluate; the cache exported for the report screenshot made on the CPU machine
  {
    echo "== r1build resolve of the root manifest (fresh cache, no lock), alone on the GPU"
    rm -rf /tmp/root && mkdir /tmp/root && cp -r kernels.toml kernels /tmp/root/ && rm -rf /tmp/root/kernels/_r1build
    R1BUILD_CACHE_DIR=/tmp/r1build-cache-root timeout "${RESOLVE_LIMIT:-400}" python3 -m r1build.cli.main resolve -m /tmp/root \
      --offline > /tmp/resolve_root.out 2>&1; echo "resolve rc=$?"; tail -16 /tmp/resolve_root.out
    cp /tmp/root/kernels.lock "$OUT/root_kernels.lock"
    echo "== the performance model against measured times"
    timeout 300 python3 bench/perf_model.py --measure --cache-dir /tmp/r1build-cache-root --out "$OUT" 2>&1 | tail -25
    R1BUILD_CACHE_DIR=/tmp/r1build-cache-root timeout 60 python3 -m r1build.cli.main cache export "$OUT/h200.r1b" \
      2>&1 | tail -2
  } > "$OUT/final.log" 2>&1
  rest &
  # the build tests' venv sees this Python's packages (the machine has no index): its site-packages on the path
  local site; site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  PYTHONPATH="$PYTHONPATH:$site" R1BUILD_TEST_SITE_PATH="/tmp/site:$site" R1BUILD_TEST_SYSTEM_SITE=1 R1BUILD_CACHE_DIR=/tmp/c-outside timeout "${FINAL_LIMIT:-280}" python3 -m pytest tests -m gpu \
    --ignore tests/evaluate -v -rfE --tb=short --durations=15 -p no:cacheprovider -p no:benchmark --continue-on-collection-errors \
    > "$OUT/outside.log" 2>&1 &
  wait
  for f in final rest outside; do tail -n 4 "$OUT/$f.log"; done
}

before() {  # issue 27's classes against the evaluator before its third round: the tree 587dc49's r1build beside
  # today's tests, kernels and manifest, unpacked on the CPU machine into before/ (carried): every case listed must FAIL
  # there (the cheat passes, the reason differs), which is the "passes before" half of each regression kernel
  # (git archive 587dc49 r1build | tar -x -C before; cp -r tests kernels kernels.toml pyproject.toml before/)
  [ -d before/r1build ] || { echo "no before/ tree"; return; }
  (cd before && PYTHONPATH=/tmp/site:$PWD timeout "${BEFORE_LIMIT:-200}" python3 -m pytest \
    tests/evaluate/test_evaluate_cheats.py -k "run1 and (${BEFORE_K:-bench_ or replay_epoch or reentrancy or aligned_fast or overread_large or lazy_finger or tf32})" \
    -q -rfE --tb=line -p no:cacheprovider -p no:benchmark) > "$OUT/before.log" 2>&1
  echo "exit $?" >> "$OUT/before.log"
  tail -n 14 "$OUT/before.log"
}

ab() {  # evaluate_all of the root's variants from two trees alone on the GPU, alternating (AB_RUNS pairs, default 1):
  # this tree, then ab/ (a commit's r1build and bench, unpacked on the CPU machine and carried:
  # rm -rf ab && mkdir ab && git archive <commit> r1build bench kernels kernels.toml | tar -x -C ab), each run's
  # tables in $OUT/ab-<tree>-<n>/evaluate_root.md; a change to the evaluator's speed measured against its parent on
  # one host (the hosts differ by 10 %)
  [ -d ab/r1build ] || { echo "no ab/ tree"; return; }
  local n tree
  for n in $(seq 1 "${AB_RUNS:-1}"); do
    for tree in . ab; do
      (cd "$tree" && PYTHONPATH=/tmp/site:$PWD timeout "${THROUGHPUT_LIMIT:-150}" python3 bench/evaluate_root.py --runs 1 \
        --no-job-by-job --no-resolve --copies 1 --out "$OUT/ab-${tree/./this}-$n") > /tmp/ab.log 2>&1
      echo "ab ${tree/./this} $n: $(grep -E "^run 1" /tmp/ab.log || tail -n 1 /tmp/ab.log)"
      rm -f "$OUT/ab-${tree/./this}-$n/evaluate_root.json"
    done
  done | tee "$OUT/ab.log"
}

timeline() {  # where the time goes: one evaluate_all of the root with every span kept (evaluate_root.json.gz, for
  # offline study of the first seconds and the sanitizer runs), then TIMELINE_RESOLVES resolves (default 1), each
  # with the evaluator's account at debug level (its counters and per-job milestones) in resolve-<n>.log
  lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))" > "$OUT/cpu.log"
  # what runs on the CPU in the first seconds (the gate's compiles compete with what else?): top every second
  (sleep 1; top -b -d 1 -n 16 -w 220 | grep -E "^top|^ *[0-9]+ " | awk '/^top/ {n=0} n++ < 14') >> "$OUT/cpu.log" &
  timeout "${THROUGHPUT_LIMIT:-150}" python3 bench/evaluate_root.py --runs 1 --no-job-by-job --no-resolve --copies 1 \
    --out /tmp/timeline > /tmp/timeline.log 2>&1
  wait
  grep -E "^run 1" /tmp/timeline.log || tail -n 5 /tmp/timeline.log
  gzip -c /tmp/timeline/evaluate_root.json > "$OUT/evaluate_root.json.gz"
  local n
  for n in $(seq 1 "${TIMELINE_RESOLVES:-1}"); do
    SKIP_NCU=1 SKIP_SAMPLE=1 quiet
    grep -E "^resolve rc" "$OUT/quiet.log"
    grep -E "^resolve rc|r1build.resolve: (resolve|judges):|r1build.evaluate.evaluator: " /tmp/resolve_root.err \
      > "$OUT/resolve-$n.log"
    grep -E "^resolve rc" "$OUT/quiet.log" >> "$OUT/resolve-$n.log"
  done
}

order() {  # the start order A/B on one host: evaluate_all with the default (the smallest job first) against
  # --largest-first, alternating (ORDER_PAIRS pairs, default 2; the first run's spans kept in evaluate_root.json.gz and
  # the CPU sampled for its first 16 s in cpu.log), each run's per-job table in order.log; then `r1build resolve` of the
  # root (quiet; resolves.log with the evaluator's account) while ORDER_UNTIL seconds of the call are not spent
  local n args i=0 began=$SECONDS  # (not t0: quiet sets a t0 of its own, which bash scoping would share)
  rm -f /tmp/order-tables.log
  lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))" > "$OUT/cpu.log"
  for n in $(seq 1 "${ORDER_PAIRS:-2}"); do
    for args in "" "--largest-first"; do
      i=$((i + 1))
      [ "$i" = 1 ] && (sleep 1; top -b -d 1 -n 16 -w 220 | grep -E "^top|^ *[0-9]+ " | awk '/^top/ {n=0} n++ < 14') \
        >> "$OUT/cpu.log" &
      # shellcheck disable=SC2086
      timeout "${THROUGHPUT_LIMIT:-150}" python3 bench/evaluate_root.py --runs 1 --no-job-by-job --no-resolve \
        --copies 1 $args --out "/tmp/order-$i" > "/tmp/order-$i.log" 2>&1
      wait
      echo "order $n [${args:-default}]: $(grep -E "^run 1" "/tmp/order-$i.log" || tail -n 1 "/tmp/order-$i.log")"
      sed -n '/^Per job/,/^Run 1/p' "/tmp/order-$i/evaluate_root.md" >> /tmp/order-tables.log
      [ "$i" = 1 ] && gzip -c "/tmp/order-$i/evaluate_root.json" > "$OUT/evaluate_root.json.gz"
    done
  done | tee "$OUT/order.log"
  cat /tmp/order-tables.log >> "$OUT/order.log" 2>/dev/null
  n=0
  while [ $((SECONDS - began)) -lt "${ORDER_UNTIL:-440}" ]; do
    n=$((n + 1))
    SKIP_NCU=1 SKIP_SAMPLE=1 quiet
    grep -E "^resolve rc|r1build.resolve: (resolve|judges):|r1build.evaluate.evaluator: " /tmp/resolve_root.err \
      >> "$OUT/resolves.log"
    grep -E "^resolve rc" "$OUT/quiet.log" | tee -a "$OUT/resolves.log"
  done
  rm -f "$OUT/resolve_root.json" "$OUT/root_kernels.lock"  # few files come back from a call
}

recheck() {  # the tests the final phase failed, after their fixes: PTX wheels, the loop's second round, ncu
  rest &
  local site; site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  PYTHONPATH="$PYTHONPATH:$site" R1BUILD_TEST_SITE_PATH="/tmp/site:$site" R1BUILD_TEST_SYSTEM_SITE=1 \
    timeout "${RECHECK_LIMIT:-190}" python3 -m pytest -m gpu -v -rfE --tb=short -p no:cacheprovider -p no:benchmark \
    tests/build/test_build_packages.py::test_a_wheel_for_an_older_arch_runs_on_this_gpu_through_its_ptx \
    > "$OUT/recheck_ptx.log" 2>&1 &
  timeout "${RECHECK_LIMIT:-190}" python3 -m pytest -m gpu -v -rfE --tb=short -p no:cacheprovider -p no:benchmark \
    tests/generate/test_generate_resolve.py tests/profile/test_profile_gpu.py > "$OUT/recheck_loop.log" 2>&1 &
  wait
  for f in rest recheck_ptx recheck_loop; do tail -n 4 "$OUT/$f.log"; done
}

fixes() {  # what the last call failed, after its fixes: the cheats of FIXES_K in every run beside the GPU tests of
  # FIXES_TESTS (node ids), each limited to FIXES_LIMIT (240 s)
  local site; site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  timeout "${FIXES_LIMIT:-240}" python3 -m pytest tests/evaluate/test_evaluate_cheats.py -k "${FIXES_K:-honest}" -q \
    -rfE --tb=line -p no:cacheprovider -p no:benchmark > "$OUT/cheats.log" 2>&1 &
  # shellcheck disable=SC2086
  PYTHONPATH="$PYTHONPATH:$site" R1BUILD_TEST_SITE_PATH="/tmp/site:$site" R1BUILD_TEST_SYSTEM_SITE=1 \
    R1BUILD_CACHE_DIR=/tmp/c-fixes timeout "${FIXES_LIMIT:-240}" python3 -m pytest -m gpu -q -rfE --tb=short \
    -p no:cacheprovider -p no:benchmark ${FIXES_TESTS:-tests/evaluate/test_evaluate_pristine.py} > "$OUT/rest.log" 2>&1 &
  wait
  for f in cheats rest; do echo "== $f"; tail -n 6 "$OUT/$f.log"; done
}

# phases to run (default: all, the cheats beside the rest); e.g. `bash bench/gpu_session.sh quiet cheats` in one
# call and `bash bench/gpu_session.sh rest` in the next, where one call's 10 minutes are not enough for all
if [ $# -eq 0 ]; then
  quiet
  cheats & rest & wait
else
  for phase in "$@"; do "$phase"; done
fi
touch "$OUT/cheats.log" "$OUT/quiet.log" "$OUT/rest.log"
tail -4 "$OUT/cheats.log"; grep -E "^(sample build|resolve rc|Worst)|passed|failed" "$OUT/quiet.log" "$OUT/rest.log" \
  "$OUT"/timing_vs_ncu.md
