// CUDA forward of grid::trilinear. A group of 2^glog threads handles one point; each thread
// blends V-wide vectors of the eight corner rows, so every load is coalesced along F.
#include <torch/library.h>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"

namespace grid {
namespace {

template <typename scalar_t, typename point_t, int V>
__global__ void __launch_bounds__(kThreads)
    trilinear_forward_kernel(const scalar_t* __restrict__ corners,  // [N, 8, F]
                             const point_t* __restrict__ local,     // [N, 3]
                             scalar_t* __restrict__ out,            // [N, F]
                             int64_t N, int64_t F, int glog) {
  using acc_t = acc_type<scalar_t>;
  const int64_t vectors = F / V;
  const int64_t items = N << glog;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < items;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i >> glog;
    const int lane = i & ((1 << glog) - 1);
    acc_t w[8];
    corner_weights<acc_t>((acc_t(local[3 * n]) + 1) / 2, (acc_t(local[3 * n + 1]) + 1) / 2,
                          (acc_t(local[3 * n + 2]) + 1) / 2, w);
    const scalar_t* row = corners + n * 8 * F;
    for (int64_t c = lane; c < vectors; c += (1 << glog)) {
      Vec<scalar_t, V> f[8];  // all eight loads in flight before the first use
#pragma unroll
      for (int k = 0; k < 8; ++k) f[k] = load_vec<scalar_t, V>(row + k * F + c * V);
      Vec<scalar_t, V> o;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        acc_t acc = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) acc += w[k] * to_acc(f[k].v[v]);
        o.v[v] = static_cast<scalar_t>(acc);
      }
      store_vec<scalar_t, V>(out + n * F + c * V, o);
    }
  }
}

at::Tensor trilinear_forward_cuda(const at::Tensor& corners_in,  // [N, 8, F]
                                  const at::Tensor& local_in) {  // [N, 3]
  check_trilinear_args(corners_in, local_in);
  const c10::cuda::CUDAGuard guard(corners_in.device());
  const at::Tensor corners = corners_in.contiguous();
  const at::Tensor local = local_in.contiguous();
  const int64_t N = corners.size(0), F = corners.size(2);
  at::Tensor out = at::empty({N, F}, corners.options());  // [N, F]
  if (N == 0 || F == 0) return out;
  const auto stream = c10::cuda::getCurrentCUDAStream();

  dispatch_dtypes(corners.scalar_type(), local.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    const bool aligned =
        vec_aligned(max_vec<scalar_t>(), {F}, {corners.data_ptr(), out.data_ptr()});
    dispatch_vec<scalar_t>(aligned, [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      const int glog = group_log2(F / V);
      trilinear_forward_kernel<scalar_t, point_t, V>
          <<<blocks_for(N << glog), kThreads, 0, stream>>>(corners.data_ptr<scalar_t>(),
                                                           local.data_ptr<point_t>(),
                                                           out.data_ptr<scalar_t>(), N, F, glog);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("trilinear", &trilinear_forward_cuda);
}

}  // namespace grid
