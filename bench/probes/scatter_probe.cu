// The scatter probe (bench/probes/scatter_probe.py): the feature-gradient updates of grid::sample's
// CUDA backward (csrc/cuda/sample_backward.cu) with every cell computation and the point
// gradient taken out. Cells come precomputed, every corner is in range, the thread layout is the
// backward's (a group of 2 * F / 4 threads per point, split by the z side of the cell, one
// float4 of grad_out and four float4 updates per thread), so what is left is the memory system
// serving these updates in this order. Also: the same bytes as plain stores (racy, for timing
// only), the points visited through a sorted index, and cub's radix sort of the cell keys.
#include <torch/extension.h>

#include <cub/device/device_radix_sort.cuh>

#include "cuda/cuda_utils.cuh"

namespace {

// kAtomic: float4 atomicAdd (what the backward does) or a plain float4 store of the same value.
// kIndexed: point n is order[n] (its grad_out row and cell read through the index).
template <bool kAtomic, bool kIndexed>
__global__ void __launch_bounds__(grid::kThreads, 3)
    scatter_probe_kernel(const float* __restrict__ grad_out,  // [N, F]
                         const int4* __restrict__ cells,      // [N]: corner-0 offset, u, v, w bits
                         const int* __restrict__ order,       // [N] (kIndexed)
                         float* __restrict__ grad,            // [X, Y, Z, F] contiguous
                         int N, int F, int sx, int sy, int sz, int plog) {
  const int glog = plog + 1;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int p = i >> glog;
  if (p >= N) return;
  const int n = kIndexed ? order[p] : p;
  const int lane = i & ((1 << glog) - 1);
  const int dz = lane >> plog;             // the z side of the cell this thread updates
  const int c = lane & ((1 << plog) - 1);  // its vector of 4 channels
  const int4 cell = cells[n];
  const float u = __int_as_float(cell.y), v = __int_as_float(cell.z), w = __int_as_float(cell.w);
  const float wx[2] = {1 - u, u}, wy[2] = {1 - v, v}, wz = dz ? w : 1 - w;
  const float4 g = *reinterpret_cast<const float4*>(grad_out + int64_t(n) * F + 4 * c);
  float* side = grad + cell.x + dz * sz + 4 * c;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int dx = grid::corner_dx(2 * j), dy = grid::corner_dy(2 * j);
    const float weight = wx[dx] * wy[dy] * wz;
    const float4 add = make_float4(weight * g.x, weight * g.y, weight * g.z, weight * g.w);
    float4* target = reinterpret_cast<float4*>(side + dx * sx + dy * sy);
    if constexpr (kAtomic)
      atomicAdd(target, add);
    else
      *target = add;
  }
}

template <bool kAtomic, bool kIndexed>
void launch(const at::Tensor& grad_out, const at::Tensor& cells, const at::Tensor& order,
            at::Tensor& grad) {
  const int N = cells.size(0), F = grad.size(3);
  const int plog = grid::group_log2(F / 4);
  constexpr auto kernel = scatter_probe_kernel<kAtomic, kIndexed>;
  grid::prefer_l1<kernel>();
  kernel<<<grid::one_pass_blocks(int64_t(N) << (plog + 1)), grid::kThreads, 0,
           c10::cuda::getCurrentCUDAStream()>>>(
      grad_out.data_ptr<float>(), reinterpret_cast<const int4*>(cells.data_ptr<int>()),
      kIndexed ? order.data_ptr<int>() : nullptr, grad.data_ptr<float>(), N, F, grad.stride(0),
      grad.stride(1), grad.stride(2), plog);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Adds (atomic) or stores (not atomic) every point's weighted grad_out row into its 8 corners
// of `grad`, in place. grad_out: [N, F] float32; cells: [N, 4] int32 (gather_probe.py's
// precomputed_cells); order: [N] int32 visiting order, or an empty tensor for 0..N-1;
// grad: [X, Y, Z, F] float32 contiguous, F / 4 a power of two up to 16.
void scatter_probe(const at::Tensor& grad_out, const at::Tensor& cells, const at::Tensor& order,
                   at::Tensor grad, bool atomic) {
  TORCH_CHECK(
      grad.is_cuda() && grad.scalar_type() == at::kFloat && grad.is_contiguous() && grad.dim() == 4,
      "grad: expected a contiguous float32 CUDA tensor [X, Y, Z, F]");
  const int64_t F = grad.size(3);
  TORCH_CHECK(F % 4 == 0 && F / 4 <= 16 && ((F / 4) & (F / 4 - 1)) == 0,
              "grad: F / 4 must be a power of two up to 16, got F = ", F);
  TORCH_CHECK(cells.is_cuda() && cells.scalar_type() == at::kInt && cells.is_contiguous() &&
                  cells.dim() == 2 && cells.size(1) == 4,
              "cells: expected a contiguous int32 CUDA tensor [N, 4]");
  const int64_t N = cells.size(0);
  TORCH_CHECK(grad_out.is_cuda() && grad_out.scalar_type() == at::kFloat &&
                  grad_out.is_contiguous() && grad_out.dim() == 2 && grad_out.size(0) == N &&
                  grad_out.size(1) == F,
              "grad_out: expected a contiguous float32 CUDA tensor [N, F] = [", N, ", ", F, "]");
  const bool indexed = order.numel() > 0;
  TORCH_CHECK(!indexed || (order.is_cuda() && order.scalar_type() == at::kInt &&
                           order.is_contiguous() && order.numel() == N),
              "order: expected an empty tensor or a contiguous int32 CUDA tensor [N]");
  TORCH_CHECK(grad.numel() < (int64_t(1) << 31) && N < (int64_t(1) << 26),
              "scatter_probe: sizes must fit int32 offsets");
  if (N == 0) return;
  if (atomic && indexed)
    launch<true, true>(grad_out, cells, order, grad);
  else if (atomic)
    launch<true, false>(grad_out, cells, order, grad);
  else if (indexed)
    launch<false, true>(grad_out, cells, order, grad);
  else
    launch<false, false>(grad_out, cells, order, grad);
}

// cub's stable radix sort of (key, index) pairs over bits [0, end_bit), as the deterministic
// backward sorts: keys [N] int32 >= 0, values [N] int32 (0..N-1). Returns (sorted keys, order).
std::tuple<at::Tensor, at::Tensor> sort_pairs(const at::Tensor& keys, const at::Tensor& values,
                                              int64_t end_bit) {
  TORCH_CHECK(
      keys.is_cuda() && keys.scalar_type() == at::kInt && keys.is_contiguous() && keys.dim() == 1,
      "keys: expected a contiguous int32 CUDA tensor [N]");
  TORCH_CHECK(values.is_cuda() && values.scalar_type() == at::kInt && values.is_contiguous() &&
                  values.sizes() == keys.sizes(),
              "values: expected a contiguous int32 CUDA tensor shaped like keys");
  TORCH_CHECK(end_bit >= 1 && end_bit <= 31, "end_bit: expected 1..31, got ", end_bit);
  const int N = keys.numel();
  at::Tensor keys_out = at::empty_like(keys), values_out = at::empty_like(values);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  size_t bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, keys.data_ptr<int>(), keys_out.data_ptr<int>(), values.data_ptr<int>(),
      values_out.data_ptr<int>(), N, 0, int(end_bit), stream));
  at::Tensor temp = at::empty({int64_t(bytes)}, keys.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      temp.data_ptr(), bytes, keys.data_ptr<int>(), keys_out.data_ptr<int>(),
      values.data_ptr<int>(), values_out.data_ptr<int>(), N, 0, int(end_bit), stream));
  return {keys_out, values_out};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scatter_probe", &scatter_probe);
  m.def("sort_pairs", &sort_pairs);
}
