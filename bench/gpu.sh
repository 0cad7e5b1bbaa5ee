#!/usr/bin/env bash
# The one entry point on a GPU machine: builds grid against that machine's torch (JIT, sm_90
# by default), then runs one mode's benchmarks; logs, tables (.md) and JSON go to $OUT
# (default bench/results). `bash bench/gpu.sh` (mode `all`) runs the whole test suite, CUDA
# tests included, then the kernel benchmark: table in $OUT/bench.log, JSON in $OUT/bench.json.
#
#   bash bench/gpu.sh MODE [ARGS...]
#
# Each role keeps its modes, their arguments and environment variables in its own runner
# (documented there; bench/README.md lists them all):
#   all tests bench multires             bench/ops/modes.sh          kernels: tests, bench_ops, probes
#   nerf loop sdf view                   bench/training/modes.sh     training as a user runs it
#   scenes scenes-pool/-wait/-stop       bench/training/modes.sh     D3: ours over a set of scenes
#   tune-report tune-wait                bench/training/modes.sh     tuned on some, reported on others
#   multi steps                          bench/multi_gpu/modes.sh    several GPUs of one host
#   dvgo dvgo-build                      bench/compare/dvgo/modes.sh DirectVoxGO beside ours
#   nerfacc                              bench/compare/nerfacc/modes.sh nerfacc's model on our grid
#   wheel                                bench/release/wheel.sh      the sdist and wheel, installed
#
# This script does what every mode shares: the device's description ($OUT/device.txt), the
# environment (TORCH_CUDA_ARCH_LIST, MAX_JOBS, TORCH_EXTENSIONS_DIR), and the build: JIT
# for most modes, in place (setup.py build_ext --inplace, as `pip install -e` does) for sdf
# and view, none for wheel (it builds its own) and the wait modes (they read files). Then
# the runner, whose exit status it returns.
set -uo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}
shift || true
case $what in
  all | tests | bench | multires) runner=bench/ops/modes.sh ;;
  nerf | loop | sdf | view | scenes | scenes-pool | scenes-wait | scenes-stop | tune-report | tune-wait)
    runner=bench/training/modes.sh ;;
  multi | steps) runner=bench/multi_gpu/modes.sh ;;
  dvgo | dvgo-build) runner=bench/compare/dvgo/modes.sh ;;
  nerfacc) runner=bench/compare/nerfacc/modes.sh ;;
  wheel) runner=bench/release/wheel.sh ;;
  *) echo "gpu.sh: unknown mode '$what' (see the list at the top of bench/gpu.sh)"; exit 2 ;;
esac

export OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PYTHONUNBUFFERED=1
export MAX_JOBS=${MAX_JOBS:-$(nproc)} TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/grid_ext}

# The wait modes only read a running pool's files: they neither import torch nor build. On a
# host whose GPUs and cores the pool keeps busy, the build's check alone (importing grid)
# took minutes, and a collecting call spent its time there and brought nothing back.
waiting=false
case $what in scenes-wait | scenes-stop | tune-wait) waiting=true ;; esac

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv \
  | tee "$OUT/device.txt"
$waiting || python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
  | tee -a "$OUT/device.txt"

# scenes-wait on a machine that holds no pool (a fresh one: the last was taken back) would
# spend its call waiting for nothing: it stops at once, before building
pool=bench/results/scenes_pool  # scenes-pool's work folder (bench/training/modes.sh)
if [ "$what" = tune-wait ] && [ ! -d bench/results/tune_report ]; then
  echo "tune-wait: no pipeline on this machine (bench/results/tune_report absent): start it with tune-report"
  exit 2
fi
# nor does a second pool start beside a running one (its jobs would share the GPUs)
if [ "$what" = scenes-pool ] && [ -f "$pool/pool.pid" ] && kill -0 -- "-$(cat "$pool/pool.pid")" 2>/dev/null; then
  echo "scenes-pool: a pool is running on this machine (process group $(cat "$pool/pool.pid")): wait with scenes-wait or stop it with scenes-stop"
  exit 2
fi
if [ "$what" = scenes-wait ] && [ ! -f "$pool/pool.log" ]; then
  echo "scenes-wait: no pool on this machine ($pool/pool.log absent): start it with scenes-pool"
  exit 2
fi

start=$(date +%s)
case $what in
  wheel | scenes-wait | scenes-stop | tune-wait) ;;
  sdf | view)
    python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1 || { tail -n 60 "$OUT/build.log"; exit 1; }
    python3 -c "import grid, grid._backend as b; print('built', b.source, 'cuda kernels:', b.has_cuda_kernels)"
    echo "build: $(($(date +%s) - start)) s"
    ;;
  *)
    GRID_VERBOSE_BUILD=1 python3 -c "import grid, grid._backend as b; print('built', b.source, 'cuda kernels:', b.has_cuda_kernels)" \
      >"$OUT/build.log" 2>&1 || { tail -n 60 "$OUT/build.log"; exit 1; }
    tail -n 1 "$OUT/build.log"
    echo "build: $(($(date +%s) - start)) s"
    ;;
esac

bash "$runner" "$what" "$@"
