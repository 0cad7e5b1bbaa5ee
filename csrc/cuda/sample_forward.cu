// CUDA forward of grid::sample. A group of 2^glog threads handles one point: it locates the
// cell once per thread and each thread blends V-wide vectors of the F channels of the eight
// corners, read straight from the channels-last grid (no [N, 8, F] tensor).
#include <torch/library.h>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"
#include "sample_small_f.cuh"

namespace grid {
namespace {

// Blocks of 256 threads per SM: with int32 offsets 5 (48 registers, no spills, more gathers in
// flight); 64-bit offsets need 4 to avoid spilling. One 4-byte-or-smaller channel per thread
// (V = 1, e.g. F = 1) with int32 offsets fits 32 registers: 8 (full occupancy), which the world
// box's multiply-add would otherwise cost it (36 registers, 6 blocks).
template <typename scalar_t, typename index_t, int V, bool kWide>
constexpr int kForwardBlocks = sizeof(index_t) == 8                        ? 4
                               : V == 1 && !kWide && sizeof(scalar_t) <= 4 ? 8
                                                                           : 5;

// One thread per point and vector of V channels (kWide: more than 32 vectors, so each of the
// point's 32 threads loops over several). One launch covers every point: no grid-stride loop.
template <typename scalar_t, typename point_t, typename index_t, int V, bool kWide>
__global__ void __launch_bounds__(kThreads, kForwardBlocks<scalar_t, index_t, V, kWide>)
    sample_forward_kernel(const scalar_t* __restrict__ features,  // [X, Y, Z, F], strided
                          const point_t* __restrict__ points,     // [N, 3]
                          scalar_t* __restrict__ out,             // [N, F]
                          GridShape shape, index_t N, int glog, Sampling mode) {
  using acc_t = acc_type<scalar_t>;
  const index_t F = shape.F, vectors = F / V;
  const index_t sx = shape.stride[0], sy = shape.stride[1], sz = shape.stride[2];
  const index_t i = blockIdx.x * index_t(blockDim.x) + threadIdx.x;
  const index_t n = i >> glog;
  const int lane = i & ((1 << glog) - 1);
  if (n >= N || lane >= vectors) return;
  const Cell<acc_t, index_t> cell = locate_cell<acc_t, index_t>(points + 3 * n, shape, mode);
  const scalar_t* base = features + cell.offset(0, sx, sy, sz);  // corner 0
#pragma unroll 1
  for (index_t c = lane; c < vectors; c += (1 << glog)) {
    raw_t<scalar_t, V> f[8];  // all eight (predicated) loads in flight before the first use
#pragma unroll
    for (int k = 0; k < 8; ++k)
      f[k] = cell.valid(k) ? load_raw<scalar_t, V>(base + corner_dx(k) * sx + corner_dy(k) * sy +
                                                   corner_dz(k) * sz + c * V)
                           : raw_t<scalar_t, V>{};
    acc_t acc[V] = {};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      acc_t x[V];
      widen<scalar_t, V>(f[k], x);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] += cell.weight[k] * x[v];
    }
    Vec<scalar_t, V> o;
#pragma unroll
    for (int v = 0; v < V; ++v) o.v[v] = static_cast<scalar_t>(acc[v]);
    store_vec<scalar_t, V>(out + n * F + c * V, o);
    if constexpr (!kWide) break;
  }
}

// float32 grids of 2-4 channels whose voxel is not one vector (3 channels; 2 or 4 in a strided
// grid) take the one-thread-per-point kernel of sample_small_f.cuh instead of one thread per
// channel (S5 F = 3 forward: 0.0775 -> 0.0706 ms on an H100).
bool use_small_f(const at::Tensor& features, const at::Tensor& points, const at::Tensor& out) {
  const int64_t F = features.size(3);
  const bool one_vector =
      F == 1 || ((F == 2 || F == 4) &&
                 vec_aligned(F, {features.stride(0), features.stride(1), features.stride(2)},
                             {features.data_ptr(), out.data_ptr()}));
  return features.scalar_type() == at::kFloat && points.scalar_type() == at::kFloat && F <= 4 &&
         !one_vector &&
         fits_int32(points.size(0), {element_span(features), out.numel(), points.numel()});
}

at::Tensor sample_forward_cuda(const at::Tensor& features_in,  // [X, Y, Z, F]
                               const at::Tensor& points_in,    // [..., 3]
                               bool align_corners, c10::string_view padding,
                               c10::string_view interpolation,
                               std::optional<c10::ArrayRef<double>> bounds) {
  const Sampling mode =
      check_sample_args(features_in, points_in, align_corners, padding, interpolation, bounds);
  const c10::cuda::CUDAGuard guard(features_in.device());
  const at::Tensor features = channels_contiguous(features_in);
  const at::Tensor points = points_in.reshape({-1, 3}).contiguous();  // [N, 3]
  at::Tensor out = at::empty(sample_out_sizes(features, points_in), features.options());
  const int64_t N = points.size(0);
  if (N == 0) return out;
  const GridShape shape = grid_shape(features);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  if (use_small_f(features, points, out)) {
    dispatch_small_f(shape.F, [&](auto fc) {
      constexpr int FC = decltype(fc)::value, kPer = kSmallFPointsPerThread;
      constexpr auto kernel = sample_forward_small_f_kernel<FC, kPer, int32_t>;
      prefer_l1<kernel>();
      kernel<<<one_pass_blocks((N + kPer - 1) / kPer), kThreads, 0, stream>>>(
          features.data_ptr<float>(), points.data_ptr<float>(), out.data_ptr<float>(), shape,
          int32_t(N), mode);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    return out;
  }

  dispatch_dtypes(features.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    const bool aligned = vec_aligned(max_vec<scalar_t>(),
                                     {shape.F, shape.stride[0], shape.stride[1], shape.stride[2]},
                                     {features.data_ptr(), out.data_ptr()});
    const bool pairs = vec_aligned(2, {shape.F, shape.stride[0], shape.stride[1], shape.stride[2]},
                                   {features.data_ptr(), out.data_ptr()});
    const bool small =
        fits_int32(N << group_log2(shape.F), {element_span(features), out.numel(), points.numel()});
    dispatch_vec_or_pairs<scalar_t>(aligned, pairs, [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      const int glog = group_log2(shape.F / V);
      dispatch_index(small, [&](auto index) {
        using index_t = typename decltype(index)::type;
        const auto launch = [&](auto wide) {
          constexpr auto kernel =
              sample_forward_kernel<scalar_t, point_t, index_t, V, decltype(wide)::value>;
          prefer_l1<kernel>();
          kernel<<<one_pass_blocks(N << glog), kThreads, 0, stream>>>(
              features.data_ptr<scalar_t>(), points.data_ptr<point_t>(), out.data_ptr<scalar_t>(),
              shape, index_t(N), glog, mode);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        if (shape.F / V > 32)
          launch(std::true_type{});
        else
          launch(std::false_type{});
      });
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("sample", &sample_forward_cuda);
}

}  // namespace grid
