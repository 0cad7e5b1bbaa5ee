#!/usr/bin/env bash
# The nerfacc mode of bench/gpu.sh (which builds grid first and sets OUT):
#   bash bench/gpu.sh nerfacc [extra bench_nerfacc.py arguments]
# bench/compare/nerfacc/bench_nerfacc.py, our VoxelGrid as the field of a nerfacc
# occupancy-grid model against the same model on F.grid_sample: configs/nerf_realistic_gpu.toml's
# scene (400x400, generated on the GPU when absent), NERFACC_STEPS (default 3000) steps of 8192
# rays each, then the test views. nerfacc (a benchmark-only dependency) is installed from
# NERFACC_WHEELS (default .anchors/wheels) when missing, and its CUDA ops are JIT-built before
# the benchmark (into TORCH_EXTENSIONS_DIR: a minute or two, once a machine). Writes to $OUT:
# nerfacc.md (the table), nerfacc.json, nerfacc.log, nerfacc_build.log and
# nerfacc_profile_<backend>.txt (NERFACC_PROFILE more steps under torch.profiler, default 20).
set -uo pipefail
cd "$(dirname "$0")/../../.."
shift
status=0

wheels=${NERFACC_WHEELS:-.anchors/wheels}
python3 -c "import nerfacc" 2>/dev/null \
  || python3 -m pip install --no-index --no-deps --find-links "$wheels" nerfacc 2>&1 | tail -n 2
python3 -c "import rich" 2>/dev/null \
  || python3 -m pip install --no-index --find-links "$wheels" rich 2>&1 | tail -n 2
start=$(date +%s)
python3 -c "import nerfacc; from nerfacc.cuda._backend import _C; assert _C is not None, 'no nvcc'
print('nerfacc', nerfacc.__version__, 'CUDA ops:', _C.__file__)" >"$OUT/nerfacc_build.log" 2>&1 \
  || { tail -n 40 "$OUT/nerfacc_build.log"; exit 1; }
tail -n 1 "$OUT/nerfacc_build.log"
echo "nerfacc build: $(($(date +%s) - start)) s"
python3 bench/compare/nerfacc/bench_nerfacc.py --device cuda --steps "${NERFACC_STEPS:-3000}" \
  --profile "${NERFACC_PROFILE:-20}" --out "$OUT" "$@" 2>&1 | tee "$OUT/nerfacc.log" | tail -n 40
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit $status
