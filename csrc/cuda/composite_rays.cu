// CUDA front-to-back compositing of packed samples, one warp per ray: composite_rays (colour,
// depth, opacity over a background), its analytic backward (two passes over each ray, no
// atomics: every sample belongs to one ray), and ray_weights (the weights alone). The math is
// csrc/ray_composite.h's (which the CPU kernels run one ray per thread); here the 32 lanes take
// 32 consecutive samples at a time, so the loads are coalesced and a ray costs len / 32
// dependent steps. The transmittance in front of sample i is exp(-(sum of the taus before it)),
// that sum a warp scan: one thread per ray walked its ray serially, and the backward of a
// 8192-ray NeRF batch (31 samples a ray on average, hundreds on some) took 0.40 ms of a 2.9 ms
// step on an H100, bound by the longest ray (bench/NOTES.md, N1 kernels).
#include <torch/library.h>

#include <optional>

#include "cuda_utils.cuh"
#include "ray_checks.h"
#include "ray_composite.h"

namespace grid {
namespace {

constexpr int kWarp = 32;
constexpr int kRayThreads = 128;  // 4 rays a block
constexpr unsigned kAll = 0xffffffffu;

unsigned ray_blocks(int64_t R) {
  const int64_t rays_per_block = kRayThreads / kWarp;
  const int64_t blocks = (R + rays_per_block - 1) / rays_per_block;
  TORCH_CHECK(blocks < (int64_t(1) << 31), "grid: ", R, " rays exceed one CUDA launch");
  return static_cast<unsigned>(std::max<int64_t>(1, blocks));
}

// The ray of this warp (the same for its 32 lanes, so a warp exits whole) and the lane.
__device__ __forceinline__ int64_t warp_ray(int& lane) {
  lane = threadIdx.x % kWarp;
  return (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
}

template <typename T>
__device__ __forceinline__ T warp_inclusive_sum(T v, int lane) {
#pragma unroll
  for (int d = 1; d < kWarp; d <<= 1) {
    const T n = __shfl_up_sync(kAll, v, d);
    if (lane >= d) v += n;
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int d = kWarp / 2; d > 0; d >>= 1) v += __shfl_xor_sync(kAll, v, d);
  return v;
}

// One chunk of 32 samples from `base`: this lane's sample i (tau 0 past the end), its
// transmittance T_i and weight w_i, given `carry` (the taus of the ray before `base`), which
// moves past the chunk. `after`: exp(-(taus up to and including i)), i.e. T_{i+1}.
template <typename acc_t>
struct Chunk {
  acc_t tau, T, w, after;
};

template <typename scalar_t, typename acc_t = acc_type<scalar_t>>
__device__ __forceinline__ Chunk<acc_t> chunk_at(const scalar_t* tau, int64_t i, int64_t end,
                                                 int lane, acc_t& carry) {
  Chunk<acc_t> c;
  c.tau = i < end ? static_cast<acc_t>(tau[i]) : acc_t(0);
  const acc_t inclusive = warp_inclusive_sum(c.tau, lane);
  c.T = exp_(-(carry + inclusive - c.tau));
  c.w = -expm1_(-c.tau) * c.T;
  c.after = exp_(-(carry + inclusive));
  carry += __shfl_sync(kAll, inclusive, kWarp - 1);
  return c;
}

template <typename scalar_t>
__global__ void __launch_bounds__(kRayThreads)
    composite_kernel(CompositeArgs<scalar_t> a, int64_t R, scalar_t* __restrict__ rgb,
                     scalar_t* __restrict__ depth, scalar_t* __restrict__ acc_out) {
  using acc_t = acc_type<scalar_t>;
  constexpr int kChunk = 4;  // channels per pass, kept in registers
  int lane;
  const int64_t r = warp_ray(lane);
  if (r >= R) return;
  int64_t begin, end;
  ray_segment(a.offsets, r, a.S, begin, end);
  for (int64_t c0 = 0; c0 < a.C; c0 += kChunk) {
    acc_t carry = 0, acc = 0, dep = 0, col[kChunk] = {0, 0, 0, 0};
    for (int64_t base = begin; base < end; base += kWarp) {
      const int64_t i = base + lane;
      const Chunk<acc_t> s = chunk_at(a.tau, i, end, lane, carry);
      if (i >= end) continue;
      const scalar_t* c = a.colors + i * a.C + c0;
#pragma unroll
      for (int k = 0; k < kChunk; ++k)
        if (c0 + k < a.C) col[k] += s.w * static_cast<acc_t>(c[k]);
      acc += s.w;
      if (c0 == 0) dep += s.w * static_cast<acc_t>(a.t[i]);
    }
#pragma unroll
    for (int k = 0; k < kChunk; ++k) col[k] = warp_sum(col[k]);
    acc = warp_sum(acc);
    dep = warp_sum(dep);
    if (lane == 0) write_ray_outputs(a, r, c0, col, acc, dep, rgb, depth, acc_out);
  }
}

// dL/dtau_i = T_{i+1} g_i - sum_{k > i} w_k g_k with g_i = dL/dw_i (csrc/ray_composite.h): the
// total sum_k w_k g_k in a first pass, then each suffix as the total minus the inclusive prefix
// (a warp scan). Samples outside every ray are left alone (the caller zeroes them).
template <typename scalar_t>
__global__ void __launch_bounds__(kRayThreads)
    composite_backward_kernel(CompositeArgs<scalar_t> a, CompositeGrads<scalar_t> g, int64_t R,
                              scalar_t* grad_tau, scalar_t* grad_colors, scalar_t* grad_t) {
  using acc_t = acc_type<scalar_t>;
  int lane;
  const int64_t r = warp_ray(lane);
  if (r >= R) return;
  int64_t begin, end;
  ray_segment(a.offsets, r, a.S, begin, end);
  const scalar_t* g_rgb = g.rgb + r * a.C;
  const acc_t g_depth = static_cast<acc_t>(g.depth[r]);
  acc_t total = 0;
  if (grad_tau != nullptr) {  // the colours and depths matter for the thickness only
    acc_t carry = 0;
    for (int64_t base = begin; base < end; base += kWarp) {
      const int64_t i = base + lane;
      const Chunk<acc_t> s = chunk_at(a.tau, i, end, lane, carry);
      if (i < end) total += s.w * dloss_dweight(a, g, r, i);
    }
    total = warp_sum(total);
  }
  acc_t carry = 0, prefix = 0;
  for (int64_t base = begin; base < end; base += kWarp) {
    const int64_t i = base + lane;
    const Chunk<acc_t> s = chunk_at(a.tau, i, end, lane, carry);
    if (grad_tau != nullptr) {
      const acc_t gw = i < end ? dloss_dweight(a, g, r, i) : acc_t(0);
      const acc_t inclusive = prefix + warp_inclusive_sum(s.w * gw, lane);
      prefix = __shfl_sync(kAll, inclusive, kWarp - 1);
      if (i < end) grad_tau[i] = static_cast<scalar_t>(s.after * gw - (total - inclusive));
    }
    if (i >= end) continue;
    if (grad_colors != nullptr)
      for (int64_t k = 0; k < a.C; ++k)
        grad_colors[i * a.C + k] = static_cast<scalar_t>(s.w * static_cast<acc_t>(g_rgb[k]));
    if (grad_t != nullptr) grad_t[i] = static_cast<scalar_t>(s.w * g_depth);
  }
}

template <typename scalar_t>
__global__ void __launch_bounds__(kRayThreads)
    ray_weights_kernel(const scalar_t* __restrict__ tau, const int64_t* __restrict__ offsets,
                       int64_t S, int64_t R, scalar_t* __restrict__ weights) {
  using acc_t = acc_type<scalar_t>;
  int lane;
  const int64_t r = warp_ray(lane);
  if (r >= R) return;
  int64_t begin, end;
  ray_segment(offsets, r, S, begin, end);
  acc_t carry = 0;
  for (int64_t base = begin; base < end; base += kWarp) {
    const int64_t i = base + lane;
    const Chunk<acc_t> s = chunk_at(tau, i, end, lane, carry);
    if (i < end) weights[i] = static_cast<scalar_t>(s.w);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> composite_rays_cuda(
    const at::Tensor& tau,                          // [S]
    const at::Tensor& colors,                       // [S, C]
    const at::Tensor& t,                            // [S]
    const at::Tensor& offsets,                      // [R + 1] int64
    const std::optional<at::Tensor>& background) {  // [C] or [R, C]
  check_composite_args("grid.composite_rays", tau, colors, t, offsets, background);
  const c10::cuda::CUDAGuard guard(tau.device());
  const int64_t R = offsets.size(0) - 1, C = colors.size(1);
  at::Tensor rgb = at::empty({R, C}, tau.options());  // [R, C]
  at::Tensor depth = at::empty({R}, tau.options());   // [R]
  at::Tensor acc = at::empty({R}, tau.options());     // [R]
  if (R == 0) return {rgb, depth, acc};
  const CompositeTensors k = composite_tensors(tau, colors, t, offsets, background);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(tau.scalar_type(), "composite_rays", [&] {
    composite_kernel<scalar_t><<<ray_blocks(R), kRayThreads, 0, stream>>>(
        composite_args<scalar_t>(k), R, rgb.data_ptr<scalar_t>(), depth.data_ptr<scalar_t>(),
        acc.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {rgb, depth, acc};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> composite_rays_backward_cuda(
    const at::Tensor& grad_rgb,    // [R, C]
    const at::Tensor& grad_depth,  // [R]
    const at::Tensor& grad_acc,    // [R]
    const at::Tensor& tau, const at::Tensor& colors, const at::Tensor& t, const at::Tensor& offsets,
    const std::optional<at::Tensor>& background, std::array<bool, 3> output_mask) {
  const char* op = "grid.composite_rays_backward";
  check_composite_args(op, tau, colors, t, offsets, background);
  const int64_t R = offsets.size(0) - 1, S = tau.size(0), C = colors.size(1);
  check_composite_grads(op, grad_rgb, grad_depth, grad_acc, tau, R, C);
  const c10::cuda::CUDAGuard guard(tau.device());
  const auto opts = tau.options();
  // Zeroed: samples outside every ray (padding) get no gradient.
  at::Tensor g_tau = output_mask[0] ? at::zeros({S}, opts) : at::empty({0}, opts);
  at::Tensor g_colors = output_mask[1] ? at::zeros({S, C}, opts) : at::empty({0}, opts);
  at::Tensor g_t = output_mask[2] ? at::zeros({S}, opts) : at::empty({0}, opts);
  if (R == 0 || !(output_mask[0] || output_mask[1] || output_mask[2]))
    return {g_tau, g_colors, g_t};
  const CompositeTensors k = composite_tensors(tau, colors, t, offsets, background);
  const at::Tensor gr = grad_rgb.contiguous(), gd = grad_depth.contiguous(),
                   ga = grad_acc.contiguous();
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(tau.scalar_type(), "composite_rays_backward", [&] {
    const CompositeGrads<scalar_t> grads{gr.data_ptr<scalar_t>(), gd.data_ptr<scalar_t>(),
                                         ga.data_ptr<scalar_t>()};
    composite_backward_kernel<scalar_t><<<ray_blocks(R), kRayThreads, 0, stream>>>(
        composite_args<scalar_t>(k), grads, R,
        output_mask[0] ? g_tau.data_ptr<scalar_t>() : nullptr,
        output_mask[1] ? g_colors.data_ptr<scalar_t>() : nullptr,
        output_mask[2] ? g_t.data_ptr<scalar_t>() : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {g_tau, g_colors, g_t};
}

at::Tensor ray_weights_cuda(const at::Tensor& tau,        // [S]
                            const at::Tensor& offsets) {  // [R + 1] int64
  const char* op = "grid.ray_weights";
  check_float_rays(op, "tau", tau);
  TORCH_CHECK(tau.dim() == 1, op, ": tau: expected shape [S], got ", tau.sizes());
  check_offsets(op, offsets, tau);
  const c10::cuda::CUDAGuard guard(tau.device());
  const int64_t R = offsets.size(0) - 1, S = tau.size(0);
  at::Tensor weights = at::zeros({S}, tau.options());  // [S]; 0 outside every ray
  if (R == 0 || S == 0) return weights;
  const at::Tensor x = tau.contiguous(), o = offsets.contiguous();
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(tau.scalar_type(), "ray_weights", [&] {
    ray_weights_kernel<scalar_t><<<ray_blocks(R), kRayThreads, 0, stream>>>(
        x.data_ptr<scalar_t>(), o.data_ptr<int64_t>(), S, R, weights.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return weights;
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("composite_rays", &composite_rays_cuda);
  m.impl("composite_rays_backward", &composite_rays_backward_cuda);
  m.impl("ray_weights", &ray_weights_cuda);
}

}  // namespace grid
