#!/usr/bin/env bash
# Hardware counters for the sample kernels of one workload (Nsight Compute, clocks untouched).
#   bash bench/ops/profile.sh S1 [float32|bfloat16]   -> $OUT/ncu_<workload>.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
workload=${1:-S1}
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/grid_ext} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
ncu --clock-control none --kernel-name regex:"sample_(forward|backward)_kernel" --launch-count 4 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
  --section LaunchStats --section WarpStateStats \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_red.sum,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,breakdown:gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed \
  python3 bench/ops/bench_ops.py --device cuda --only "$workload" --warmup 1 --reps 1 \
  --json "$OUT/ncu_bench.json" >"$OUT/ncu_$workload.txt" 2>&1
grep -E "sample_(forward|backward)_kernel|Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Theoretical Occupancy|Compute \(SM\)|Stall|Mem Busy|Max Bandwidth|dram__|lts__|l1tex__" \
  "$OUT/ncu_$workload.txt" | head -n 120
