// Argument checks of the multiresolution grid operators (grid::multires and its backward ops),
// shared by the CPU and CUDA kernels. Every message names the op, the argument and what was
// expected. Host only.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "checks.h"
#include "multires_math.h"

namespace grid {

// table: [L, T, F] (T < 2^31), points: [..., 3], resolutions: L values in [1, 2^24] with
// 1 <= L <= 32 -> the levels as the kernels read them.
inline MultiresLevels check_multires_args(const at::Tensor& table, const at::Tensor& points,
                                          at::IntArrayRef resolutions) {
  const char* op = "grid.multires";
  check_pair(op, table, "table", points, "points");
  TORCH_CHECK(table.dim() == 3, op, ": table: expected shape [L, T, F], got ", table.sizes());
  TORCH_CHECK(table.size(0) > 0 && table.size(1) > 0 && table.size(2) > 0, op,
              ": table: expected every axis of [L, T, F] to be non-empty, got ", table.sizes());
  TORCH_CHECK(table.size(0) <= kMultiresMaxLevels, op, ": table: expected at most ",
              kMultiresMaxLevels, " levels (L in [L, T, F]), got ", table.size(0));
  TORCH_CHECK(table.size(1) < (int64_t(1) << 31), op,
              ": table: expected fewer than 2^31 rows per level (T in [L, T, F]), got ",
              table.size(1));
  TORCH_CHECK(table.size(2) < (int64_t(1) << 16), op,
              ": table: expected fewer than 65536 features per level (F in [L, T, F]), got ",
              table.size(2));
  TORCH_CHECK(points.dim() >= 1 && points.size(-1) == 3, op,
              ": points: expected shape [..., 3], got ", points.sizes());
  TORCH_CHECK(int64_t(resolutions.size()) == table.size(0), op, ": resolutions: expected ",
              table.size(0), " values (one per level of table [L, T, F]), got ",
              resolutions.size());
  MultiresLevels levels{};
  levels.L = static_cast<int32_t>(table.size(0));
  levels.T = static_cast<uint32_t>(table.size(1));
  levels.F = static_cast<int32_t>(table.size(2));
  for (int l = 0; l < levels.L; ++l) {
    TORCH_CHECK(resolutions[l] >= 1 && resolutions[l] <= kMultiresMaxResolution, op,
                ": resolutions: expected cells per axis in [1, ", kMultiresMaxResolution,
                "], got ", resolutions[l], " at level ", l);
    levels.resolution[l] = static_cast<int32_t>(resolutions[l]);
    levels.dense[l] = multires_dense(resolutions[l], table.size(1));
  }
  return levels;
}

// The CPU kernels reject non-finite coordinates (the CUDA kernels would have to synchronise to
// report them; there they read as clamped into [-1, 1], NaN as -1).
inline void check_multires_points_finite(const at::Tensor& points) {
  TORCH_CHECK(at::isfinite(points).all().item<bool>(), "grid.multires",
              ": points: expected finite coordinates, got NaN or infinity");
}

// Output shape of multires: points [..., 3] -> [..., L * F].
inline std::vector<int64_t> multires_out_sizes(const at::Tensor& table, const at::Tensor& points) {
  std::vector<int64_t> sizes(points.sizes().begin(), points.sizes().end());
  sizes.back() = table.size(0) * table.size(2);
  return sizes;
}

}  // namespace grid
