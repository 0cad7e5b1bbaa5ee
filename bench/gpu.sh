#!/usr/bin/env bash
# One call on a GPU machine: build grid against the installed torch (JIT, sm_90 by default),
# run the whole test suite (CUDA tests included), then the benchmarks. Logs, the benchmark
# table and its JSON go to $OUT (default bench/results).
#   bash bench/gpu.sh [all|tests|bench] [extra bench_ops.py arguments...]
# TESTS (default tests/) picks the test files, e.g. TESTS=tests/test_total_variation.py.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
shift || true
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PYTHONUNBUFFERED=1
export MAX_JOBS=${MAX_JOBS:-$(nproc)} TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/grid_ext}
status=0

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv \
  | tee "$OUT/device.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
  | tee -a "$OUT/device.txt"

start=$(date +%s)
GRID_VERBOSE_BUILD=1 python3 -c "import grid, grid._backend as b; print('built', b.source, 'cuda kernels:', b.has_cuda_kernels)" \
  >"$OUT/build.log" 2>&1 || { tail -n 60 "$OUT/build.log"; exit 1; }
tail -n 1 "$OUT/build.log"
echo "build: $(($(date +%s) - start)) s"

if [ "$what" = all ] || [ "$what" = tests ]; then
  python3 -m pytest -q -p no:cacheprovider -rfE --durations=8 ${TESTS:-tests/} 2>&1 \
    | tee "$OUT/tests.log" | tail -n 30
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  python3 bench/bench_ops.py --device cuda --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log" \
    | tail -n 60
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  # the S1 forward's bound: the same loads and stores without the cell computation
  python3 bench/gather_probe.py --json "$OUT/gather_probe.json" 2>&1 | tee -a "$OUT/bench.log" \
    | tail -n 8
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
exit $status
