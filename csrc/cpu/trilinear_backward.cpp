// CPU backward of grid::trilinear: gradients to the corners and to the local positions.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "checks.h"
#include "dispatch.h"
#include "trilinear_math.h"

namespace grid {

std::tuple<at::Tensor, at::Tensor> trilinear_backward_cpu(
    const at::Tensor& grad_out_in,  // [N, F]
    const at::Tensor& corners_in,   // [N, 8, F]
    const at::Tensor& local_in,     // [N, 3]
    std::array<bool, 2> output_mask) {
  check_trilinear_args(corners_in, local_in);
  check_grad_out("grid.trilinear_backward", grad_out_in, corners_in,
                 {corners_in.size(0), corners_in.size(2)});
  const bool want_corners = output_mask[0], want_local = output_mask[1];
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor corners = corners_in.contiguous();
  const at::Tensor local = local_in.contiguous();
  const int64_t N = corners.size(0), F = corners.size(2);
  at::Tensor grad_corners =
      masked_output(want_corners, corners.sizes(), corners.options());                // [N, 8, F]
  at::Tensor grad_local = masked_output(want_local, local.sizes(), local.options());  // [N, 3]
  if (N == 0 || !(want_corners || want_local)) return {grad_corners, grad_local};

  dispatch_dtypes(corners.scalar_type(), local.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    using acc_t = acc_type<scalar_t>;
    const scalar_t* g = grad_out.data_ptr<scalar_t>();
    const scalar_t* c = corners.data_ptr<scalar_t>();
    const point_t* l = local.data_ptr<point_t>();
    scalar_t* gc = want_corners ? grad_corners.data_ptr<scalar_t>() : nullptr;
    point_t* gl = want_local ? grad_local.data_ptr<point_t>() : nullptr;
    const int64_t grain = std::max<int64_t>(1, 16384 / (8 * F));
    at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const acc_t u = (acc_t(l[3 * n]) + 1) / 2, v = (acc_t(l[3 * n + 1]) + 1) / 2,
                    w = (acc_t(l[3 * n + 2]) + 1) / 2;
        const scalar_t* gn = g + n * F;
        if (gc) {
          acc_t weight[8];
          corner_weights<acc_t>(u, v, w, weight);
          for (int k = 0; k < 8; ++k) {
            scalar_t* gck = gc + (n * 8 + k) * F;
            for (int64_t f = 0; f < F; ++f)
              gck[f] = static_cast<scalar_t>(weight[k] * static_cast<acc_t>(gn[f]));
          }
        }
        if (gl) {
          acc_t dweight[3][8];
          corner_weight_grads<acc_t>(u, v, w, dweight);
          acc_t grad[3] = {0, 0, 0};
          for (int k = 0; k < 8; ++k) {
            const scalar_t* ck = c + (n * 8 + k) * F;
            acc_t dot = 0;
            for (int64_t f = 0; f < F; ++f)
              dot += static_cast<acc_t>(gn[f]) * static_cast<acc_t>(ck[f]);
            for (int a = 0; a < 3; ++a) grad[a] += dweight[a][k] * dot;
          }
          // d u / d local = 1/2
          for (int a = 0; a < 3; ++a) gl[3 * n + a] = static_cast<point_t>(grad[a] / 2);
        }
      }
    });
  });
  return {grad_corners, grad_local};
}

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("trilinear_backward", &trilinear_backward_cpu);
}

}  // namespace grid
