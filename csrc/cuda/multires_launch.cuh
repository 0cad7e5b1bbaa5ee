// Launch helpers shared by the CUDA kernels of grid::multires. Host and device.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda_utils.cuh"
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

// Whether rows of kF values can be read and written as one vector (Vec<scalar_t, kF>, at most
// 16 bytes): kF known at compile time and every base pointer aligned to a row's bytes (a
// contiguous table's rows then all are).
template <typename scalar_t, int kF>
constexpr bool multires_vector_width_ok() {
  return kF > 0 && kF * sizeof(scalar_t) <= 16;
}

template <typename scalar_t, int kF>
bool multires_rows_aligned(std::initializer_list<const void*> pointers) {
  if constexpr (!multires_vector_width_ok<scalar_t, kF>()) {
    return false;
  } else {
    for (const void* p : pointers)
      if (reinterpret_cast<uintptr_t>(p) % (kF * sizeof(scalar_t)) != 0) return false;
    return true;
  }
}

// Calls fn(std::bool_constant<v>) with v = `vector` (a kernel's vector or scalar path).
template <typename Fn>
void dispatch_bool(bool vector, Fn&& fn) {
  if (vector) return fn(std::true_type{});
  return fn(std::false_type{});
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

// Levels one thread walks: a launch's blockIdx.y picks a group of that many consecutive levels,
// so the blocks in flight gather from (and scatter into) one group's rows at a time, which stay
// in L2, instead of every level's table at once. A group's output row of one point is 32 bytes
// (one sector) where F and the dtype allow: 4 levels of F = 2 float32 values.
inline int multires_level_group(const MultiresLevels& levels, int64_t element_bytes) {
  const int64_t row_bytes = std::max<int64_t>(1, levels.F * element_bytes);
  const int64_t group = std::max<int64_t>(1, 32 / row_bytes);
  return static_cast<int>(std::min<int64_t>(group, levels.L));
}

// Blocks of a per-(point, level group) launch: x over the points, y over the groups.
inline dim3 multires_group_blocks(int64_t N, const MultiresLevels& levels, int group) {
  return dim3(one_pass_blocks(N), static_cast<unsigned>((levels.L + group - 1) / group));
}

}  // namespace grid
