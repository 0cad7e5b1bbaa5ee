// The deterministic CPU scatter of a per-point, per-corner weighted row into a grid: used by the
// sample backward (weights w_k) and double backward (weights q_k).
//
// The grid's x slabs are split into bands, one per task, balanced by how many points touch
// each slab; a task adds the contributions of the points that touch its band, in point order.
// Every voxel thus receives its contributions in point order, so the result is bitwise the
// same on every run and for any thread count. Finding each band's points costs one pass over
// the points' x coordinates (`band_lists`), so every point's cell is located about once,
// whatever the thread count (a band at a boundary also locates the points of its neighbour's
// edge slab).
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "cell_stream.h"
#include "trilinear_math.h"

namespace grid {

// Below this many points per task, splitting costs more than it saves (measured on 2 cores:
// bench/ops/cpu_threads.py).
constexpr int64_t kScatterPointsPerTask = 16384;

// The points of each band, in point order: band b owns x slabs [x_begin[b], x_begin[b + 1]) and
// its points are index[offset[b] .. offset[b + 1]).
struct BandLists {
  std::vector<int64_t> x_begin;  // [B + 1]
  std::vector<int64_t> offset;   // [B + 1]
  std::vector<int32_t> index;    // [offset[B]]
};

// Slabs a point touches along x: bit 0 = i0, bit 1 = i0 + 1 (both inside the grid).
template <typename acc_t, typename point_t>
inline void x_slabs(const point_t* p, const GridShape& shape, Sampling mode, int64_t& i0,
                    unsigned& bits) {
  const auto a = locate_axis<acc_t>(static_cast<acc_t>(p[0]), shape.size[0], mode, 0);
  i0 = a.i0;
  bits = a.outside ? 0u : unsigned(a.valid[0]) | unsigned(a.valid[1]) << 1;
}

template <typename acc_t, typename point_t>
BandLists band_lists(const point_t* pts, const GridShape& shape, Sampling mode, int64_t N,
                     int64_t tasks) {
  const int64_t X = shape.size[0];
  const int64_t chunk = (N + tasks - 1) / tasks;
  // Per chunk of points: how many touch each slab.
  std::vector<int64_t> touches(tasks * X, 0);  // [tasks, X]
  at::parallel_for(0, tasks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* t = touches.data() + c * X;
      for (int64_t n = c * chunk; n < std::min(N, (c + 1) * chunk); ++n) {
        int64_t i0;
        unsigned bits;
        x_slabs<acc_t>(pts + 3 * n, shape, mode, i0, bits);
        if (bits & 1u) ++t[i0];
        if (bits & 2u) ++t[i0 + 1];
      }
    }
  });
  // Bands of about equal touches, at least one slab each.
  int64_t total = 0;
  std::vector<int64_t> per_slab(X, 0);
  for (int64_t x = 0; x < X; ++x) {
    for (int64_t c = 0; c < tasks; ++c) per_slab[x] += touches[c * X + x];
    total += per_slab[x];
  }
  BandLists lists;
  lists.x_begin.push_back(0);
  int64_t seen = 0;
  for (int64_t x = 0; x < X; ++x) {
    seen += per_slab[x];
    const int64_t b = static_cast<int64_t>(lists.x_begin.size());  // the band being filled
    if (b < tasks && x + 1 < X && seen * tasks >= total * b) lists.x_begin.push_back(x + 1);
  }
  lists.x_begin.push_back(X);
  const int64_t B = static_cast<int64_t>(lists.x_begin.size()) - 1;
  std::vector<int32_t> band_of(X);  // slab -> band
  for (int64_t b = 0; b < B; ++b)
    for (int64_t x = lists.x_begin[b]; x < lists.x_begin[b + 1]; ++x) band_of[x] = int32_t(b);

  // Per chunk: how many points each band gets, then where the chunk writes them.
  auto bands_of = [&](int64_t n, int32_t& lo, int32_t& hi) {
    int64_t i0;
    unsigned bits;
    x_slabs<acc_t>(pts + 3 * n, shape, mode, i0, bits);
    lo = (bits & 1u) ? band_of[i0] : -1;
    hi = (bits & 2u) ? band_of[i0 + 1] : -1;
    if (hi == lo) hi = -1;
  };
  std::vector<int64_t> counts(tasks * B, 0);  // [tasks, B]
  at::parallel_for(0, tasks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t n = c * chunk; n < std::min(N, (c + 1) * chunk); ++n) {
        int32_t lo, hi;
        bands_of(n, lo, hi);
        if (lo >= 0) ++counts[c * B + lo];
        if (hi >= 0) ++counts[c * B + hi];
      }
  });
  lists.offset.assign(B + 1, 0);
  std::vector<int64_t> cursor(tasks * B);  // chunk c's first position in band b's list
  int64_t at = 0;
  for (int64_t b = 0; b < B; ++b) {
    lists.offset[b] = at;
    for (int64_t c = 0; c < tasks; ++c) {
      cursor[c * B + b] = at;
      at += counts[c * B + b];
    }
  }
  lists.offset[B] = at;
  lists.index.resize(at);
  at::parallel_for(0, tasks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* cur = cursor.data() + c * B;
      for (int64_t n = c * chunk; n < std::min(N, (c + 1) * chunk); ++n) {
        int32_t lo, hi;
        bands_of(n, lo, hi);
        if (lo >= 0) lists.index[cur[lo]++] = int32_t(n);
        if (hi >= 0) lists.index[cur[hi]++] = int32_t(n);
      }
    }
  });
  return lists;
}

// out[corner_k(n)] += weights(n, cell)[k] * rows[n] for the points at positions [begin, end)
// (of `order`, or all points when null) and the corners in (x, y) rows [row_begin, row_end).
template <typename acc_t, typename scalar_t, typename point_t, typename Weights>
void scatter_band(const scalar_t* rows, const point_t* pts, acc_t* out, const GridShape& shape,
                  Sampling mode, const int32_t* order, int64_t begin, int64_t end,
                  int64_t row_begin, int64_t row_end, Weights& weights) {
  const int64_t F = shape.F, Y = shape.size[1], Z = shape.size[2];
  CellStream<acc_t, point_t, acc_t> cells(pts, shape, mode, out, true, begin, end, row_begin,
                                          row_end, order);
  for (int64_t m = begin; m < end; ++m) {
    const Cell<acc_t> cell = cells.get(m);
    if (!cell.any) continue;
    const int64_t n = order ? order[m] : m;
    acc_t w[8];
    weights(n, cell, w);
    for (int k = 0; k < 8; ++k) {
      if (!cell.valid(k)) continue;
      const int64_t row = (cell.axis[0].i0 + corner_dx(k)) * Y + cell.axis[1].i0 + corner_dy(k);
      if (row < row_begin || row >= row_end) continue;
      acc_t* o = out + (row * Z + cell.axis[2].i0 + corner_dz(k)) * F;
      for (int64_t f = 0; f < F; ++f) o[f] += w[k] * static_cast<acc_t>(rows[n * F + f]);
    }
  }
}

// out[corner_k(n)] += weights(n, cell)[k] * rows[n], into a contiguous [X, Y, Z, F]
// accumulator. weights(n, cell, w) fills acc_t w[8] for point n (only corners inside are read).
template <typename acc_t, typename scalar_t, typename point_t, typename Weights>
void scatter_corners_cpu(const scalar_t* rows,  // [N, F]
                         const point_t* pts,    // [N, 3]
                         acc_t* out,            // [X, Y, Z, F]
                         const GridShape& shape, int64_t N, Sampling mode, Weights weights) {
  const int64_t X = shape.size[0], Y = shape.size[1];
  int64_t tasks = std::min<int64_t>({at::get_num_threads(), X, N / kScatterPointsPerTask});
  if (at::in_parallel_region() || N > std::numeric_limits<int32_t>::max()) tasks = 1;
  if (tasks <= 1) {
    scatter_band<acc_t>(rows, pts, out, shape, mode, nullptr, 0, N, 0, X * Y, weights);
    return;
  }
  const BandLists lists = band_lists<acc_t>(pts, shape, mode, N, tasks);
  const int64_t B = static_cast<int64_t>(lists.offset.size()) - 1;
  at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      scatter_band<acc_t>(rows, pts, out, shape, mode, lists.index.data(), lists.offset[b],
                          lists.offset[b + 1], lists.x_begin[b] * Y, lists.x_begin[b + 1] * Y,
                          weights);
  });
}

}  // namespace grid
