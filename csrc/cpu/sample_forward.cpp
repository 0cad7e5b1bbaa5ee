// CPU forward of grid::sample: gathers the eight corners of each point's cell in the kernel.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "cell_stream.h"
#include "checks.h"
#include "dispatch.h"
#include "trilinear_math.h"

namespace grid {

at::Tensor sample_forward_cpu(const at::Tensor& features_in,  // [X, Y, Z, F]
                              const at::Tensor& points_in,    // [..., 3]
                              bool align_corners, c10::string_view padding,
                              c10::string_view interpolation,
                              std::optional<c10::ArrayRef<double>> bounds) {
  const Sampling mode =
      check_sample_args(features_in, points_in, align_corners, padding, interpolation, bounds);
  const at::Tensor features = channels_contiguous(features_in);
  const at::Tensor points = contiguous_rows(points_in, 3);  // [N, 3]
  at::Tensor out = at::empty(sample_out_sizes(features, points_in), features.options());
  const int64_t N = points.size(0);
  if (N == 0) return out;
  const GridShape shape = grid_shape(features);
  const int64_t F = shape.F;

  dispatch_dtypes(features.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    using acc_t = acc_type<scalar_t>;
    const scalar_t* feat = features.data_ptr<scalar_t>();
    const point_t* pts = points.data_ptr<point_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 4096 / F);
    at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> row(F);
      CellStream<acc_t, point_t, scalar_t> cells(pts, shape, mode, feat, false, begin, end);
      for (int64_t n = begin; n < end; ++n) {
        const Cell<acc_t> cell = cells.get(n);
        std::fill(row.begin(), row.end(), acc_t(0));
        for (int k = 0; k < 8; ++k) {
          if (!cell.valid(k)) continue;
          const scalar_t* fk =
              feat + cell.offset(k, shape.stride[0], shape.stride[1], shape.stride[2]);
          const acc_t w = cell.weight[k];
          for (int64_t f = 0; f < F; ++f) row[f] += w * static_cast<acc_t>(fk[f]);
        }
        for (int64_t f = 0; f < F; ++f) o[n * F + f] = static_cast<scalar_t>(row[f]);
      }
    });
  });
  return out;
}

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("sample", &sample_forward_cpu);
}

}  // namespace grid
