// Shared inline math of the multiresolution grid operators (grid::multires and its backward
// ops): where a point falls in one level, and which table rows hold its cell's eight vertices.
// Host and device. The specification is grid/reference.py (multires, multires_index).
//
// table: [L, T, F]. Level l is a grid of R = resolution[l] cells per axis, (R + 1)^3 vertices.
// A point p in [-1, 1]^3 (clamped to it first) sits at pos = (p + 1) / 2 * R, in the cell whose
// low vertex is i0 = min(floor(pos), R - 1), at t = pos - i0 in [0, 1] (align_corners: p = -1
// and p = 1 are the first and last vertices). Vertex (x, y, z) is row
//   dense  ((R + 1)^3 <= T): x + y (R + 1) + z (R + 1)^2
//   hashed (otherwise):      (x * 1 ^ y * 2654435761 ^ z * 805459861) mod T, in uint32
// (instant-ngp's spatial hash) of table[l]. The output is [N, L * F], level l in columns
// l F .. l F + F - 1.
#pragma once

#include <cstdint>

#include "trilinear_math.h"

namespace grid {

// Levels of one call: a fixed-size struct, passed to CUDA kernels by value.
constexpr int kMultiresMaxLevels = 32;
constexpr int32_t kMultiresMaxResolution = 1 << 24;  // float32 positions stay exact integers

struct MultiresLevels {
  int32_t L;
  int32_t F;
  uint32_t T;  // rows per level, < 2^31
  int32_t resolution[kMultiresMaxLevels];
  bool dense[kMultiresMaxLevels];
};

// Whether a level of R cells per axis fits T rows densely: (R + 1)^3 <= T, without overflow.
inline bool multires_dense(int64_t R, int64_t T) {
  const int64_t side = R + 1;
  return side <= 2048 && side * side * side <= T;  // T < 2^31 < 2048^3
}

// The table row of vertex (x, y, z) at a level (see the top of this file).
GRID_HD uint32_t multires_row(uint32_t x, uint32_t y, uint32_t z, int32_t R, bool dense,
                              uint32_t T) {
  if (dense) {
    const uint32_t side = uint32_t(R) + 1;
    return x + side * (y + side * z);
  }
  return (x ^ (y * 2654435761u) ^ (z * 805459861u)) % T;
}

// Point n of a contiguous [N, 3] array in the accumulation type.
template <typename acc_t, typename point_t>
GRID_HD void multires_load_point(const point_t* points, int64_t n, acc_t (&p)[3]) {
#pragma unroll
  for (int a = 0; a < 3; ++a) p[a] = static_cast<acc_t>(points[3 * n + a]);
}

// One point at one level: the cell's position t, d t / d point, and the rows of its 8 corners
// (corner k at offset ((k >> 2) & 1, (k >> 1) & 1, k & 1), as trilinear_math.h).
template <typename acc_t>
struct MultiresCell {
  acc_t t[3];
  acc_t dt[3];  // R / 2 where -1 <= p <= 1, 0 where the coordinate is clamped (as torch.clamp)
  uint32_t row[8];
};

template <typename acc_t>
GRID_HD MultiresCell<acc_t> multires_cell(const acc_t (&p)[3], const MultiresLevels& levels,
                                          int level) {
  const int32_t R = levels.resolution[level];
  MultiresCell<acc_t> c;
  uint32_t i0[3];
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    acc_t x = p[a];
    const bool inside = x >= acc_t(-1) && x <= acc_t(1);
    if (!inside) x = x > acc_t(1) ? acc_t(1) : acc_t(-1);  // NaN goes to -1 (never read out)
    const acc_t pos = (x + acc_t(1)) / acc_t(2) * acc_t(R);
    acc_t low = floor_(pos);
    if (low > acc_t(R - 1)) low = acc_t(R - 1);
    i0[a] = static_cast<uint32_t>(low);
    c.t[a] = pos - low;
    c.dt[a] = inside ? acc_t(R) / acc_t(2) : acc_t(0);
  }
  const bool dense = levels.dense[level];
#pragma unroll
  for (int k = 0; k < 8; ++k)
    c.row[k] = multires_row(i0[0] + corner_dx(k), i0[1] + corner_dy(k), i0[2] + corner_dz(k), R,
                            dense, levels.T);
  return c;
}

// Element offset of row `row` of level `level` in a contiguous [L, T, F] table.
GRID_HD int64_t multires_offset(const MultiresLevels& levels, int level, uint32_t row) {
  return (int64_t(level) * levels.T + row) * levels.F;
}

}  // namespace grid
