// CUDA double backward of grid::trilinear: the gradients of trilinear_backward's outputs (the
// corner and local gradients) with respect to grad_out, corners and local. One thread per
// point; the math is in trilinear_math.h (corner_weights_and_moves, point_second_order).
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"

namespace grid {
namespace {

template <typename scalar_t, typename point_t>
__global__ void __launch_bounds__(kThreads) trilinear_double_backward_kernel(
    const scalar_t* __restrict__ grad_out,    // [N, F]
    const scalar_t* __restrict__ corners,     // [N, 8, F]
    const scalar_t* __restrict__ gg_corners,  // [N, 8, F], or null (zero)
    const point_t* __restrict__ gg_local,     // [N, 3], or null (zero)
    const point_t* __restrict__ local,        // [N, 3]
    scalar_t* __restrict__ grad_grad_out,     // [N, F], or null (not wanted)
    scalar_t* __restrict__ grad_corners,      // [N, 8, F], or null
    point_t* __restrict__ grad_local,         // [N, 3], or null
    int64_t N, int64_t F) {
  using acc_t = acc_type<scalar_t>;
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  // u = (local + 1) / 2: t = u, dt = 1/2 per unit of local, no second derivative.
  acc_t t[3], dt[3] = {0.5, 0.5, 0.5}, d2t[3] = {0, 0, 0}, gg[3], w[8], q[8];
  acc_t dot_g[8] = {}, dot_v[8] = {};
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    t[a] = (static_cast<acc_t>(local[3 * n + a]) + 1) / 2;
    gg[a] = gg_local ? static_cast<acc_t>(gg_local[3 * n + a]) : acc_t(0);
  }
  corner_weights_and_moves(t, dt, d2t, gg, 0xffu, w, q);
#pragma unroll 1
  for (int64_t f = 0; f < F; ++f) {
    const acc_t gf = static_cast<acc_t>(grad_out[n * F + f]);
    acc_t out = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int64_t at = (n * 8 + k) * F + f;
      const acc_t v = static_cast<acc_t>(corners[at]);
      const acc_t G = gg_corners ? static_cast<acc_t>(gg_corners[at]) : acc_t(0);
      out += w[k] * G + q[k] * v;
      dot_v[k] += gf * v;
      dot_g[k] += gf * G;
      if (grad_corners) grad_corners[at] = static_cast<scalar_t>(q[k] * gf);
    }
    if (grad_grad_out) grad_grad_out[n * F + f] = static_cast<scalar_t>(out);
  }
  if (grad_local) {
    acc_t grad[3];
    point_second_order(t, dt, d2t, gg, dot_g, dot_v, grad);
#pragma unroll
    for (int a = 0; a < 3; ++a) grad_local[3 * n + a] = static_cast<point_t>(grad[a]);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> trilinear_double_backward_cuda(
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
  const c10::cuda::CUDAGuard guard(corners_in.device());
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor corners = corners_in.contiguous();
  const at::Tensor local = local_in.contiguous();
  const at::Tensor ggc = grad_grad_corners_in ? grad_grad_corners_in->contiguous() : at::Tensor();
  const at::Tensor ggl = grad_grad_local_in ? grad_grad_local_in->contiguous() : at::Tensor();
  const int64_t N = corners.size(0), F = corners.size(2);
  // Only the local gradient's incoming gradient moves the corner gradient.
  const bool corner_grads = output_mask[1] && ggl.defined();
  at::Tensor ggo = masked_output(output_mask[0], grad_out.sizes(), corners.options());  // [N, F]
  at::Tensor grad_corners = masked_output(output_mask[1], corners.sizes(), corners.options(),
                                          /*zeroed=*/!corner_grads);  // [N, 8, F]
  at::Tensor grad_local = masked_output(output_mask[2], local.sizes(), local.options());  // [N, 3]
  if (N == 0 || !(output_mask[0] || corner_grads || output_mask[2]))
    return {ggo, grad_corners, grad_local};
  const auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch_dtypes(corners.scalar_type(), local.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    trilinear_double_backward_kernel<scalar_t, point_t>
        <<<one_pass_blocks(N), kThreads, 0, stream>>>(
            grad_out.data_ptr<scalar_t>(), corners.data_ptr<scalar_t>(),
            ggc.defined() ? ggc.data_ptr<scalar_t>() : nullptr,
            ggl.defined() ? ggl.data_ptr<point_t>() : nullptr, local.data_ptr<point_t>(),
            output_mask[0] ? ggo.data_ptr<scalar_t>() : nullptr,
            corner_grads ? grad_corners.data_ptr<scalar_t>() : nullptr,
            output_mask[2] ? grad_local.data_ptr<point_t>() : nullptr, N, F);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {ggo, grad_corners, grad_local};
}

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("trilinear_double_backward", &trilinear_double_backward_cuda);
}

}  // namespace grid
