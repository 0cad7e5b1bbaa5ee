// CUDA backward of grid::sample. One group of threads per point (as in the forward): the
// feature gradient is scattered with 16-byte vector atomics straight into a grid of the
// features' dtype; the point gradient is reduced over the group with warp shuffles.
#include <ATen/Context.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"

namespace grid {
namespace {

// Blocks per SM the register budget must allow: the scatter needs many warps in flight.
constexpr int kBackwardBlocks = 3;

template <typename scalar_t, typename point_t, int V, bool kFeatures, bool kPoints>
__global__ void __launch_bounds__(kThreads, kBackwardBlocks) sample_backward_kernel(
    const scalar_t* __restrict__ grad_out,  // [N, F]
    const scalar_t* __restrict__ features,  // [X, Y, Z, F] contiguous (read for kPoints)
    const point_t* __restrict__ points,     // [N, 3]
    scalar_t* __restrict__ grad_features,   // [X, Y, Z, F] contiguous (kFeatures)
    point_t* __restrict__ grad_points,      // [N, 3] (kPoints)
    GridShape shape, int64_t N, int glog, bool align_corners, bool border) {
  using acc_t = acc_type<scalar_t>;
  const int64_t F = shape.F, vectors = F / V;
  const int64_t items = N << glog;
  const unsigned mask = group_mask(glog);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < items;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i >> glog;
    const int lane = i & ((1 << glog) - 1);
    const Cell<acc_t> cell = locate_cell<acc_t>(points + 3 * n, shape, align_corners, border);
    const acc_t u = cell.axis[0].frac, v_ = cell.axis[1].frac, w_ = cell.axis[2].frac;
    acc_t dot[8] = {};  // <grad_out, features> per corner, over this thread's channels
    if (cell.any) {
#pragma unroll 1  // one vector per thread is the common case; unrolling only costs registers
      for (int64_t c = lane; c < vectors; c += (1 << glog)) {
        const Vec<scalar_t, V> gv = load_vec<scalar_t, V>(grad_out + n * F + c * V);
        acc_t g[V];
#pragma unroll
        for (int v = 0; v < V; ++v) g[v] = static_cast<acc_t>(gv.v[v]);
        if constexpr (kPoints) {
#pragma unroll
          for (int half = 0; half < 8; half += 4) {  // four corner loads in flight at a time
            Vec<scalar_t, V> f[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
              f[j] = cell.valid(half + j)
                         ? load_vec<scalar_t, V>(features +
                                                 cell.offset(half + j, shape.stride[0],
                                                             shape.stride[1], shape.stride[2]) +
                                                 c * V)
                         : Vec<scalar_t, V>{};
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
              for (int v = 0; v < V; ++v) dot[half + j] += g[v] * static_cast<acc_t>(f[j].v[v]);
          }
        }
        if constexpr (kFeatures) {
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            if (!cell.valid(k)) continue;
            acc_t add[V];
#pragma unroll
            for (int v = 0; v < V; ++v) add[v] = cell.weight[k] * g[v];
            atomic_add_vec<V>(
                grad_features + cell.offset(k, shape.stride[0], shape.stride[1], shape.stride[2]) +
                    c * V,
                add);
          }
        }
      }
    }
    if constexpr (kPoints) {
      acc_t dweight[3][8], grad[3];
      corner_weight_grads<acc_t>(u, v_, w_, dweight);
#pragma unroll
      for (int a = 0; a < 3; ++a) {
        grad[a] = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) grad[a] += dweight[a][k] * dot[k];
        grad[a] = group_sum(grad[a], mask, glog);
      }
      if (lane == 0) {
#pragma unroll
        for (int a = 0; a < 3; ++a)
          grad_points[3 * n + a] = static_cast<point_t>(grad[a] * cell.axis[a].dindex);
      }
    }
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> sample_backward_cuda(
    const at::Tensor& grad_out_in,  // [..., F]
    const at::Tensor& features_in,  // [X, Y, Z, F]
    const at::Tensor& points_in,    // [..., 3]
    bool align_corners, c10::string_view padding, std::array<bool, 2> output_mask) {
  const bool border = check_sample_args(features_in, points_in, std::string(padding));
  check_grad_out("grid.sample_backward", grad_out_in, features_in,
                 sample_out_sizes(features_in, points_in));
  const c10::cuda::CUDAGuard guard(features_in.device());
  const bool want_features = output_mask[0], want_points = output_mask[1];
  if (want_features)
    at::globalContext().alertNotDeterministic(
        "grid.sample backward on CUDA (gradient to features, accumulated with atomics)");
  // Contiguous, so that one set of corner offsets addresses both the features and their
  // gradient (two sets cost the registers that occupancy needs).
  const at::Tensor features = features_in.contiguous();
  const at::Tensor points = points_in.reshape({-1, 3}).contiguous();                     // [N, 3]
  const at::Tensor grad_out = grad_out_in.reshape({-1, features.size(3)}).contiguous();  // [N, F]
  const int64_t N = points.size(0);
  const GridShape shape = grid_shape(features);
  at::Tensor grad_features =
      masked_output(want_features, features.sizes(), features.options(), true);  // [X, Y, Z, F]
  at::Tensor grad_points =
      masked_output(want_points, points_in.sizes(), points_in.options());  // [..., 3]
  if (N > 0 && (want_features || want_points)) {
    const auto stream = c10::cuda::getCurrentCUDAStream();
    dispatch_dtypes(features.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
      using scalar_t = typename decltype(s)::type;
      using point_t = typename decltype(p)::type;
      const bool aligned = vec_aligned(max_vec<scalar_t>(),
                                       {shape.F, shape.stride[0], shape.stride[1], shape.stride[2]},
                                       {features.data_ptr(), grad_out.data_ptr()});
      dispatch_vec<scalar_t>(aligned, [&](auto vec) {
        constexpr int V = decltype(vec)::value;
        const int glog = group_log2(shape.F / V);
        dispatch_mask(want_features, want_points, [&](auto kf, auto kp) {
          sample_backward_kernel<scalar_t, point_t, V, decltype(kf)::value, decltype(kp)::value>
              <<<blocks_for(N << glog), kThreads, 0, stream>>>(
                  grad_out.data_ptr<scalar_t>(), features.data_ptr<scalar_t>(),
                  points.data_ptr<point_t>(),
                  want_features ? grad_features.data_ptr<scalar_t>() : nullptr,
                  want_points ? grad_points.data_ptr<point_t>() : nullptr, shape, N, glog,
                  align_corners, border);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
      });
    });
  }
  return {grad_features, grad_points};
}

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("sample_backward", &sample_backward_cuda);
}

}  // namespace grid
