// CPU double backward of grid::multires: the gradients of multires_backward's outputs (the
// table and point gradients) with respect to its inputs (grad_out, table, points). Per point
// and level the math is sample's (trilinear_math.h: corner_weights_and_moves,
// point_second_order) with linear weights; the table gradient is scattered deterministically,
// one task per level adding its points in point order.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "dispatch.h"
#include "multires_checks.h"
#include "multires_math.h"

namespace grid {
namespace {

template <typename acc_t, typename point_t>
void load_ggp(const point_t* ggp, int64_t n, acc_t (&out)[3]) {
  for (int a = 0; a < 3; ++a) out[a] = ggp ? static_cast<acc_t>(ggp[3 * n + a]) : acc_t(0);
}

// w_k and q_k (how corner k's weight moves along the incoming point gradient ggp) of one level.
template <typename acc_t>
void level_weights(const MultiresCell<acc_t>& cell, const acc_t (&ggp)[3], acc_t (&w)[8],
                   acc_t (&q)[8]) {
  const acc_t d2t[3] = {0, 0, 0};  // linear weights
  corner_weights_and_moves(cell.t, cell.dt, d2t, ggp, 0xffu, w, q);
}

// Per point: the gradient of grad_out ([N, L F], if ggo) and of the point ([N, 3], if gp).
template <typename scalar_t, typename point_t>
void point_pass_cpu(const scalar_t* g, const scalar_t* tab, const scalar_t* ggt,
                    const point_t* ggp, const point_t* pts, scalar_t* ggo, point_t* gp,
                    const MultiresLevels& levels, int64_t N) {
  using acc_t = acc_type<scalar_t>;
  const int64_t L = levels.L, F = levels.F;
  at::parallel_for(0, N, std::max<int64_t>(1, 512 / (L * F)), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> row(F);
    for (int64_t n = begin; n < end; ++n) {
      acc_t p[3], gg[3], grad[3] = {0, 0, 0};
      multires_load_point(pts, n, p);
      load_ggp(ggp, n, gg);
      for (int l = 0; l < L; ++l) {
        const MultiresCell<acc_t> cell = multires_cell(p, levels, l);
        acc_t w[8], q[8], dot_g[8] = {}, dot_v[8] = {};
        level_weights(cell, gg, w, q);
        std::fill(row.begin(), row.end(), acc_t(0));
        const scalar_t* gn = g + (n * L + l) * F;
        for (int k = 0; k < 8; ++k) {
          const int64_t off = multires_offset(levels, l, cell.row[k]);
          const scalar_t* v = tab + off;
          const scalar_t* G = ggt ? ggt + off : nullptr;
          for (int64_t f = 0; f < F; ++f) {
            const acc_t vf = static_cast<acc_t>(v[f]), Gf = G ? static_cast<acc_t>(G[f]) : acc_t(0);
            const acc_t gf = static_cast<acc_t>(gn[f]);
            row[f] += w[k] * Gf + q[k] * vf;
            dot_v[k] += gf * vf;
            dot_g[k] += gf * Gf;
          }
        }
        if (ggo)
          for (int64_t f = 0; f < F; ++f) ggo[(n * L + l) * F + f] = static_cast<scalar_t>(row[f]);
        if (gp) {
          const acc_t d2t[3] = {0, 0, 0};
          acc_t level_grad[3];
          point_second_order(cell.t, cell.dt, d2t, gg, dot_g, dot_v, level_grad);
          for (int a = 0; a < 3; ++a) grad[a] += level_grad[a];
        }
      }
      if (gp)
        for (int a = 0; a < 3; ++a) gp[3 * n + a] = static_cast<point_t>(grad[a]);
    }
  });
}

// grad of table[l, row_k(n)] += q_k(n, l) * grad_out[n, l]: one task per level.
template <typename scalar_t, typename point_t>
void table_pass_cpu(const scalar_t* g, const point_t* ggp, const point_t* pts,
                    acc_type<scalar_t>* grad, const MultiresLevels& levels, int64_t N) {
  using acc_t = acc_type<scalar_t>;
  const int64_t L = levels.L, F = levels.F;
  at::parallel_for(0, L, 1, [&](int64_t begin, int64_t end) {
    for (int64_t l = begin; l < end; ++l) {
      for (int64_t n = 0; n < N; ++n) {
        acc_t p[3], gg[3], w[8], q[8];
        multires_load_point(pts, n, p);
        load_ggp(ggp, n, gg);
        const MultiresCell<acc_t> cell = multires_cell(p, levels, int(l));
        level_weights(cell, gg, w, q);
        const scalar_t* gn = g + (n * L + l) * F;
        for (int k = 0; k < 8; ++k) {
          acc_t* dst = grad + multires_offset(levels, int(l), cell.row[k]);
          for (int64_t f = 0; f < F; ++f) dst[f] += q[k] * static_cast<acc_t>(gn[f]);
        }
      }
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> multires_double_backward_cpu(
    const std::optional<at::Tensor>& grad_grad_table_in,   // [L, T, F]
    const std::optional<at::Tensor>& grad_grad_points_in,  // [..., 3]
    const at::Tensor& grad_out_in,                         // [..., L F]
    const at::Tensor& table_in,                            // [L, T, F]
    const at::Tensor& points_in,                           // [..., 3]
    at::IntArrayRef resolutions, std::array<bool, 3> output_mask) {
  const MultiresLevels levels = check_multires_args(table_in, points_in, resolutions);
  check_multires_points_finite(points_in);
  const DoubleBackwardInputs in = double_backward_inputs(
      "grid.multires_double_backward", grad_grad_table_in, "grad_grad_table", grad_grad_points_in,
      "grad_grad_points", grad_out_in, table_in, points_in,
      multires_out_sizes(table_in, points_in));
  const at::Tensor &table = in.value, &points = in.coords, &ggt = in.gg_value, &ggp = in.gg_coords;
  // double_backward_inputs shaped grad_out as rows of F; the kernels read rows of L F
  const at::Tensor grad_out = in.grad_out.view({-1, int64_t(levels.L) * levels.F});
  const int64_t N = points.size(0);
  const auto acc_dtype = table.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const bool want_ggo = output_mask[0], want_points = output_mask[2];
  // Only the point gradient's incoming gradient moves the table gradient.
  const bool scatter = output_mask[1] && ggp.defined();

  at::Tensor ggo = masked_output(want_ggo, grad_out_in.sizes(), table.options());  // [..., L F]
  at::Tensor grad_acc = masked_output(output_mask[1], table.sizes(),
                                      table.options().dtype(acc_dtype), true);  // [L, T, F]
  at::Tensor grad_points = masked_output(want_points, points_in.sizes(), points_in.options());
  if (N > 0) {
    dispatch_dtypes(table.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
      using scalar_t = typename decltype(s)::type;
      using point_t = typename decltype(p)::type;
      using acc_t = acc_type<scalar_t>;
      const scalar_t* g = grad_out.data_ptr<scalar_t>();
      const point_t* pts = points.data_ptr<point_t>();
      const point_t* gg = ggp.defined() ? ggp.data_ptr<point_t>() : nullptr;
      if (want_ggo || want_points)
        point_pass_cpu<scalar_t, point_t>(
            g, table.data_ptr<scalar_t>(), ggt.defined() ? ggt.data_ptr<scalar_t>() : nullptr, gg,
            pts, want_ggo ? ggo.data_ptr<scalar_t>() : nullptr,
            want_points ? grad_points.data_ptr<point_t>() : nullptr, levels, N);
      if (scatter)
        table_pass_cpu<scalar_t, point_t>(g, gg, pts, grad_acc.data_ptr<acc_t>(), levels, N);
    });
  }
  return {ggo, grad_acc.to(table.scalar_type()), grad_points};
}

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("multires_double_backward", &multires_double_backward_cpu);
}

}  // namespace grid
