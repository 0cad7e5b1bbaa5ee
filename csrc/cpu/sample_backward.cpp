// CPU backward of grid::sample. Deterministic: the feature gradient is scattered by
// corner_scatter.h (each voxel row owned by one task, points added in order).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "cell_stream.h"
#include "checks.h"
#include "corner_scatter.h"
#include "dispatch.h"
#include "trilinear_math.h"

namespace grid {
namespace {

// grad_points[n] = sum_k d weight_k / d point * <grad_out[n], features[corner_k]>.
template <typename scalar_t, typename point_t>
void grad_points_cpu(const scalar_t* g, const scalar_t* feat, const point_t* pts, point_t* gp,
                     const GridShape& shape, int64_t N, Sampling mode) {
  using acc_t = acc_type<scalar_t>;
  const int64_t F = shape.F;
  at::parallel_for(0, N, std::max<int64_t>(1, 4096 / F), [&](int64_t begin, int64_t end) {
    CellStream<acc_t, point_t, scalar_t> cells(pts, shape, mode, feat, false, begin, end);
    for (int64_t n = begin; n < end; ++n) {
      const Cell<acc_t> cell = cells.get(n);
      acc_t dweight[3][8];
      corner_weight_grads<acc_t>(cell.axis[0].frac, cell.axis[1].frac, cell.axis[2].frac, dweight);
      acc_t grad[3] = {0, 0, 0};
      for (int k = 0; k < 8; ++k) {
        if (!cell.valid(k)) continue;
        const scalar_t* fk =
            feat + cell.offset(k, shape.stride[0], shape.stride[1], shape.stride[2]);
        acc_t dot = 0;
        for (int64_t f = 0; f < F; ++f)
          dot += static_cast<acc_t>(g[n * F + f]) * static_cast<acc_t>(fk[f]);
        for (int a = 0; a < 3; ++a) grad[a] += dweight[a][k] * dot;
      }
      for (int a = 0; a < 3; ++a)
        gp[3 * n + a] = static_cast<point_t>(grad[a] * cell.axis[a].dindex);
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> sample_backward_cpu(
    const at::Tensor& grad_out_in,  // [..., F]
    const at::Tensor& features_in,  // [X, Y, Z, F]
    const at::Tensor& points_in,    // [..., 3]
    bool align_corners, c10::string_view padding, c10::string_view interpolation,
    std::array<bool, 2> output_mask, std::optional<c10::ArrayRef<double>> bounds) {
  const Sampling mode =
      check_sample_args(features_in, points_in, align_corners, padding, interpolation, bounds);
  check_grad_out("grid.sample_backward", grad_out_in, features_in,
                 sample_out_sizes(features_in, points_in));
  const bool want_features = output_mask[0], want_points = output_mask[1];
  const at::Tensor features = channels_contiguous(features_in);
  const at::Tensor points = contiguous_rows(points_in, 3);                     // [N, 3]
  const at::Tensor grad_out = contiguous_rows(grad_out_in, features.size(3));  // [N, F]
  const int64_t N = points.size(0);
  const GridShape shape = grid_shape(features);
  const auto acc_dtype = features.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;

  at::Tensor grad_acc = masked_output(want_features, features.sizes(),
                                      features.options().dtype(acc_dtype), true);  // [X, Y, Z, F]
  at::Tensor grad_points =
      masked_output(want_points, points_in.sizes(), points_in.options());  // [..., 3]
  if (N > 0) {
    dispatch_dtypes(features.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
      using scalar_t = typename decltype(s)::type;
      using point_t = typename decltype(p)::type;
      const scalar_t* g = grad_out.data_ptr<scalar_t>();
      const point_t* pts = points.data_ptr<point_t>();
      using acc_t = acc_type<scalar_t>;
      if (want_features)  // grad_features[corner_k(n)] += weight_k(n) * grad_out[n]
        scatter_corners_cpu<acc_t>(g, pts, grad_acc.data_ptr<acc_t>(), shape, N, mode,
                                   [](int64_t, const Cell<acc_t>& cell, acc_t(&w)[8]) {
                                     for (int k = 0; k < 8; ++k) w[k] = cell.weight[k];
                                   });
      if (want_points)
        grad_points_cpu<scalar_t, point_t>(g, features.data_ptr<scalar_t>(), pts,
                                           grad_points.data_ptr<point_t>(), shape, N, mode);
    });
  }
  // The float accumulator rounded to the features' dtype (no copy when they are equal).
  if (grad_acc.scalar_type() == features.scalar_type()) return {grad_acc, grad_points};
  return {grad_acc.to(features.scalar_type()), grad_points};
}

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("sample_backward", &sample_backward_cpu);
}

}  // namespace grid
