// CUDA front-to-back compositing of packed samples, one thread per ray: composite_rays (colour,
// depth, opacity over a background), its analytic backward (two passes over each ray, no
// atomics: every sample belongs to one ray), and ray_weights (the weights alone). The per-ray
// math is csrc/ray_composite.h, shared with the CPU kernels. Blocks are small (a batch holds a
// few thousand rays, one thread each, and every SM should get some).
#include <torch/library.h>

#include <optional>

#include "cuda_utils.cuh"
#include "ray_checks.h"
#include "ray_composite.h"

namespace grid {
namespace {

constexpr int kRayThreads = 64;

unsigned ray_blocks(int64_t R) {
  const int64_t blocks = (R + kRayThreads - 1) / kRayThreads;
  TORCH_CHECK(blocks < (int64_t(1) << 31), "grid: ", R, " rays exceed one CUDA launch");
  return static_cast<unsigned>(std::max<int64_t>(1, blocks));
}

template <typename scalar_t>
__global__ void __launch_bounds__(kRayThreads)
    composite_kernel(CompositeArgs<scalar_t> a, int64_t R, scalar_t* __restrict__ rgb,
                     scalar_t* __restrict__ depth, scalar_t* __restrict__ acc) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r < R) composite_ray(a, r, rgb, depth, acc);
}

template <typename scalar_t>
__global__ void __launch_bounds__(kRayThreads)
    composite_backward_kernel(CompositeArgs<scalar_t> a, CompositeGrads<scalar_t> g, int64_t R,
                              scalar_t* grad_tau, scalar_t* grad_colors, scalar_t* grad_t) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r < R) composite_ray_backward(a, g, r, grad_tau, grad_colors, grad_t);
}

template <typename scalar_t>
__global__ void __launch_bounds__(kRayThreads)
    ray_weights_kernel(const scalar_t* __restrict__ tau, const int64_t* __restrict__ offsets,
                       int64_t S, int64_t R, scalar_t* __restrict__ weights) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r < R) ray_weights_of(tau, offsets, S, r, weights);
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
