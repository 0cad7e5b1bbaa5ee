// The gather probe (bench/probes/gather_probe.py): the loads and stores of grid::sample's CUDA
// forward with every cell computation taken out. Cells come precomputed, every corner is in
// range, so what is left is the memory system serving this access order.
#include <torch/extension.h>

#include "cuda/cuda_utils.cuh"

namespace {

// kPer 16-byte vectors of one corner per thread, all 8 * kPer loads in flight.
template <int kPer, int kBlocks>
__global__ void __launch_bounds__(grid::kThreads, kBlocks)
    gather_probe_kernel(const float* __restrict__ features,  // [X, Y, Z, F] contiguous
                        const int4* __restrict__ cells,      // [N]: corner-0 offset, u, v, w bits
                        float* __restrict__ out,             // [N, F]
                        int N, int F, int sx, int sy, int sz, int glog) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (N << glog)) return;
  const int n = i >> glog;
  const int c = (i & ((1 << glog) - 1)) * kPer * 4;
  const int4 cell = cells[n];
  float weight[8];
  grid::corner_weights(__int_as_float(cell.y), __int_as_float(cell.z), __int_as_float(cell.w),
                       weight);
  const float* base = features + cell.x + c;
  float4 f[8][kPer];
#pragma unroll
  for (int k = 0; k < 8; ++k)
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      f[k][j] = *reinterpret_cast<const float4*>(base + grid::corner_dx(k) * sx +
                                                 grid::corner_dy(k) * sy + grid::corner_dz(k) * sz +
                                                 4 * j);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      acc.x += weight[k] * f[k][j].x, acc.y += weight[k] * f[k][j].y;
      acc.z += weight[k] * f[k][j].z, acc.w += weight[k] * f[k][j].w;
    }
    *reinterpret_cast<float4*>(out + int64_t(n) * F + c + 4 * j) = acc;
  }
}

template <int kPer, int kBlocks>
void launch(const at::Tensor& features, const at::Tensor& cells, at::Tensor& out) {
  const int N = cells.size(0), F = features.size(3);
  const int glog = grid::group_log2(F / 4 / kPer);
  constexpr auto kernel = gather_probe_kernel<kPer, kBlocks>;
  grid::prefer_l1<kernel>();
  kernel<<<grid::one_pass_blocks(int64_t(N) << glog), grid::kThreads, 0,
           c10::cuda::getCurrentCUDAStream()>>>(
      features.data_ptr<float>(), reinterpret_cast<const int4*>(cells.data_ptr<int>()),
      out.data_ptr<float>(), N, F, features.stride(0), features.stride(1), features.stride(2),
      glog);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// features: [X, Y, Z, F] float32 contiguous, F a multiple of 8; cells: [N, 4] int32.
// per: 16-byte vectors per thread (1 or 2); blocks: blocks of 256 threads per SM (2 to 8).
at::Tensor gather_probe(const at::Tensor& features, const at::Tensor& cells, int64_t per,
                        int64_t blocks) {
  TORCH_CHECK(features.is_cuda() && features.scalar_type() == at::kFloat &&
                  features.is_contiguous() && features.dim() == 4 && features.size(3) % 8 == 0,
              "features: expected a contiguous float32 CUDA tensor [X, Y, Z, F], F % 8 == 0");
  TORCH_CHECK(cells.is_cuda() && cells.scalar_type() == at::kInt && cells.is_contiguous() &&
                  cells.dim() == 2 && cells.size(1) == 4,
              "cells: expected a contiguous int32 CUDA tensor [N, 4]");
  TORCH_CHECK(features.numel() < (int64_t(1) << 31) && cells.size(0) < (int64_t(1) << 26),
              "gather_probe: sizes must fit int32 offsets");
  at::Tensor out = at::empty({cells.size(0), features.size(3)}, features.options());
  if (per == 1 && blocks == 5)
    launch<1, 5>(features, cells, out);
  else if (per == 1 && blocks == 8)
    launch<1, 8>(features, cells, out);
  else if (per == 2 && blocks == 2)
    launch<2, 2>(features, cells, out);
  else if (per == 2 && blocks == 3)
    launch<2, 3>(features, cells, out);
  else
    TORCH_CHECK(false, "gather_probe: (per, blocks) must be (1, 5), (1, 8), (2, 2) or (2, 3)");
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gather_probe", &gather_probe);
}
