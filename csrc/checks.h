// Argument checks shared by the CPU and CUDA kernels. Every message names the op, the argument
// and what was expected. Host only.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adam_math.h"
#include "trilinear_math.h"

namespace grid {

inline bool is_float(const at::Tensor& t) {
  const auto s = t.scalar_type();
  return s == at::kDouble || s == at::kFloat || s == at::kHalf || s == at::kBFloat16;
}

// `value` is the main tensor (features / corners); `coords` the points / local positions.
inline void check_pair(const char* op, const at::Tensor& value, const char* value_name,
                       const at::Tensor& coords, const char* coords_name) {
  TORCH_CHECK(is_float(value), op, ": ", value_name,
              ": expected a floating-point tensor (float16, bfloat16, float32 or float64), got ",
              value.scalar_type());
  TORCH_CHECK(is_float(coords), op, ": ", coords_name,
              ": expected a floating-point tensor (float16, bfloat16, float32 or float64), got ",
              coords.scalar_type());
  TORCH_CHECK(value.device() == coords.device(), op, ": ", coords_name,
              ": expected a tensor on the same device as ", value_name, " (", value.device(),
              "), got ", coords.device());
  const bool half = value.scalar_type() == at::kHalf || value.scalar_type() == at::kBFloat16;
  TORCH_CHECK(
      coords.scalar_type() == value.scalar_type() || (half && coords.scalar_type() == at::kFloat),
      op, ": ", coords_name, ": expected dtype ", value.scalar_type(), " like ", value_name,
      " (or float32 with half-precision ", value_name, "), got ", coords.scalar_type());
}

// grid.sample's `bounds`: the world box (xmin, ymin, zmin, xmax, ymax, zmax) mapped onto [-1, 1]
// per axis as scale = 2 / (max - min), shift = -min * scale - 1, in float and in double, each
// rounded as those tensor ops round in that dtype: the map VoxelGrid applied with addcmul before
// the box moved into the op. `single`: the points are float32 (float32 box must be non-empty).
inline void set_world_box(const char* op, c10::ArrayRef<double> bounds, bool single,
                          Sampling& mode) {
  TORCH_CHECK(bounds.size() == 6, op,
              ": bounds: expected 6 numbers (xmin, ymin, zmin, xmax, ymax, zmax), got ",
              bounds.size());
  for (int a = 0; a < 3; ++a) {
    const double lo = bounds[a], hi = bounds[a + 3];
    TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), op,
                ": bounds: expected finite numbers, got ", bounds);
    const float lo_f = static_cast<float>(lo), hi_f = static_cast<float>(hi);
    TORCH_CHECK(single ? lo_f < hi_f : lo < hi, op,
                ": bounds: expected min < max on every axis, got min ", lo, " and max ", hi,
                " on axis ", "xyz"[a], single ? " (as float32, the points' dtype)" : "");
    mode.scale_f[a] = 2.0f / (hi_f - lo_f);
    mode.shift_f[a] = -lo_f * mode.scale_f[a] - 1.0f;
    mode.scale_d[a] = 2.0 / (hi - lo);
    mode.shift_d[a] = -lo * mode.scale_d[a] - 1.0;
  }
  mode.world = true;
}

// The checked sampling mode of grid.sample and its backward ops.
inline Sampling check_sample_args(const at::Tensor& features, const at::Tensor& points,
                                  bool align_corners, c10::string_view padding_in,
                                  c10::string_view interpolation_in,
                                  std::optional<c10::ArrayRef<double>> bounds) {
  const char* op = "grid.sample";
  const std::string padding(padding_in), interpolation(interpolation_in);
  check_pair(op, features, "features", points, "points");
  TORCH_CHECK(features.dim() == 4, op, ": features: expected shape [X, Y, Z, F], got ",
              features.sizes());
  TORCH_CHECK(
      features.size(0) > 0 && features.size(1) > 0 && features.size(2) > 0 && features.size(3) > 0,
      op, ": features: expected every axis of [X, Y, Z, F] to be non-empty, got ",
      features.sizes());
  TORCH_CHECK(points.dim() >= 1 && points.size(-1) == 3, op,
              ": points: expected shape [..., 3], got ", points.sizes());
  TORCH_CHECK(padding == "zeros" || padding == "border", op,
              ": padding: expected 'zeros' or 'border', got '", padding, "'");
  TORCH_CHECK(interpolation == "linear" || interpolation == "smoothstep", op,
              ": interpolation: expected 'linear' or 'smoothstep', got '", interpolation, "'");
  Sampling mode{align_corners, padding == "border", interpolation == "smoothstep"};
  if (bounds.has_value()) set_world_box(op, *bounds, points.scalar_type() != at::kDouble, mode);
  return mode;
}

inline void check_trilinear_args(const at::Tensor& corners, const at::Tensor& local) {
  const char* op = "grid.trilinear";
  check_pair(op, corners, "corners", local, "local");
  TORCH_CHECK(corners.dim() == 3 && corners.size(1) == 8, op,
              ": corners: expected shape [N, 8, F], got ", corners.sizes());
  TORCH_CHECK(local.dim() == 2 && local.size(1) == 3 && local.size(0) == corners.size(0), op,
              ": local: expected shape [N, 3] with N = ", corners.size(0), ", got ", local.sizes());
}

inline void check_grad_out(const char* op, const at::Tensor& grad_out, const at::Tensor& like,
                           at::IntArrayRef expected_sizes) {
  TORCH_CHECK(grad_out.sizes() == expected_sizes, op, ": grad_out: expected shape ", expected_sizes,
              ", got ", grad_out.sizes());
  TORCH_CHECK(grad_out.scalar_type() == like.scalar_type(), op, ": grad_out: expected dtype ",
              like.scalar_type(), ", got ", grad_out.scalar_type());
  TORCH_CHECK(grad_out.device() == like.device(), op, ": grad_out: expected device ", like.device(),
              ", got ", grad_out.device());
}

// An incoming gradient of a double backward op: absent, or shaped like the output of the
// backward op it belongs to (that output is shaped like `like`).
inline void check_incoming_grad(const char* op, const char* name,
                                const std::optional<at::Tensor>& grad, const at::Tensor& like) {
  if (!grad) return;
  TORCH_CHECK(grad->sizes() == like.sizes(), op, ": ", name, ": expected shape ", like.sizes(),
              ", got ", grad->sizes());
  TORCH_CHECK(grad->scalar_type() == like.scalar_type(), op, ": ", name, ": expected dtype ",
              like.scalar_type(), ", got ", grad->scalar_type());
  TORCH_CHECK(grad->device() == like.device(), op, ": ", name, ": expected device ", like.device(),
              ", got ", grad->device());
}

// The inputs of a double backward op, checked and laid out for its kernels: contiguous rows,
// so that one set of offsets addresses a value and its incoming gradient (no copies in the
// usual case). An absent incoming gradient stays undefined (it counts as zero).
struct DoubleBackwardInputs {
  at::Tensor grad_out;   // [N, F]
  at::Tensor value;      // features [X, Y, Z, F] / corners [N, 8, F]
  at::Tensor coords;     // points / local [N, 3]
  at::Tensor gg_value;   // like value, or undefined
  at::Tensor gg_coords;  // like coords, or undefined
};

inline DoubleBackwardInputs double_backward_inputs(
    const char* op, const std::optional<at::Tensor>& gg_value, const char* gg_value_name,
    const std::optional<at::Tensor>& gg_coords, const char* gg_coords_name,
    const at::Tensor& grad_out, const at::Tensor& value, const at::Tensor& coords,
    at::IntArrayRef out_sizes) {
  check_grad_out(op, grad_out, value, out_sizes);
  check_incoming_grad(op, gg_value_name, gg_value, value);
  check_incoming_grad(op, gg_coords_name, gg_coords, coords);
  const int64_t F = value.size(-1);
  return {grad_out.reshape({-1, F}).contiguous(), value.contiguous(),
          coords.reshape({-1, 3}).contiguous(), gg_value ? gg_value->contiguous() : at::Tensor(),
          gg_coords ? gg_coords->reshape({-1, 3}).contiguous() : at::Tensor()};
}

// A backward output the caller asked for, or an empty [0] placeholder for one it did not.
inline at::Tensor masked_output(bool wanted, at::IntArrayRef sizes,
                                const at::TensorOptions& options, bool zeroed = false) {
  if (!wanted) return at::empty({0}, options);
  return zeroed ? at::zeros(sizes, options) : at::empty(sizes, options);
}

// features: [X, Y, Z, F] of a floating dtype with X, Y, Z >= 2 (a difference needs two voxels).
inline void check_total_variation_args(const char* op, const at::Tensor& features) {
  TORCH_CHECK(is_float(features), op,
              ": features: expected a floating-point tensor (float16, bfloat16, float32 or "
              "float64), got ",
              features.scalar_type());
  TORCH_CHECK(features.dim() == 4, op, ": features: expected shape [X, Y, Z, F], got ",
              features.sizes());
  TORCH_CHECK(features.size(0) >= 2 && features.size(1) >= 2 && features.size(2) >= 2 &&
                  features.size(3) >= 1,
              op, ": features: expected X, Y, Z >= 2 and F >= 1 in [X, Y, Z, F], got ",
              features.sizes());
}

// The dtype of the total variation value and of its incoming gradient.
inline at::ScalarType total_variation_dtype(const at::Tensor& features) {
  return features.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

inline void check_total_variation_grad_out(const at::Tensor& grad_out, const at::Tensor& features) {
  const char* op = "grid.total_variation_backward";
  TORCH_CHECK(grad_out.dim() == 0, op, ": grad_out: expected a scalar (shape []), got ",
              grad_out.sizes());
  TORCH_CHECK(grad_out.scalar_type() == total_variation_dtype(features), op,
              ": grad_out: expected dtype ", total_variation_dtype(features), ", got ",
              grad_out.scalar_type());
  TORCH_CHECK(grad_out.device() == features.device(), op, ": grad_out: expected device ",
              features.device(), ", got ", grad_out.device());
}

// The gradient total_variation_add_grad_ adds into: like features, and contiguous (written in
// place, so it cannot be a copy).
inline void check_total_variation_grad(const at::Tensor& grad, const at::Tensor& features) {
  const char* op = "grid.total_variation_add_grad_";
  TORCH_CHECK(grad.sizes() == features.sizes(), op, ": grad: expected shape ", features.sizes(),
              " like features, got ", grad.sizes());
  TORCH_CHECK(grad.scalar_type() == features.scalar_type(), op, ": grad: expected dtype ",
              features.scalar_type(), " like features, got ", grad.scalar_type());
  TORCH_CHECK(grad.device() == features.device(), op, ": grad: expected device ", features.device(),
              " like features, got ", grad.device());
  TORCH_CHECK(grad.is_contiguous(), op,
              ": grad: expected a contiguous tensor (it is updated in place), got strides ",
              grad.strides());
}

// Weight of one squared difference along each axis: the value is the mean over the three axes of
// the mean over that axis's (size - 1) * (other sizes) * F differences.
inline std::array<double, 3> total_variation_coefficients(const at::Tensor& features) {
  const double X = features.size(0), Y = features.size(1), Z = features.size(2);
  const double F = features.size(3);
  return {1.0 / (3.0 * (X - 1) * Y * Z * F), 1.0 / (3.0 * X * (Y - 1) * Z * F),
          1.0 / (3.0 * X * Y * (Z - 1) * F)};
}

// Whether two tensors of the same shape place every element at the same offset from their data
// pointers (strides may differ only along axes of size 1, which no offset uses).
inline bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

// grid.masked_adam_: param of a floating dtype, laid out densely (any strides that cover its
// elements without gaps or overlaps: the kernels walk the storage as one flat array), and
// exp_avg, exp_avg_sq and grad exactly like it (dtype, device, shape and strides); the
// hyperparameters in the ranges torch.optim.Adam accepts, eps > 0 and step >= 1.
inline void check_masked_adam_args(const at::Tensor& param, const at::Tensor& exp_avg,
                                   const at::Tensor& exp_avg_sq, const at::Tensor& grad,
                                   const AdamScalars& a) {
  const char* op = "grid.masked_adam_";
  TORCH_CHECK(is_float(param), op,
              ": param: expected a floating-point tensor (float16, bfloat16, float32 or "
              "float64), got ",
              param.scalar_type());
  TORCH_CHECK(param.is_non_overlapping_and_dense(), op,
              ": param: expected a dense tensor (no gaps or overlaps between elements), got "
              "shape ",
              param.sizes(), " with strides ", param.strides());
  const std::pair<const char*, const at::Tensor*> others[] = {
      {"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}, {"grad", &grad}};
  for (const auto& [name, t] : others) {
    TORCH_CHECK(t->layout() == at::kStrided, op, ": ", name,
                ": expected a dense (strided) tensor, got ", t->layout());
    TORCH_CHECK(t->scalar_type() == param.scalar_type(), op, ": ", name, ": expected dtype ",
                param.scalar_type(), " like param, got ", t->scalar_type());
    TORCH_CHECK(t->device() == param.device(), op, ": ", name, ": expected device ", param.device(),
                " like param, got ", t->device());
    TORCH_CHECK(t->sizes() == param.sizes(), op, ": ", name, ": expected shape ", param.sizes(),
                " like param, got ", t->sizes());
    TORCH_CHECK(same_layout(*t, param), op, ": ", name, ": expected the strides of param ",
                param.strides(), ", got ", t->strides());
  }
  TORCH_CHECK(a.beta1 >= 0 && a.beta1 < 1, op, ": beta1: expected a number in [0, 1), got ",
              a.beta1);
  TORCH_CHECK(a.beta2 >= 0 && a.beta2 < 1, op, ": beta2: expected a number in [0, 1), got ",
              a.beta2);
  TORCH_CHECK(a.eps > 0, op, ": eps: expected a number > 0, got ", a.eps);
  TORCH_CHECK(a.weight_decay >= 0, op, ": weight_decay: expected a number >= 0, got ",
              a.weight_decay);
  // Values held on a GPU (lr_ptr, step_ptr) are not read back here: that would synchronise.
  if (a.lr_ptr == nullptr) TORCH_CHECK(a.lr >= 0, op, ": lr: expected a number >= 0, got ", a.lr);
  if (a.step_ptr == nullptr)
    TORCH_CHECK(a.step >= 1, op, ": step: expected a number >= 1 (the step being taken), got ",
                a.step);
}

// lr or step of grid.masked_adam_.tensor: one float32 or float64 value on param's device.
inline void check_adam_scalar_tensor(const char* name, const at::Tensor& t,
                                     const at::Tensor& param) {
  const char* op = "grid.masked_adam_";
  TORCH_CHECK(t.numel() == 1, op, ": ", name, ": expected a tensor of one value, got shape ",
              t.sizes());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, op, ": ", name,
              ": expected a float32 or float64 tensor, got ", t.scalar_type());
  TORCH_CHECK(t.device() == param.device(), op, ": ", name, ": expected a tensor on ",
              param.device(), " like param, got ", t.device());
}

// Output shape of sample: points [..., 3] -> [..., F].
inline std::vector<int64_t> sample_out_sizes(const at::Tensor& features, const at::Tensor& points) {
  std::vector<int64_t> sizes(points.sizes().begin(), points.sizes().end());
  sizes.back() = features.size(3);
  return sizes;
}

// `t` as contiguous rows of `width`: `t.reshape({-1, width}).contiguous()`, returning `t` itself
// when it already is one (a reshape builds a new tensor, a measurable part of a tiny call).
inline at::Tensor contiguous_rows(const at::Tensor& t, int64_t width) {
  if (t.dim() == 2 && t.size(1) == width && t.is_contiguous()) return t;
  return t.reshape({-1, width}).contiguous();
}

// Features in the layout the kernels read: F contiguous (copied only if it is not).
inline at::Tensor channels_contiguous(const at::Tensor& features) {
  return features.stride(3) == 1 ? features : features.contiguous();
}

// One past the largest element offset of a strided tensor (0 when empty).
inline int64_t element_span(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  return span;
}

inline GridShape grid_shape(const at::Tensor& features) {  // features: [X, Y, Z, F], F-contig.
  GridShape g;
  for (int a = 0; a < 3; ++a) {
    g.size[a] = features.size(a);
    g.stride[a] = features.stride(a);
  }
  g.F = features.size(3);
  return g;
}

}  // namespace grid
