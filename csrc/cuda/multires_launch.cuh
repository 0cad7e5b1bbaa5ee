// Launch helpers shared by the CUDA kernels of grid::multires. Host and device.
#pragma once

#include <ATen/ATen.h>

#include <type_traits>

#include "multires_math.h"

namespace grid {

// Calls fn(std::integral_constant<int, kF>) with kF = F for the common feature counts (1, 2, 4,
// 8: loops over F unroll), else kF = 0 (F read from MultiresLevels at run time).
template <typename Fn>
void dispatch_multires_f(int64_t F, Fn&& fn) {
  switch (F) {
    case 1:
      return fn(std::integral_constant<int, 1>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    case 4:
      return fn(std::integral_constant<int, 4>{});
    case 8:
      return fn(std::integral_constant<int, 8>{});
    default:
      return fn(std::integral_constant<int, 0>{});
  }
}

// F as a kernel sees it: the compile-time kF, or the run-time count when kF is 0.
template <int kF>
__device__ __forceinline__ int multires_features(const MultiresLevels& levels) {
  return kF > 0 ? kF : levels.F;
}

// Element offset of row `row` of level `level` in a contiguous [L, T, F] table.
__device__ __forceinline__ int64_t multires_row_offset(const MultiresLevels& levels, int level,
                                                       uint32_t row, int F) {
  return (int64_t(level) * levels.T + row) * F;
}

}  // namespace grid
