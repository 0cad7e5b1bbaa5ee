// CUDA double backward of grid::multires: the gradients of multires_backward's outputs (the
// table and point gradients) with respect to grad_out, table and points. One thread per point
// walks every level; per level the math is sample's (trilinear_math.h:
// corner_weights_and_moves, point_second_order) with linear weights. The table gradient is
// scattered with atomics, so under torch.use_deterministic_algorithms(True) asking for it
// raises (as sample's double backward).
#include <ATen/Context.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"
#include "multires_checks.h"
#include "multires_launch.cuh"
#include "multires_math.h"

namespace grid {
namespace {

template <typename scalar_t, typename point_t, int kF>
__global__ void __launch_bounds__(kThreads) multires_double_backward_kernel(
    const scalar_t* __restrict__ grad_out,   // [N, L F]
    const scalar_t* __restrict__ table,      // [L, T, F] contiguous
    const scalar_t* __restrict__ gg_table,   // [L, T, F] contiguous, or null (zero)
    const point_t* __restrict__ gg_points,   // [N, 3], or null (zero)
    const point_t* __restrict__ points,      // [N, 3]
    scalar_t* __restrict__ grad_grad_out,    // [N, L F], or null (not wanted)
    acc_type<scalar_t>* __restrict__ grad_table,  // [L, T, F] zeroed, or null
    point_t* __restrict__ grad_points,            // [N, 3], or null
    MultiresLevels levels, int64_t N) {
  using acc_t = acc_type<scalar_t>;
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const int F = multires_features<kF>(levels);
  acc_t p[3], gg[3], grad[3] = {0, 0, 0};
  const acc_t d2t[3] = {0, 0, 0};  // linear weights
  multires_load_point(points, n, p);
#pragma unroll
  for (int a = 0; a < 3; ++a) gg[a] = gg_points ? static_cast<acc_t>(gg_points[3 * n + a]) : 0;
  const scalar_t* g = grad_out + n * levels.L * F;
  for (int l = 0; l < levels.L; ++l) {
    const MultiresCell<acc_t> cell = multires_cell(p, levels, l);
    acc_t w[8], q[8], dot_g[8] = {}, dot_v[8] = {};
    corner_weights_and_moves(cell.t, cell.dt, d2t, gg, 0xffu, w, q);
    for (int f = 0; f < F; ++f) {
      const acc_t gf = to_acc(g[l * F + f]);
      acc_t out = 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int64_t off = multires_row_offset(levels, l, cell.row[k], F) + f;
        const acc_t vf = to_acc(table[off]);
        const acc_t Gf = gg_table ? to_acc(gg_table[off]) : acc_t(0);
        out += w[k] * Gf + q[k] * vf;
        dot_v[k] += gf * vf;
        dot_g[k] += gf * Gf;
        if (grad_table) atomicAdd(grad_table + off, q[k] * gf);
      }
      if (grad_grad_out) grad_grad_out[(n * levels.L + l) * F + f] = static_cast<scalar_t>(out);
    }
    if (grad_points) {
      acc_t level_grad[3];
      point_second_order(cell.t, cell.dt, d2t, gg, dot_g, dot_v, level_grad);
#pragma unroll
      for (int a = 0; a < 3; ++a) grad[a] += level_grad[a];
    }
  }
  if (grad_points)
#pragma unroll
    for (int a = 0; a < 3; ++a) grad_points[3 * n + a] = static_cast<point_t>(grad[a]);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> multires_double_backward_cuda(
    const std::optional<at::Tensor>& grad_grad_table_in,   // [L, T, F]
    const std::optional<at::Tensor>& grad_grad_points_in,  // [..., 3]
    const at::Tensor& grad_out_in,                         // [..., L F]
    const at::Tensor& table_in,                            // [L, T, F]
    const at::Tensor& points_in,                           // [..., 3]
    at::IntArrayRef resolutions, std::array<bool, 3> output_mask) {
  const MultiresLevels levels = check_multires_args(table_in, points_in, resolutions);
  const DoubleBackwardInputs in = double_backward_inputs(
      "grid.multires_double_backward", grad_grad_table_in, "grad_grad_table", grad_grad_points_in,
      "grad_grad_points", grad_out_in, table_in, points_in,
      multires_out_sizes(table_in, points_in));
  const c10::cuda::CUDAGuard guard(table_in.device());
  const at::Tensor &table = in.value, &points = in.coords, &ggt = in.gg_value, &ggp = in.gg_coords;
  const at::Tensor grad_out = in.grad_out.view({-1, int64_t(levels.L) * levels.F});  // [N, L F]
  const int64_t N = points.size(0);
  const auto acc_dtype = table.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  // Only the point gradient's incoming gradient moves the table gradient.
  const bool scatter = output_mask[1] && ggp.defined() && N > 0;
  if (scatter) at::globalContext().alertNotDeterministic("grid.multires double backward (CUDA)");
  at::Tensor ggo = masked_output(output_mask[0], grad_out_in.sizes(), table.options());
  at::Tensor grad_acc = masked_output(output_mask[1], table.sizes(),
                                      table.options().dtype(acc_dtype), /*zeroed=*/true);
  at::Tensor grad_points = masked_output(output_mask[2], points_in.sizes(), points_in.options());
  if (N > 0 && (output_mask[0] || scatter || output_mask[2])) {
    const auto stream = c10::cuda::getCurrentCUDAStream();
    dispatch_dtypes(table.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
      using scalar_t = typename decltype(s)::type;
      using point_t = typename decltype(p)::type;
      using acc_t = acc_type<scalar_t>;
      dispatch_multires_f(levels.F, [&](auto f) {
        multires_double_backward_kernel<scalar_t, point_t, decltype(f)::value>
            <<<one_pass_blocks(N), kThreads, 0, stream>>>(
                grad_out.data_ptr<scalar_t>(), table.data_ptr<scalar_t>(),
                ggt.defined() ? ggt.data_ptr<scalar_t>() : nullptr,
                ggp.defined() ? ggp.data_ptr<point_t>() : nullptr, points.data_ptr<point_t>(),
                output_mask[0] ? ggo.data_ptr<scalar_t>() : nullptr,
                scatter ? grad_acc.data_ptr<acc_t>() : nullptr,
                output_mask[2] ? grad_points.data_ptr<point_t>() : nullptr, levels, N);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  }
  return {ggo, grad_acc.to(table.scalar_type()), grad_points};
}

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("multires_double_backward", &multires_double_backward_cuda);
}

}  // namespace grid
