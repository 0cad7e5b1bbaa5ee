// CPU front-to-back compositing of packed samples, one ray per task: composite_rays (colour,
// depth, opacity over a background), its analytic backward, and ray_weights (the weights alone).
// The per-ray math is csrc/ray_composite.h, shared with the CUDA kernels.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <optional>

#include "ray_checks.h"
#include "ray_composite.h"

namespace grid {
namespace {

constexpr int64_t kRayGrain = 64;

std::tuple<at::Tensor, at::Tensor, at::Tensor> composite_rays_cpu(
    const at::Tensor& tau,                          // [S]
    const at::Tensor& colors,                       // [S, C]
    const at::Tensor& t,                            // [S]
    const at::Tensor& offsets,                      // [R + 1] int64
    const std::optional<at::Tensor>& background) {  // [C] or [R, C]
  check_composite_args("grid.composite_rays", tau, colors, t, offsets, background);
  const int64_t R = offsets.size(0) - 1, C = colors.size(1);
  at::Tensor rgb = at::empty({R, C}, tau.options());  // [R, C]
  at::Tensor depth = at::empty({R}, tau.options());   // [R]
  at::Tensor acc = at::empty({R}, tau.options());     // [R]
  const CompositeTensors k = composite_tensors(tau, colors, t, offsets, background);
  AT_DISPATCH_FLOATING_TYPES(tau.scalar_type(), "composite_rays", [&] {
    const auto args = composite_args<scalar_t>(k);
    scalar_t *o_rgb = rgb.data_ptr<scalar_t>(), *o_depth = depth.data_ptr<scalar_t>(),
             *o_acc = acc.data_ptr<scalar_t>();
    at::parallel_for(0, R, kRayGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) composite_ray(args, r, o_rgb, o_depth, o_acc);
    });
  });
  return {rgb, depth, acc};
}

// -> (grad_tau [S], grad_colors [S, C], grad_t [S]); an output not asked for in output_mask is
// an empty [0]. Samples outside every ray get zero gradients.
std::tuple<at::Tensor, at::Tensor, at::Tensor> composite_rays_backward_cpu(
    const at::Tensor& grad_rgb,    // [R, C]
    const at::Tensor& grad_depth,  // [R]
    const at::Tensor& grad_acc,    // [R]
    const at::Tensor& tau, const at::Tensor& colors, const at::Tensor& t, const at::Tensor& offsets,
    const std::optional<at::Tensor>& background, std::array<bool, 3> output_mask) {
  const char* op = "grid.composite_rays_backward";
  check_composite_args(op, tau, colors, t, offsets, background);
  const int64_t R = offsets.size(0) - 1, S = tau.size(0), C = colors.size(1);
  check_composite_grads(op, grad_rgb, grad_depth, grad_acc, tau, R, C);
  const auto opts = tau.options();
  at::Tensor g_tau = output_mask[0] ? at::zeros({S}, opts) : at::empty({0}, opts);
  at::Tensor g_colors = output_mask[1] ? at::zeros({S, C}, opts) : at::empty({0}, opts);
  at::Tensor g_t = output_mask[2] ? at::zeros({S}, opts) : at::empty({0}, opts);
  if (!(output_mask[0] || output_mask[1] || output_mask[2])) return {g_tau, g_colors, g_t};
  const CompositeTensors k = composite_tensors(tau, colors, t, offsets, background);
  const at::Tensor gr = grad_rgb.contiguous(), gd = grad_depth.contiguous(),
                   ga = grad_acc.contiguous();
  AT_DISPATCH_FLOATING_TYPES(tau.scalar_type(), "composite_rays_backward", [&] {
    const auto args = composite_args<scalar_t>(k);
    const CompositeGrads<scalar_t> grads{gr.data_ptr<scalar_t>(), gd.data_ptr<scalar_t>(),
                                         ga.data_ptr<scalar_t>()};
    scalar_t* o_tau = output_mask[0] ? g_tau.data_ptr<scalar_t>() : nullptr;
    scalar_t* o_colors = output_mask[1] ? g_colors.data_ptr<scalar_t>() : nullptr;
    scalar_t* o_t = output_mask[2] ? g_t.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, R, kRayGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        composite_ray_backward(args, grads, r, o_tau, o_colors, o_t);
    });
  });
  return {g_tau, g_colors, g_t};
}

at::Tensor ray_weights_cpu(const at::Tensor& tau,        // [S]
                           const at::Tensor& offsets) {  // [R + 1] int64
  const char* op = "grid.ray_weights";
  check_float_rays(op, "tau", tau);
  TORCH_CHECK(tau.dim() == 1, op, ": tau: expected shape [S], got ", tau.sizes());
  check_offsets(op, offsets, tau);
  const int64_t R = offsets.size(0) - 1, S = tau.size(0);
  at::Tensor weights = at::zeros({S}, tau.options());  // [S]; 0 outside every ray
  const at::Tensor x = tau.contiguous(), o = offsets.contiguous();
  AT_DISPATCH_FLOATING_TYPES(tau.scalar_type(), "ray_weights", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    const int64_t* po = o.data_ptr<int64_t>();
    scalar_t* w = weights.data_ptr<scalar_t>();
    at::parallel_for(0, R, kRayGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) ray_weights_of(px, po, S, r, w);
    });
  });
  return weights;
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("composite_rays", &composite_rays_cpu);
  m.impl("composite_rays_backward", &composite_rays_backward_cpu);
  m.impl("ray_weights", &ray_weights_cpu);
}

}  // namespace grid
