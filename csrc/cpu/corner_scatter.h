// The deterministic CPU scatter of a per-point, per-corner weighted row into a grid: used by the
// sample backward (weights w_k) and double backward (weights q_k). Every (x, y) voxel row of
// the output is owned by one task, which adds the contributions of all points in point order,
// so the result is bitwise the same on every run and for any thread count.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "cell_stream.h"
#include "trilinear_math.h"

namespace grid {

// out[corner_k(n)] += weights(n, cell)[k] * rows[n], into a contiguous [X, Y, Z, F]
// accumulator. weights(n, cell, w) fills acc_t w[8] for point n (only corners inside are read).
template <typename acc_t, typename scalar_t, typename point_t, typename Weights>
void scatter_corners_cpu(const scalar_t* rows,  // [N, F]
                         const point_t* pts,    // [N, 3]
                         acc_t* out,            // [X, Y, Z, F]
                         const GridShape& shape, int64_t N, Sampling mode, Weights weights) {
  const int64_t F = shape.F, Y = shape.size[1], Z = shape.size[2];
  const int64_t xy_rows = shape.size[0] * Y;
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), xy_rows));
  at::parallel_for(0, xy_rows, (xy_rows + tasks - 1) / tasks, [&](int64_t row_begin,
                                                                  int64_t row_end) {
    CellStream<acc_t, point_t, acc_t> cells(pts, shape, mode, out, true, 0, N, row_begin, row_end);
    for (int64_t n = 0; n < N; ++n) {
      const Cell<acc_t> cell = cells.get(n);
      if (!cell.any) continue;
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
  });
}

}  // namespace grid
