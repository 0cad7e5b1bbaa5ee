// CPU double backward of grid::trilinear: the gradients of trilinear_backward's outputs (the
// corner and local gradients) with respect to grad_out, corners and local. The math is in
// trilinear_math.h (corner_weights_and_moves, point_second_order).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "checks.h"
#include "dispatch.h"
#include "trilinear_math.h"

namespace grid {

std::tuple<at::Tensor, at::Tensor, at::Tensor> trilinear_double_backward_cpu(
    const std::optional<at::Tensor>& grad_grad_corners_in,  // [N, 8, F]
    const std::optional<at::Tensor>& grad_grad_local_in,    // [N, 3]
    const at::Tensor& grad_out_in,                          // [N, F]
    const at::Tensor& corners_in,                           // [N, 8, F]
    const at::Tensor& local_in,                             // [N, 3]
    std::array<bool, 3> output_mask) {
  const char* op = "grid.trilinear_double_backward";
  check_trilinear_args(corners_in, local_in);
  check_grad_out(op, grad_out_in, corners_in, {corners_in.size(0), corners_in.size(2)});
  check_incoming_grad(op, "grad_grad_corners", grad_grad_corners_in, corners_in);
  check_incoming_grad(op, "grad_grad_local", grad_grad_local_in, local_in);
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor corners = corners_in.contiguous();
  const at::Tensor local = local_in.contiguous();
  const at::Tensor ggc = grad_grad_corners_in ? grad_grad_corners_in->contiguous() : at::Tensor();
  const at::Tensor ggl = grad_grad_local_in ? grad_grad_local_in->contiguous() : at::Tensor();
  const int64_t N = corners.size(0), F = corners.size(2);
  at::Tensor ggo = masked_output(output_mask[0], grad_out.sizes(), corners.options());  // [N, F]
  at::Tensor grad_corners = masked_output(output_mask[1], corners.sizes(), corners.options(),
                                          /*zeroed=*/!ggl.defined());  // [N, 8, F]
  at::Tensor grad_local = masked_output(output_mask[2], local.sizes(), local.options());  // [N, 3]
  if (N == 0) return {ggo, grad_corners, grad_local};

  dispatch_dtypes(corners.scalar_type(), local.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    using acc_t = acc_type<scalar_t>;
    const scalar_t* g = grad_out.data_ptr<scalar_t>();
    const scalar_t* c = corners.data_ptr<scalar_t>();
    const scalar_t* G = ggc.defined() ? ggc.data_ptr<scalar_t>() : nullptr;
    const point_t* l = local.data_ptr<point_t>();
    const point_t* gg = ggl.defined() ? ggl.data_ptr<point_t>() : nullptr;
    scalar_t* out_g = output_mask[0] ? ggo.data_ptr<scalar_t>() : nullptr;
    scalar_t* out_c = output_mask[1] && gg ? grad_corners.data_ptr<scalar_t>() : nullptr;
    point_t* out_l = output_mask[2] ? grad_local.data_ptr<point_t>() : nullptr;
    at::parallel_for(0, N, std::max<int64_t>(1, 2048 / F), [&](int64_t begin, int64_t end) {
      std::vector<acc_t> row(F);
      for (int64_t n = begin; n < end; ++n) {
        // u = (local + 1) / 2: t = u, dt = 1/2 per unit of local, no second derivative.
        acc_t t[3], dt[3] = {0.5, 0.5, 0.5}, d2t[3] = {0, 0, 0}, ggn[3], w[8], q[8];
        acc_t dot_g[8] = {}, dot_v[8] = {};
        for (int a = 0; a < 3; ++a) {
          t[a] = (static_cast<acc_t>(l[3 * n + a]) + 1) / 2;
          ggn[a] = gg ? static_cast<acc_t>(gg[3 * n + a]) : acc_t(0);
        }
        corner_weights_and_moves(t, dt, d2t, ggn, 0xffu, w, q);
        std::fill(row.begin(), row.end(), acc_t(0));
        const scalar_t* gn = g + n * F;
        for (int k = 0; k < 8; ++k) {
          const int64_t off = (n * 8 + k) * F;
          for (int64_t f = 0; f < F; ++f) {
            const acc_t vf = static_cast<acc_t>(c[off + f]);
            const acc_t Gf = G ? static_cast<acc_t>(G[off + f]) : acc_t(0);
            const acc_t gf = static_cast<acc_t>(gn[f]);
            row[f] += w[k] * Gf + q[k] * vf;
            dot_v[k] += gf * vf;
            dot_g[k] += gf * Gf;
            if (out_c) out_c[off + f] = static_cast<scalar_t>(q[k] * gf);
          }
        }
        if (out_g)
          for (int64_t f = 0; f < F; ++f) out_g[n * F + f] = static_cast<scalar_t>(row[f]);
        if (out_l) {
          acc_t grad[3];
          point_second_order(t, dt, d2t, ggn, dot_g, dot_v, grad);
          for (int a = 0; a < 3; ++a) out_l[3 * n + a] = static_cast<point_t>(grad[a]);
        }
      }
    });
  });
  return {ggo, grad_corners, grad_local};
}

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("trilinear_double_backward", &trilinear_double_backward_cpu);
}

}  // namespace grid
