// CUDA double backward of grid::sample: the gradients of sample_backward's outputs (the feature
// and point gradients) with respect to grad_out, features and points. One thread per point
// loops over the F channels of its eight corners; the math is in trilinear_math.h
// (corner_weights_and_moves, point_second_order). The feature gradient is scattered with
// atomics, so under torch.use_deterministic_algorithms(True) asking for it raises.
#include <ATen/Context.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"

namespace grid {
namespace {

template <typename scalar_t>
__device__ __forceinline__ void atomic_add_scalar(scalar_t* p, acc_type<scalar_t> value) {
  const acc_type<scalar_t> v[1] = {value};
  atomic_add_vec<1>(p, v);
}

template <typename scalar_t, typename point_t>
__global__ void __launch_bounds__(kThreads) sample_double_backward_kernel(
    const scalar_t* __restrict__ grad_out,     // [N, F]
    const scalar_t* __restrict__ features,     // [X, Y, Z, F] contiguous
    const scalar_t* __restrict__ gg_features,  // [X, Y, Z, F] contiguous, or null (zero)
    const point_t* __restrict__ gg_points,     // [N, 3], or null (zero)
    const point_t* __restrict__ points,        // [N, 3]
    scalar_t* __restrict__ grad_grad_out,      // [N, F], or null (not wanted)
    scalar_t* __restrict__ grad_features,      // [X, Y, Z, F] zeroed, or null
    point_t* __restrict__ grad_points,         // [N, 3], or null
    GridShape shape, int64_t N, Sampling mode) {
  using acc_t = acc_type<scalar_t>;
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const int64_t F = shape.F;
  const Cell<acc_t> cell = locate_cell<acc_t>(points + 3 * n, shape, mode);
  acc_t t[3], dt[3], d2t[3], gg[3], w[8], q[8], dot_g[8] = {}, dot_v[8] = {};
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    t[a] = cell.axis[a].frac;
    dt[a] = cell.axis[a].dindex;
    d2t[a] = cell.axis[a].d2index;
    gg[a] = gg_points ? static_cast<acc_t>(gg_points[3 * n + a]) : acc_t(0);
  }
  corner_weights_and_moves(t, dt, d2t, gg, cell.inside, w, q);
  const int64_t base = cell.offset(0, shape.stride[0], shape.stride[1], shape.stride[2]);
#pragma unroll 1
  for (int64_t f = 0; f < F; ++f) {
    const acc_t gf = static_cast<acc_t>(grad_out[n * F + f]);
    acc_t out = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (!cell.valid(k)) continue;
      const int64_t at = base + corner_dx(k) * shape.stride[0] + corner_dy(k) * shape.stride[1] +
                         corner_dz(k) * shape.stride[2] + f;
      const acc_t v = static_cast<acc_t>(features[at]);
      const acc_t G = gg_features ? static_cast<acc_t>(gg_features[at]) : acc_t(0);
      out += w[k] * G + q[k] * v;
      dot_v[k] += gf * v;
      dot_g[k] += gf * G;
      if (grad_features) atomic_add_scalar(grad_features + at, q[k] * gf);
    }
    if (grad_grad_out) grad_grad_out[n * F + f] = static_cast<scalar_t>(out);
  }
  if (grad_points) {
    acc_t grad[3];
    point_second_order(t, dt, d2t, gg, dot_g, dot_v, grad);
#pragma unroll
    for (int a = 0; a < 3; ++a) grad_points[3 * n + a] = static_cast<point_t>(grad[a]);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_double_backward_cuda(
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
  const c10::cuda::CUDAGuard guard(features_in.device());
  const at::Tensor &features = in.value, &points = in.coords, &grad_out = in.grad_out;
  const at::Tensor &ggf = in.gg_value, &ggp = in.gg_coords;
  const int64_t N = points.size(0);
  // Only the point gradient's incoming gradient moves the feature gradient.
  const bool scatter = output_mask[1] && ggp.defined() && N > 0;
  if (scatter) at::globalContext().alertNotDeterministic("grid.sample double backward (CUDA)");
  at::Tensor ggo = masked_output(output_mask[0], grad_out_in.sizes(), features.options());
  at::Tensor grad_features = masked_output(output_mask[1], features.sizes(), features.options(),
                                           /*zeroed=*/true);  // [X, Y, Z, F]
  at::Tensor grad_points = masked_output(output_mask[2], points_in.sizes(), points_in.options());
  if (N == 0 || !(output_mask[0] || scatter || output_mask[2]))
    return {ggo, grad_features, grad_points};
  const GridShape shape = grid_shape(features);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch_dtypes(features.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    sample_double_backward_kernel<scalar_t, point_t><<<one_pass_blocks(N), kThreads, 0, stream>>>(
        grad_out.data_ptr<scalar_t>(), features.data_ptr<scalar_t>(),
        ggf.defined() ? ggf.data_ptr<scalar_t>() : nullptr,
        ggp.defined() ? ggp.data_ptr<point_t>() : nullptr, points.data_ptr<point_t>(),
        output_mask[0] ? ggo.data_ptr<scalar_t>() : nullptr,
        scatter ? grad_features.data_ptr<scalar_t>() : nullptr,
        output_mask[2] ? grad_points.data_ptr<point_t>() : nullptr, shape, N, mode);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {ggo, grad_features, grad_points};
}

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("sample_double_backward", &sample_double_backward_cuda);
}

}  // namespace grid
