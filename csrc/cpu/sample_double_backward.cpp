// CPU double backward of grid::sample: the gradients of sample_backward's outputs (the feature
// and point gradients) with respect to its inputs (grad_out, features, points). The math is in
// trilinear_math.h (corner_weights_and_moves, point_second_order); the feature gradient is
// scattered deterministically by corner_scatter.h.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "cell_stream.h"
#include "checks.h"
#include "corner_scatter.h"
#include "dispatch.h"
#include "trilinear_math.h"

namespace grid {
namespace {

template <typename acc_t, typename point_t>
void load_ggp(const point_t* ggp, int64_t n, acc_t (&out)[3]) {
  for (int a = 0; a < 3; ++a) out[a] = ggp ? static_cast<acc_t>(ggp[3 * n + a]) : acc_t(0);
}

template <typename acc_t>
void cell_blend(const Cell<acc_t>& cell, acc_t (&t)[3], acc_t (&dt)[3], acc_t (&d2t)[3]) {
  for (int a = 0; a < 3; ++a) {
    t[a] = cell.axis[a].frac;
    dt[a] = cell.axis[a].dindex;
    d2t[a] = cell.axis[a].d2index;
  }
}

// Per point: the gradient of grad_out ([N, F], if ggo) and of the point ([N, 3], if gp).
template <typename scalar_t, typename point_t>
void point_pass_cpu(const scalar_t* g, const scalar_t* feat, const scalar_t* ggf,
                    const point_t* ggp, const point_t* pts, scalar_t* ggo, point_t* gp,
                    const GridShape& shape, int64_t N, Sampling mode) {
  using acc_t = acc_type<scalar_t>;
  const int64_t F = shape.F;
  at::parallel_for(0, N, std::max<int64_t>(1, 2048 / F), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> row(F);
    CellStream<acc_t, point_t, scalar_t> cells(pts, shape, mode, feat, false, begin, end);
    for (int64_t n = begin; n < end; ++n) {
      const Cell<acc_t> cell = cells.get(n);
      acc_t t[3], dt[3], d2t[3], gg[3], w[8], q[8], dot_g[8] = {}, dot_v[8] = {};
      cell_blend(cell, t, dt, d2t);
      load_ggp(ggp, n, gg);
      corner_weights_and_moves(t, dt, d2t, gg, cell.inside, w, q);
      std::fill(row.begin(), row.end(), acc_t(0));
      const scalar_t* gn = g + n * F;
      for (int k = 0; k < 8; ++k) {
        if (!cell.valid(k)) continue;
        const int64_t off = cell.offset(k, shape.stride[0], shape.stride[1], shape.stride[2]);
        const scalar_t* v = feat + off;
        const scalar_t* G = ggf ? ggf + off : nullptr;
        for (int64_t f = 0; f < F; ++f) {
          const acc_t vf = static_cast<acc_t>(v[f]), Gf = G ? static_cast<acc_t>(G[f]) : acc_t(0);
          const acc_t gf = static_cast<acc_t>(gn[f]);
          row[f] += w[k] * Gf + q[k] * vf;
          dot_v[k] += gf * vf;
          dot_g[k] += gf * Gf;
        }
      }
      if (ggo)
        for (int64_t f = 0; f < F; ++f) ggo[n * F + f] = static_cast<scalar_t>(row[f]);
      if (gp) {
        acc_t grad[3];
        point_second_order(t, dt, d2t, gg, dot_g, dot_v, grad);
        for (int a = 0; a < 3; ++a) gp[3 * n + a] = static_cast<point_t>(grad[a]);
      }
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_double_backward_cpu(
    const std::optional<at::Tensor>& grad_grad_features_in,  // [X, Y, Z, F]
    const std::optional<at::Tensor>& grad_grad_points_in,    // [..., 3]
    const at::Tensor& grad_out_in,                           // [..., F]
    const at::Tensor& features_in,                           // [X, Y, Z, F]
    const at::Tensor& points_in,                             // [..., 3]
    bool align_corners, c10::string_view padding, c10::string_view interpolation,
    std::array<bool, 3> output_mask, std::optional<c10::ArrayRef<double>> bounds) {
  const Sampling mode =
      check_sample_args(features_in, points_in, align_corners, padding, interpolation, bounds);
  const DoubleBackwardInputs in = double_backward_inputs(
      "grid.sample_double_backward", grad_grad_features_in, "grad_grad_features",
      grad_grad_points_in, "grad_grad_points", grad_out_in, features_in, points_in,
      sample_out_sizes(features_in, points_in));
  const at::Tensor &features = in.value, &points = in.coords, &grad_out = in.grad_out;
  const at::Tensor &ggf = in.gg_value, &ggp = in.gg_coords;
  const int64_t N = points.size(0);
  const GridShape shape = grid_shape(features);
  const auto acc_dtype = features.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const bool want_ggo = output_mask[0], want_points = output_mask[2];
  // Only the point gradient's incoming gradient moves the feature gradient.
  const bool scatter = output_mask[1] && ggp.defined();

  at::Tensor ggo = masked_output(want_ggo, grad_out_in.sizes(), features.options());  // [..., F]
  at::Tensor grad_acc = masked_output(output_mask[1], features.sizes(),
                                      features.options().dtype(acc_dtype), true);  // [X, Y, Z, F]
  at::Tensor grad_points = masked_output(want_points, points_in.sizes(), points_in.options());
  if (N > 0) {
    dispatch_dtypes(features.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
      using scalar_t = typename decltype(s)::type;
      using point_t = typename decltype(p)::type;
      using acc_t = acc_type<scalar_t>;
      const scalar_t* g = grad_out.data_ptr<scalar_t>();
      const point_t* pts = points.data_ptr<point_t>();
      const point_t* gg = ggp.defined() ? ggp.data_ptr<point_t>() : nullptr;
      if (want_ggo || want_points)
        point_pass_cpu<scalar_t, point_t>(
            g, features.data_ptr<scalar_t>(), ggf.defined() ? ggf.data_ptr<scalar_t>() : nullptr,
            gg, pts, want_ggo ? ggo.data_ptr<scalar_t>() : nullptr,
            want_points ? grad_points.data_ptr<point_t>() : nullptr, shape, N, mode);
      if (scatter)  // grad of features[corner_k(n)] += q_k(n) * grad_out[n]
        scatter_corners_cpu<acc_t>(g, pts, grad_acc.data_ptr<acc_t>(), shape, N, mode,
                                   [&](int64_t n, const Cell<acc_t>& cell, acc_t(&q)[8]) {
                                     acc_t t[3], dt[3], d2t[3], ggn[3], w[8];
                                     cell_blend(cell, t, dt, d2t);
                                     load_ggp(gg, n, ggn);
                                     corner_weights_and_moves(t, dt, d2t, ggn, cell.inside, w, q);
                                   });
    });
  }
  return {ggo, grad_acc.to(features.scalar_type()), grad_points};
}

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("sample_double_backward", &sample_double_backward_cpu);
}

}  // namespace grid
