// Argument checks of the rendering ops (march_rays_*, composite_rays*, ray_weights), shared by
// the CPU and CUDA kernels. Every message names the op, the argument and what was expected. Host
// only. None of them reads tensor values (that would wait for the GPU). Also the compositing
// ops' contiguous inputs and kernel arguments, the same on both devices.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "ray_composite.h"  // CompositeArgs

namespace grid {

inline void check_float_rays(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, op, ": ", name,
              ": expected a float32 or float64 tensor, got ", t.scalar_type());
}

inline void check_like(const char* op, const char* name, const at::Tensor& t, const char* like_name,
                       const at::Tensor& like) {
  TORCH_CHECK(t.device() == like.device(), op, ": ", name, ": expected a tensor on ", like.device(),
              " like ", like_name, ", got ", t.device());
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), op, ": ", name, ": expected dtype ",
              like.scalar_type(), " like ", like_name, ", got ", t.scalar_type());
}

// A per-ray [R] parameter (step, jitter): any strides (an expanded scalar reads in place).
inline void check_per_ray(const char* op, const char* name, const at::Tensor& t,
                          const at::Tensor& origins) {
  check_like(op, name, t, "origins", origins);
  TORCH_CHECK(t.dim() == 1 && t.size(0) == origins.size(0), op, ": ", name,
              ": expected shape [R] with R = ", origins.size(0), ", got ", t.sizes());
}

// origins, directions [R, 3]; lo, hi [3]; step [R]; jitter [R] or None; occupancy [X, Y, Z] bool
// with occupancy_bounds [2, 3], or neither.
inline void check_march_args(const char* op, const at::Tensor& origins,
                             const at::Tensor& directions, const at::Tensor& lo,
                             const at::Tensor& hi, const at::Tensor& step,
                             const std::optional<at::Tensor>& jitter,
                             const std::optional<at::Tensor>& occupancy,
                             const std::optional<at::Tensor>& occupancy_bounds, int64_t max_steps) {
  check_float_rays(op, "origins", origins);
  TORCH_CHECK(origins.dim() == 2 && origins.size(1) == 3, op,
              ": origins: expected shape [R, 3], got ", origins.sizes());
  check_like(op, "directions", directions, "origins", origins);
  TORCH_CHECK(directions.sizes() == origins.sizes(), op, ": directions: expected shape ",
              origins.sizes(), " like origins, got ", directions.sizes());
  check_like(op, "lo", lo, "origins", origins);
  check_like(op, "hi", hi, "origins", origins);
  TORCH_CHECK(lo.dim() == 1 && lo.size(0) == 3, op, ": lo: expected shape [3], got ", lo.sizes());
  TORCH_CHECK(hi.dim() == 1 && hi.size(0) == 3, op, ": hi: expected shape [3], got ", hi.sizes());
  check_per_ray(op, "step", step, origins);
  if (jitter) check_per_ray(op, "jitter", *jitter, origins);
  TORCH_CHECK(occupancy.has_value() == occupancy_bounds.has_value(), op,
              ": occupancy_bounds: expected a tensor exactly when occupancy is given");
  if (occupancy) {
    TORCH_CHECK(occupancy->scalar_type() == at::kBool, op,
                ": occupancy: expected a bool tensor [X, Y, Z], got ", occupancy->scalar_type());
    TORCH_CHECK(occupancy->dim() == 3 && occupancy->numel() > 0, op,
                ": occupancy: expected a non-empty shape [X, Y, Z], got ", occupancy->sizes());
    TORCH_CHECK(occupancy->device() == origins.device(), op, ": occupancy: expected a tensor on ",
                origins.device(), " like origins, got ", occupancy->device());
    check_like(op, "occupancy_bounds", *occupancy_bounds, "origins", origins);
    TORCH_CHECK(occupancy_bounds->dim() == 2 && occupancy_bounds->size(0) == 2 &&
                    occupancy_bounds->size(1) == 3,
                op, ": occupancy_bounds: expected shape [2, 3], got ", occupancy_bounds->sizes());
  }
  TORCH_CHECK(max_steps >= 0, op, ": max_steps: expected an int >= 0, got ", max_steps);
}

// offsets: [R + 1] int64 on the device of `like`.
inline void check_offsets(const char* op, const at::Tensor& offsets, const at::Tensor& like) {
  TORCH_CHECK(offsets.scalar_type() == at::kLong, op,
              ": offsets: expected an int64 tensor [R + 1], got ", offsets.scalar_type());
  TORCH_CHECK(offsets.dim() == 1 && offsets.size(0) >= 1, op,
              ": offsets: expected shape [R + 1] (at least one element), got ", offsets.sizes());
  TORCH_CHECK(offsets.device() == like.device(), op, ": offsets: expected a tensor on ",
              like.device(), ", got ", offsets.device());
}

// tau [S]; colors [S, C], C >= 1; t [S]; offsets [R + 1]; background [C], [R, C] or None.
inline void check_composite_args(const char* op, const at::Tensor& tau, const at::Tensor& colors,
                                 const at::Tensor& t, const at::Tensor& offsets,
                                 const std::optional<at::Tensor>& background) {
  check_float_rays(op, "tau", tau);
  TORCH_CHECK(tau.dim() == 1, op, ": tau: expected shape [S], got ", tau.sizes());
  check_like(op, "colors", colors, "tau", tau);
  TORCH_CHECK(colors.dim() == 2 && colors.size(0) == tau.size(0) && colors.size(1) >= 1, op,
              ": colors: expected shape [S, C] with S = ", tau.size(0), " and C >= 1, got ",
              colors.sizes());
  check_like(op, "t", t, "tau", tau);
  TORCH_CHECK(t.sizes() == tau.sizes(), op, ": t: expected shape ", tau.sizes(), " like tau, got ",
              t.sizes());
  check_offsets(op, offsets, tau);
  if (background) {
    check_like(op, "background", *background, "tau", tau);
    const int64_t R = offsets.size(0) - 1, C = colors.size(1);
    const bool shared = background->dim() == 1 && background->size(0) == C;
    const bool per_ray =
        background->dim() == 2 && background->size(0) == R && background->size(1) == C;
    TORCH_CHECK(shared || per_ray, op, ": background: expected shape [", C, "] or [", R, ", ", C,
                "], got ", background->sizes());
  }
}

// The backward's incoming gradients: grad_rgb [R, C], grad_depth [R], grad_acc [R], like tau.
inline void check_composite_grads(const char* op, const at::Tensor& grad_rgb,
                                  const at::Tensor& grad_depth, const at::Tensor& grad_acc,
                                  const at::Tensor& tau, int64_t R, int64_t C) {
  check_like(op, "grad_rgb", grad_rgb, "tau", tau);
  check_like(op, "grad_depth", grad_depth, "tau", tau);
  check_like(op, "grad_acc", grad_acc, "tau", tau);
  TORCH_CHECK(grad_rgb.dim() == 2 && grad_rgb.size(0) == R && grad_rgb.size(1) == C, op,
              ": grad_rgb: expected shape [", R, ", ", C, "], got ", grad_rgb.sizes());
  TORCH_CHECK(grad_depth.dim() == 1 && grad_depth.size(0) == R, op,
              ": grad_depth: expected shape [", R, "], got ", grad_depth.sizes());
  TORCH_CHECK(grad_acc.dim() == 1 && grad_acc.size(0) == R, op, ": grad_acc: expected shape [", R,
              "], got ", grad_acc.sizes());
}

// The background laid out for the kernels: (contiguous rows, stride between rays' rows).
inline std::pair<at::Tensor, int64_t> background_rows(const std::optional<at::Tensor>& background) {
  if (!background) return {at::Tensor(), 0};
  const at::Tensor bg = background->contiguous();
  return {bg, bg.dim() == 1 ? 0 : bg.size(1)};
}

// The compositing ops' inputs, contiguous, and the kernels' view of them.
struct CompositeTensors {  // contiguous copies, alive until the loops or kernels are done
  at::Tensor tau, colors, t, offsets, background;
  int64_t bg_stride = 0;
};

inline CompositeTensors composite_tensors(const at::Tensor& tau, const at::Tensor& colors,
                                          const at::Tensor& t, const at::Tensor& offsets,
                                          const std::optional<at::Tensor>& background) {
  CompositeTensors k{tau.contiguous(), colors.contiguous(), t.contiguous(), offsets.contiguous()};
  std::tie(k.background, k.bg_stride) = background_rows(background);
  return k;
}

template <typename scalar_t>
CompositeArgs<scalar_t> composite_args(const CompositeTensors& k) {
  return {k.tau.data_ptr<scalar_t>(),
          k.colors.data_ptr<scalar_t>(),
          k.t.data_ptr<scalar_t>(),
          k.offsets.data_ptr<int64_t>(),
          k.background.defined() ? k.background.data_ptr<scalar_t>() : nullptr,
          k.bg_stride,
          k.tau.size(0),
          k.colors.size(1)};
}

}  // namespace grid
