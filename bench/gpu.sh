#!/usr/bin/env bash
# One call on a GPU machine: build grid against the installed torch (JIT, sm_90 by default),
# run the whole test suite (CUDA tests included), then the benchmarks. Logs, the benchmark
# table and its JSON go to $OUT (default bench/results).
#   bash bench/gpu.sh [all|tests|bench] [extra bench_ops.py arguments...]
# TESTS="tests/test_x.py ..." runs only those tests; PROBES="gather small_f scatter" picks the
# probes run after the benchmark (default gather; PROBES= runs none).
#   bash bench/gpu.sh nerf [extra --set KEY=VALUE for both runs...]
# `nerf`: configs/nerf_scene_gpu.toml trained with both backends (the scene
# is generated on the GPU first), and N1 (bench/bench_nerf.py) on the native run's final
# checkpoint. Writes to $OUT: nerf.log (all output), nerf_runs.json (both summaries and
# metrics), bench_nerf.json/.md and the native run's test_views.png, curves.png, turntable.gif.
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
  # shellcheck disable=SC2086  # TESTS is a list of paths
  python3 -m pytest -q -p no:cacheprovider -rfE --durations=8 ${TESTS:-tests/} 2>&1 \
    | tee "$OUT/tests.log" | tail -n 30
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  python3 bench/bench_ops.py --device cuda --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log" \
    | tail -n 60
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  # probes: gather = the S1 forward's bound (the same loads and stores without the cell
  # computation); small_f = the small-F kernel variants on S5's rays; scatter = the S1 / S2
  # backward's atomic scatter alone, in the points' order and sorted by cell
  for probe in ${PROBES-gather}; do
    python3 "bench/${probe}_probe.py" --json "$OUT/${probe}_probe.json" 2>&1 \
      | tee -a "$OUT/bench.log" | tail -n 40
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
if [ "$what" = nerf ]; then
  runs=${NERF_RUNS:-/tmp/nerf_runs}
  rm -rf "$runs"
  : >"$OUT/nerf.log"
  {
    backends=${NERF_BACKENDS:-native grid_sample}
    for backend in $backends; do
      pictures=$([ "$backend" = native ] && echo true || echo false)
      python3 -m train --config configs/nerf_scene_gpu.toml --out "$runs/$backend" \
        --set grid.backend=$backend --set output.pictures=$pictures --set output.progress=false \
        "$@" >"$runs.$backend.json" || status=1
      tail -n 4 "$runs/$backend/metrics.jsonl" 2>/dev/null | cut -c1-300
    done
    python3 bench/bench_nerf.py --config configs/nerf_scene_gpu.toml \
      --checkpoint "$runs/native/checkpoint.pt" --json "$OUT/bench_nerf.json" \
      ${NERF_PROFILE:+--profile} || status=1
  } >"$OUT/nerf.log" 2>&1
  grep -v "^  " "$OUT/nerf.log" | tail -n 60
  python3 - "$runs" "$OUT/nerf_runs.json" <<'PY'
import json, pathlib, sys
runs, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
result = {}
for d in sorted(p for p in runs.iterdir() if p.is_dir()):
    summary = d / "summary.json"
    metrics = d / "metrics.jsonl"
    result[d.name] = {
        "summary": json.loads(summary.read_text()) if summary.exists() else None,
        "metrics": [json.loads(l) for l in metrics.read_text().splitlines()] if metrics.exists() else [],
    }
out.write_text(json.dumps(result, indent=2))
PY
  for f in test_views.png curves.png turntable.gif; do cp "$runs/native/$f" "$OUT/" 2>/dev/null; done
fi
exit $status
