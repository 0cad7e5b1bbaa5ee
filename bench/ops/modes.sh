#!/usr/bin/env bash
# The kernel modes of bench/gpu.sh (which builds grid first and sets OUT):
#   bash bench/gpu.sh [all|tests|bench] [extra bench_ops.py arguments...]
# `tests`: the whole test suite, CUDA tests included ($OUT/tests.log); TESTS="tests/test_x.py
# ..." runs only those; TEST_SHARDS=K runs them as K pytest processes at once (below). `bench`: bench/ops/bench_ops.py on CUDA, its table in $OUT/bench.log and
# its JSON in $OUT/bench.json, then the probes (bench/probes/<name>_probe.py) PROBES names
# (default gather; PROBES= runs none; gather = the S1 forward's bound, the same loads and stores
# without the cell computation; small_f = the small-F kernel variants on S5's rays; scatter =
# the S1 / S2 backward's atomic scatter alone, in the points' order and sorted by cell), each
# writing $OUT/<name>_probe.json. `all`: tests, then bench. `multires`: tests/grid/test_multires.py, then
# bench/ops/multires.py ($OUT/multires.md, .json), beside torch-ngp's gridencoder when NGP names
# its folder (default .anchors/torch-ngp/gridencoder, where present; bench-only, never shipped).
set -uo pipefail
cd "$(dirname "$0")/../.."
what=$1
shift
status=0

if { [ "$what" = all ] || [ "$what" = tests ]; } && [ "${TEST_SHARDS:-1}" -gt 1 ]; then
  # TEST_SHARDS=K: the test files split into K shards of about equal bytes, one pytest each,
  # at once (every shard sees every GPU; a suite of small CUDA tests shares one GPU well and
  # a host's CPUs run the rest): the whole suite in about 1/K of its time. Each shard's log in
  # $OUT/tests_<i>.log, all of them in $OUT/tests.log. Each shard's torch gets its share of
  # the host's cores (OMP_NUM_THREADS, unless set): K shards of a thread a core each
  # oversubscribe the host K times over, and slow every job beside them.
  # shellcheck disable=SC2086  # TESTS is a list of paths
  mapfile -t shards < <(python3 bench/ops/shard_tests.py "$TEST_SHARDS" ${TESTS:-tests/})
  threads=${OMP_NUM_THREADS:-$(($(nproc) / TEST_SHARDS))}
  [ "$threads" -ge 1 ] || threads=1
  pids=()
  for i in "${!shards[@]}"; do
    # shellcheck disable=SC2086  # a shard is a list of paths
    OMP_NUM_THREADS=$threads python3 -m pytest -q -p no:cacheprovider -rfE ${shards[$i]} \
      >"$OUT/tests_$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    echo "shard $i: $(tail -n 1 "$OUT/tests_$i.log")"
  done
  cat "$OUT"/tests_*.log >"$OUT/tests.log"
  grep -h "^FAILED\|^ERROR" "$OUT"/tests_*.log | head -n 30
elif [ "$what" = all ] || [ "$what" = tests ]; then
  # shellcheck disable=SC2086  # TESTS is a list of paths
  python3 -m pytest -q -p no:cacheprovider -rfE --durations=8 ${TESTS:-tests/} 2>&1 \
    | tee "$OUT/tests.log" | tail -n 30
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  python3 bench/ops/bench_ops.py --device cuda --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log" \
    | tail -n 60
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  for probe in ${PROBES-gather}; do
    python3 "bench/probes/${probe}_probe.py" --json "$OUT/${probe}_probe.json" 2>&1 \
      | tee -a "$OUT/bench.log" | tail -n 40
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
if [ "$what" = multires ]; then
  python3 -m pytest -q -p no:cacheprovider -rfE tests/grid/test_multires.py 2>&1 | tee "$OUT/tests.log" | tail -n 20
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  ngp=${NGP:-.anchors/torch-ngp/gridencoder}
  args=()
  [ -d "$ngp" ] && args=(--ngp "$ngp")
  python3 bench/ops/multires.py --out "$OUT" "${args[@]}" "$@" 2>&1 | tee "$OUT/multires.log" | tail -n 40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
exit $status
