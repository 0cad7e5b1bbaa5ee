// CUDA backward of grid::trilinear. Same thread layout as the forward: the corner gradient is
// written as coalesced V-wide vectors; the local gradient is reduced over the point's group.
#include <torch/library.h>

#include <array>
#include <tuple>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"

namespace grid {
namespace {

template <typename scalar_t, typename point_t, int V, bool kCorners, bool kLocal>
__global__ void __launch_bounds__(kThreads)
    trilinear_backward_kernel(const scalar_t* __restrict__ grad_out,  // [N, F]
                              const scalar_t* __restrict__ corners,   // [N, 8, F] (kLocal)
                              const point_t* __restrict__ local,      // [N, 3]
                              scalar_t* __restrict__ grad_corners,    // [N, 8, F] (kCorners)
                              point_t* __restrict__ grad_local,       // [N, 3] (kLocal)
                              int64_t N, int64_t F, int glog) {
  using acc_t = acc_type<scalar_t>;
  const int64_t vectors = F / V;
  const int64_t items = N << glog;
  const unsigned mask = group_mask(glog);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < items;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i >> glog;
    const int lane = i & ((1 << glog) - 1);
    const acc_t u = (acc_t(local[3 * n]) + 1) / 2, v_ = (acc_t(local[3 * n + 1]) + 1) / 2,
                w_ = (acc_t(local[3 * n + 2]) + 1) / 2;
    acc_t w[8], dw[3][8];
    corner_weights<acc_t>(u, v_, w_, w);
    if constexpr (kLocal) corner_weight_grads<acc_t>(u, v_, w_, dw);
    acc_t grad[3] = {0, 0, 0};
    for (int64_t c = lane; c < vectors; c += (1 << glog)) {
      const Vec<scalar_t, V> gv = load_vec<scalar_t, V>(grad_out + n * F + c * V);
      if constexpr (kCorners) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          Vec<scalar_t, V> o;
#pragma unroll
          for (int v = 0; v < V; ++v) o.v[v] = static_cast<scalar_t>(w[k] * to_acc(gv.v[v]));
          store_vec<scalar_t, V>(grad_corners + (n * 8 + k) * F + c * V, o);
        }
      }
      if constexpr (kLocal) {
        Vec<scalar_t, V> f[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = load_vec<scalar_t, V>(corners + (n * 8 + k) * F + c * V);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          acc_t dot = 0;
#pragma unroll
          for (int v = 0; v < V; ++v) dot += to_acc(gv.v[v]) * to_acc(f[k].v[v]);
#pragma unroll
          for (int a = 0; a < 3; ++a) grad[a] += dw[a][k] * dot;
        }
      }
    }
    if constexpr (kLocal) {
#pragma unroll
      for (int a = 0; a < 3; ++a) grad[a] = group_sum(grad[a], mask, glog);
      if (lane == 0) {
#pragma unroll
        for (int a = 0; a < 3; ++a) grad_local[3 * n + a] = static_cast<point_t>(grad[a] / 2);
      }
    }
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> trilinear_backward_cuda(
    const at::Tensor& grad_out_in,  // [N, F]
    const at::Tensor& corners_in,   // [N, 8, F]
    const at::Tensor& local_in,     // [N, 3]
    std::array<bool, 2> output_mask) {
  check_trilinear_args(corners_in, local_in);
  check_grad_out("grid.trilinear_backward", grad_out_in, corners_in,
                 {corners_in.size(0), corners_in.size(2)});
  const c10::cuda::CUDAGuard guard(corners_in.device());
  const bool want_corners = output_mask[0], want_local = output_mask[1];
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor corners = corners_in.contiguous();
  const at::Tensor local = local_in.contiguous();
  const int64_t N = corners.size(0), F = corners.size(2);
  at::Tensor grad_corners =
      masked_output(want_corners, corners.sizes(), corners.options());                // [N, 8, F]
  at::Tensor grad_local = masked_output(want_local, local.sizes(), local.options());  // [N, 3]
  if (N == 0 || F == 0 || !(want_corners || want_local)) {
    if (want_local) grad_local.zero_();  // F == 0: nothing depends on local
    return {grad_corners, grad_local};
  }
  const auto stream = c10::cuda::getCurrentCUDAStream();

  dispatch_dtypes(corners.scalar_type(), local.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    const bool aligned = vec_aligned(max_vec<scalar_t>(), {F},
                                     {grad_out.data_ptr(), corners.data_ptr(),
                                      want_corners ? grad_corners.data_ptr() : nullptr});
    dispatch_vec<scalar_t>(aligned, [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      const int glog = group_log2(F / V);
      dispatch_mask(want_corners, want_local, [&](auto kc, auto kl) {
        trilinear_backward_kernel<scalar_t, point_t, V, decltype(kc)::value, decltype(kl)::value>
            <<<blocks_for(N << glog), kThreads, 0, stream>>>(
                grad_out.data_ptr<scalar_t>(), corners.data_ptr<scalar_t>(),
                local.data_ptr<point_t>(),
                want_corners ? grad_corners.data_ptr<scalar_t>() : nullptr,
                want_local ? grad_local.data_ptr<point_t>() : nullptr, N, F, glog);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  });
  return {grad_corners, grad_local};
}

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("trilinear_backward", &trilinear_backward_cuda);
}

}  // namespace grid
