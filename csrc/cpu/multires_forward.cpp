// CPU forward of grid::multires: every level of every point in one pass, the eight corners of
// each level's cell gathered from the table in the kernel (csrc/multires_math.h).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "dispatch.h"
#include "multires_checks.h"
#include "multires_math.h"

namespace grid {

at::Tensor multires_forward_cpu(const at::Tensor& table_in,   // [L, T, F]
                                const at::Tensor& points_in,  // [..., 3]
                                at::IntArrayRef resolutions) {
  const MultiresLevels levels = check_multires_args(table_in, points_in, resolutions);
  check_multires_points_finite(points_in);
  const at::Tensor table = table_in.contiguous();
  const at::Tensor points = contiguous_rows(points_in, 3);  // [N, 3]
  at::Tensor out = at::empty(multires_out_sizes(table, points_in), table.options());  // [..., LF]
  const int64_t N = points.size(0), L = levels.L, F = levels.F;
  if (N == 0) return out;

  dispatch_dtypes(table.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    using acc_t = acc_type<scalar_t>;
    const scalar_t* tab = table.data_ptr<scalar_t>();
    const point_t* pts = points.data_ptr<point_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, N, std::max<int64_t>(1, 1024 / (L * F)), [&](int64_t begin, int64_t end) {
      std::vector<acc_t> row(F);
      for (int64_t n = begin; n < end; ++n) {
        acc_t pn[3];
        multires_load_point(pts, n, pn);
        for (int l = 0; l < L; ++l) {
          const MultiresCell<acc_t> cell = multires_cell(pn, levels, l);
          acc_t w[8];
          corner_weights(cell.t[0], cell.t[1], cell.t[2], w);
          std::fill(row.begin(), row.end(), acc_t(0));
          for (int k = 0; k < 8; ++k) {
            const scalar_t* v = tab + multires_offset(levels, l, cell.row[k]);
            for (int64_t f = 0; f < F; ++f) row[f] += w[k] * static_cast<acc_t>(v[f]);
          }
          for (int64_t f = 0; f < F; ++f) o[(n * L + l) * F + f] = static_cast<scalar_t>(row[f]);
        }
      }
    });
  });
  return out;
}

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("multires", &multires_forward_cpu);
}

}  // namespace grid
