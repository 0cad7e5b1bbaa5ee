// CPU backward of grid::multires. Deterministic: the table gradient is scattered by one task per
// level, each adding its points in point order; the point gradient is a per-point sum over the
// levels.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "dispatch.h"
#include "multires_checks.h"
#include "multires_math.h"

namespace grid {
namespace {

// grad_table[l, row_k(n)] += weight_k(n, l) * grad_out[n, l]: one task per level.
template <typename scalar_t, typename point_t>
void multires_grad_table_cpu(const scalar_t* g, const point_t* pts, acc_type<scalar_t>* grad,
                             const MultiresLevels& levels, int64_t N) {
  using acc_t = acc_type<scalar_t>;
  const int64_t L = levels.L, F = levels.F;
  at::parallel_for(0, L, 1, [&](int64_t begin, int64_t end) {
    for (int64_t l = begin; l < end; ++l) {
      for (int64_t n = 0; n < N; ++n) {
        acc_t p[3];
        multires_load_point(pts, n, p);
        const MultiresCell<acc_t> cell = multires_cell(p, levels, int(l));
        acc_t w[8];
        corner_weights(cell.t[0], cell.t[1], cell.t[2], w);
        const scalar_t* gn = g + (n * L + l) * F;
        for (int k = 0; k < 8; ++k) {
          acc_t* dst = grad + multires_offset(levels, int(l), cell.row[k]);
          for (int64_t f = 0; f < F; ++f) dst[f] += w[k] * static_cast<acc_t>(gn[f]);
        }
      }
    }
  });
}

// grad_points[n] = sum_l sum_k d weight_k / d point * <grad_out[n, l], table[l, row_k]>.
template <typename scalar_t, typename point_t>
void multires_grad_points_cpu(const scalar_t* g, const scalar_t* tab, const point_t* pts,
                              point_t* gp, const MultiresLevels& levels, int64_t N) {
  using acc_t = acc_type<scalar_t>;
  const int64_t L = levels.L, F = levels.F;
  at::parallel_for(0, N, std::max<int64_t>(1, 1024 / (L * F)), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      acc_t p[3];
      multires_load_point(pts, n, p);
      acc_t grad[3] = {0, 0, 0};
      for (int l = 0; l < L; ++l) {
        const MultiresCell<acc_t> cell = multires_cell(p, levels, l);
        acc_t dweight[3][8];
        corner_weight_grads<acc_t>(cell.t[0], cell.t[1], cell.t[2], dweight);
        const scalar_t* gn = g + (n * L + l) * F;
        for (int k = 0; k < 8; ++k) {
          const scalar_t* v = tab + multires_offset(levels, l, cell.row[k]);
          acc_t dot = 0;
          for (int64_t f = 0; f < F; ++f)
            dot += static_cast<acc_t>(gn[f]) * static_cast<acc_t>(v[f]);
          for (int a = 0; a < 3; ++a) grad[a] += dweight[a][k] * dot * cell.dt[a];
        }
      }
      for (int a = 0; a < 3; ++a) gp[3 * n + a] = static_cast<point_t>(grad[a]);
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> multires_backward_cpu(
    const at::Tensor& grad_out_in,  // [..., L F]
    const at::Tensor& table_in,     // [L, T, F]
    const at::Tensor& points_in,    // [..., 3]
    at::IntArrayRef resolutions, std::array<bool, 2> output_mask) {
  const MultiresLevels levels = check_multires_args(table_in, points_in, resolutions);
  check_grad_out("grid.multires_backward", grad_out_in, table_in,
                 multires_out_sizes(table_in, points_in));
  check_multires_points_finite(points_in);
  const at::Tensor table = table_in.contiguous();
  const at::Tensor points = contiguous_rows(points_in, 3);  // [N, 3]
  const int64_t row = int64_t(levels.L) * levels.F;
  const at::Tensor grad_out = contiguous_rows(grad_out_in, row);  // [N, L F]
  const int64_t N = points.size(0);
  const auto acc_dtype = table.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor grad_acc = masked_output(output_mask[0], table.sizes(),
                                      table.options().dtype(acc_dtype), true);  // [L, T, F]
  at::Tensor grad_points = masked_output(output_mask[1], points_in.sizes(), points_in.options());
  if (N > 0) {
    dispatch_dtypes(table.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
      using scalar_t = typename decltype(s)::type;
      using point_t = typename decltype(p)::type;
      using acc_t = acc_type<scalar_t>;
      const scalar_t* g = grad_out.data_ptr<scalar_t>();
      const point_t* pts = points.data_ptr<point_t>();
      if (output_mask[0])
        multires_grad_table_cpu<scalar_t, point_t>(g, pts, grad_acc.data_ptr<acc_t>(), levels, N);
      if (output_mask[1])
        multires_grad_points_cpu<scalar_t, point_t>(g, table.data_ptr<scalar_t>(), pts,
                                                    grad_points.data_ptr<point_t>(), levels, N);
    });
  }
  // The float accumulator rounded to the table's dtype (no copy when they are equal).
  return {grad_acc.to(table.scalar_type()), grad_points};
}

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("multires_backward", &multires_backward_cpu);
}

}  // namespace grid
