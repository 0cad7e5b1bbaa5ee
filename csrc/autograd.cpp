// Autograd of every differentiable op, registered for the Autograd dispatch key in C++ so that a
// call costs no Python. Each forward op gets a torch::autograd::Function whose backward calls the
// op's registered backward op through the dispatcher, asking only for the gradients autograd
// needs. The backward ops of sample and trilinear get a Function too, whose backward is the
// native double backward op (gradients of gradients, e.g. an eikonal loss); total_variation's
// backward raises there instead of letting autograd treat the gradient as a constant. Third
// order is not implemented: the double backward ops raise autograd's own error.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <string>
#include <tuple>

namespace grid {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Tensor = at::Tensor;

// The registered ops, called through the dispatcher (below Autograd inside the Functions).
using Bounds = std::optional<c10::ArrayRef<double>>;  // grid.sample's world box, or none

Tensor sample_op(const Tensor& features, const Tensor& points, bool align_corners,
                 c10::string_view padding, c10::string_view interpolation, Bounds bounds) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("grid::sample", "")
                             .typed<Tensor(const Tensor&, const Tensor&, bool, c10::string_view,
                                           c10::string_view, Bounds)>();
  return op.call(features, points, align_corners, padding, interpolation, bounds);
}

std::tuple<Tensor, Tensor> sample_backward_op(const Tensor& grad_out, const Tensor& features,
                                              const Tensor& points, bool align_corners,
                                              c10::string_view padding,
                                              c10::string_view interpolation,
                                              std::array<bool, 2> mask, Bounds bounds) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("grid::sample_backward", "")
          .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, bool,
                                            c10::string_view, c10::string_view, std::array<bool, 2>,
                                            Bounds)>();
  return op.call(grad_out, features, points, align_corners, padding, interpolation, mask, bounds);
}

std::tuple<Tensor, Tensor, Tensor> sample_double_backward_op(
    const std::optional<Tensor>& grad_grad_features, const std::optional<Tensor>& grad_grad_points,
    const Tensor& grad_out, const Tensor& features, const Tensor& points, bool align_corners,
    c10::string_view padding, c10::string_view interpolation, std::array<bool, 3> mask,
    Bounds bounds) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("grid::sample_double_backward", "")
          .typed<std::tuple<Tensor, Tensor, Tensor>(
              const std::optional<Tensor>&, const std::optional<Tensor>&, const Tensor&,
              const Tensor&, const Tensor&, bool, c10::string_view, c10::string_view,
              std::array<bool, 3>, Bounds)>();
  return op.call(grad_grad_features, grad_grad_points, grad_out, features, points, align_corners,
                 padding, interpolation, mask, bounds);
}

Tensor trilinear_op(const Tensor& corners, const Tensor& local) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("grid::trilinear", "")
                             .typed<Tensor(const Tensor&, const Tensor&)>();
  return op.call(corners, local);
}

std::tuple<Tensor, Tensor> trilinear_backward_op(const Tensor& grad_out, const Tensor& corners,
                                                 const Tensor& local, std::array<bool, 2> mask) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("grid::trilinear_backward", "")
          .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                            std::array<bool, 2>)>();
  return op.call(grad_out, corners, local, mask);
}

std::tuple<Tensor, Tensor, Tensor> trilinear_double_backward_op(
    const std::optional<Tensor>& grad_grad_corners, const std::optional<Tensor>& grad_grad_local,
    const Tensor& grad_out, const Tensor& corners, const Tensor& local, std::array<bool, 3> mask) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("grid::trilinear_double_backward", "")
          .typed<std::tuple<Tensor, Tensor, Tensor>(
              const std::optional<Tensor>&, const std::optional<Tensor>&, const Tensor&,
              const Tensor&, const Tensor&, std::array<bool, 3>)>();
  return op.call(grad_grad_corners, grad_grad_local, grad_out, corners, local, mask);
}

Tensor total_variation_op(const Tensor& features) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("grid::total_variation", "")
                             .typed<Tensor(const Tensor&)>();
  return op.call(features);
}

Tensor total_variation_backward_op(const Tensor& grad_out, const Tensor& features) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("grid::total_variation_backward", "")
                             .typed<Tensor(const Tensor&, const Tensor&)>();
  return op.call(grad_out, features);
}

// Whether autograd has anything to record: a graph (grad mode and an input that requires grad)
// or a forward-mode tangent (which the Function path rejects with autograd's own message).
bool records(std::initializer_list<const Tensor*> inputs) {
  const bool grad_mode = at::GradMode::is_enabled();
  for (const Tensor* t : inputs) {
    if (!t->defined()) continue;
    if ((grad_mode && t->requires_grad()) || t->_fw_grad(/*level=*/0).defined()) return true;
  }
  return false;
}

Tensor grad_or_none(bool wanted, const Tensor& grad) {
  return wanted ? grad : Tensor();
}

// The world box kept for the backward: a list of 6 doubles, or None.
c10::IValue save_bounds(Bounds bounds) {
  if (!bounds.has_value()) return c10::IValue();
  return c10::IValue(bounds->vec());
}

// The saved box as the ops take it. `storage` owns the numbers while the returned view is used.
Bounds saved_bounds(const c10::IValue& saved, std::vector<double>& storage) {
  if (saved.isNone()) return std::nullopt;
  storage = saved.toDoubleVector();
  return c10::ArrayRef<double>(storage);
}

// sample's align_corners, padding and interpolation as one saved integer (bit 0, 1, 2).
int64_t pack_mode(bool align_corners, c10::string_view padding, c10::string_view interpolation) {
  return int64_t(align_corners) | int64_t(padding == "border") << 1 |
         int64_t(interpolation == "smoothstep") << 2;
}
bool mode_align_corners(int64_t mode) {
  return mode & 1;
}
c10::string_view mode_padding(int64_t mode) {
  return mode & 2 ? "border" : "zeros";
}
c10::string_view mode_interpolation(int64_t mode) {
  return mode & 4 ? "smoothstep" : "linear";
}

// ---- double backward -------------------------------------------------------------------------

[[noreturn]] void no_double_backward(const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "grid.", op,
                              ": gradients of gradients (double backward) are not implemented");
}

// An incoming gradient of a backward output: absent when autograd has none (the output was
// not used) or when the output was a masked-out [0] placeholder.
std::optional<Tensor> incoming(const Tensor& grad, bool computed) {
  if (!computed || !grad.defined()) return std::nullopt;
  return grad;
}

struct SampleBackwardFunction : torch::autograd::Function<SampleBackwardFunction> {
  static variable_list forward(AutogradContext* ctx, const Tensor& grad_out, const Tensor& features,
                               const Tensor& points, bool align_corners, c10::string_view padding,
                               c10::string_view interpolation, std::array<bool, 2> mask,
                               Bounds bounds) {
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined (zero)
    ctx->save_for_backward({grad_out, features, points});
    ctx->saved_data["align_corners"] = align_corners;
    ctx->saved_data["padding"] = std::string(padding);
    ctx->saved_data["interpolation"] = std::string(interpolation);
    ctx->saved_data["mask0"] = mask[0];
    ctx->saved_data["mask1"] = mask[1];
    ctx->saved_data["bounds"] = save_bounds(bounds);
    at::AutoDispatchBelowADInplaceOrView below;
    auto [grad_features, grad_points] = sample_backward_op(
        grad_out, features, points, align_corners, padding, interpolation, mask, bounds);
    return {grad_features, grad_points};
  }

  // grads: {[X, Y, Z, F] or undefined, [..., 3] or undefined}
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const std::optional<Tensor> gg_features = incoming(grads[0], ctx->saved_data["mask0"].toBool());
    const std::optional<Tensor> gg_points = incoming(grads[1], ctx->saved_data["mask1"].toBool());
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                      ctx->needs_input_grad(2)};
    if (!(gg_features || gg_points) || !(mask[0] || mask[1] || mask[2]))
      return {Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    std::vector<double> box;
    auto [grad_grad_out, grad_features, grad_points] = sample_double_backward_op(
        gg_features, gg_points, saved[0], saved[1], saved[2],
        ctx->saved_data["align_corners"].toBool(), ctx->saved_data["padding"].toStringRef(),
        ctx->saved_data["interpolation"].toStringRef(), mask,
        saved_bounds(ctx->saved_data["bounds"], box));
    return {grad_or_none(mask[0], grad_grad_out),
            grad_or_none(mask[1], grad_features),
            grad_or_none(mask[2], grad_points),
            Tensor(),
            Tensor(),
            Tensor(),
            Tensor(),
            Tensor()};
  }
};

struct TrilinearBackwardFunction : torch::autograd::Function<TrilinearBackwardFunction> {
  static variable_list forward(AutogradContext* ctx, const Tensor& grad_out, const Tensor& corners,
                               const Tensor& local, std::array<bool, 2> mask) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({grad_out, corners, local});
    ctx->saved_data["mask0"] = mask[0];
    ctx->saved_data["mask1"] = mask[1];
    at::AutoDispatchBelowADInplaceOrView below;
    auto [grad_corners, grad_local] = trilinear_backward_op(grad_out, corners, local, mask);
    return {grad_corners, grad_local};
  }

  // grads: {[N, 8, F] or undefined, [N, 3] or undefined}
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const std::optional<Tensor> gg_corners = incoming(grads[0], ctx->saved_data["mask0"].toBool());
    const std::optional<Tensor> gg_local = incoming(grads[1], ctx->saved_data["mask1"].toBool());
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                      ctx->needs_input_grad(2)};
    if (!(gg_corners || gg_local) || !(mask[0] || mask[1] || mask[2]))
      return {Tensor(), Tensor(), Tensor(), Tensor()};
    auto [grad_grad_out, grad_corners, grad_local] =
        trilinear_double_backward_op(gg_corners, gg_local, saved[0], saved[1], saved[2], mask);
    return {grad_or_none(mask[0], grad_grad_out), grad_or_none(mask[1], grad_corners),
            grad_or_none(mask[2], grad_local), Tensor()};
  }
};

struct TotalVariationBackwardFunction : torch::autograd::Function<TotalVariationBackwardFunction> {
  static Tensor forward(AutogradContext*, const Tensor& grad_out, const Tensor& features) {
    at::AutoDispatchBelowADInplaceOrView below;
    return total_variation_backward_op(grad_out, features);
  }
  static variable_list backward(AutogradContext*, variable_list) {
    no_double_backward("total_variation");
  }
};

std::tuple<Tensor, Tensor> sample_backward_autograd(const Tensor& grad_out, const Tensor& features,
                                                    const Tensor& points, bool align_corners,
                                                    c10::string_view padding,
                                                    c10::string_view interpolation,
                                                    std::array<bool, 2> mask, Bounds bounds) {
  if (!records({&grad_out, &features, &points})) {
    at::AutoDispatchBelowADInplaceOrView below;
    return sample_backward_op(grad_out, features, points, align_corners, padding, interpolation,
                              mask, bounds);
  }
  const variable_list grads = SampleBackwardFunction::apply(
      grad_out, features, points, align_corners, padding, interpolation, mask, bounds);
  return {grads[0], grads[1]};
}

std::tuple<Tensor, Tensor> trilinear_backward_autograd(const Tensor& grad_out,
                                                       const Tensor& corners, const Tensor& local,
                                                       std::array<bool, 2> mask) {
  if (!records({&grad_out, &corners, &local})) {
    at::AutoDispatchBelowADInplaceOrView below;
    return trilinear_backward_op(grad_out, corners, local, mask);
  }
  const variable_list grads = TrilinearBackwardFunction::apply(grad_out, corners, local, mask);
  return {grads[0], grads[1]};
}

Tensor total_variation_backward_autograd(const Tensor& grad_out, const Tensor& features) {
  if (!records({&grad_out, &features})) {
    at::AutoDispatchBelowADInplaceOrView below;
    return total_variation_backward_op(grad_out, features);
  }
  return TotalVariationBackwardFunction::apply(grad_out, features);
}

// ---- first-order autograd -------------------------------------------------------------------

struct SampleFunction : torch::autograd::Function<SampleFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& features, const Tensor& points,
                        bool align_corners, c10::string_view padding,
                        c10::string_view interpolation, Bounds bounds) {
    Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      out = sample_op(features, points, align_corners, padding, interpolation, bounds);
    }
    ctx->save_for_backward({features, points});
    // One entry (the op has checked the strings): each saved_data entry costs a hash-map
    // insertion, and a string one an allocation, a measurable part of a tiny call.
    ctx->saved_data["mode"] = pack_mode(align_corners, padding, interpolation);
    if (bounds.has_value()) ctx->saved_data["bounds"] = save_bounds(bounds);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {  // grads: {[..., F]}
    const variable_list saved = ctx->get_saved_variables();
    const std::array<bool, 2> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
    // Through the dispatcher, so that under create_graph the backward op's own autograd runs.
    std::vector<double> box;
    const int64_t mode = ctx->saved_data["mode"].toInt();
    const auto found = ctx->saved_data.find("bounds");
    const Bounds bounds =
        found == ctx->saved_data.end() ? std::nullopt : saved_bounds(found->second, box);
    auto [grad_features, grad_points] =
        sample_backward_autograd(grads[0], saved[0], saved[1], mode_align_corners(mode),
                                 mode_padding(mode), mode_interpolation(mode), mask, bounds);
    return {grad_or_none(mask[0], grad_features),
            grad_or_none(mask[1], grad_points),
            Tensor(),
            Tensor(),
            Tensor(),
            Tensor()};
  }
};

struct TrilinearFunction : torch::autograd::Function<TrilinearFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& corners, const Tensor& local) {
    Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      out = trilinear_op(corners, local);
    }
    ctx->save_for_backward({corners, local});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {  // grads: {[N, F]}
    const variable_list saved = ctx->get_saved_variables();
    const std::array<bool, 2> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
    auto [grad_corners, grad_local] =
        trilinear_backward_autograd(grads[0], saved[0], saved[1], mask);
    return {grad_or_none(mask[0], grad_corners), grad_or_none(mask[1], grad_local)};
  }
};

struct TotalVariationFunction : torch::autograd::Function<TotalVariationFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& features) {
    Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      out = total_variation_op(features);
    }
    ctx->save_for_backward({features});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {  // grads: {[]}
    const variable_list saved = ctx->get_saved_variables();
    return {total_variation_backward_autograd(grads[0], saved[0])};
  }
};

Tensor sample_autograd(const Tensor& features, const Tensor& points, bool align_corners,
                       c10::string_view padding, c10::string_view interpolation, Bounds bounds) {
  if (!records({&features, &points})) {  // inference: skip building a graph node
    at::AutoDispatchBelowADInplaceOrView below;
    return sample_op(features, points, align_corners, padding, interpolation, bounds);
  }
  return SampleFunction::apply(features, points, align_corners, padding, interpolation, bounds);
}

Tensor trilinear_autograd(const Tensor& corners, const Tensor& local) {
  if (!records({&corners, &local})) {
    at::AutoDispatchBelowADInplaceOrView below;
    return trilinear_op(corners, local);
  }
  return TrilinearFunction::apply(corners, local);
}

Tensor total_variation_autograd(const Tensor& features) {
  if (!records({&features})) {
    at::AutoDispatchBelowADInplaceOrView below;
    return total_variation_op(features);
  }
  return TotalVariationFunction::apply(features);
}

// ---- rendering ------------------------------------------------------------------------------

using TensorTriple = std::tuple<Tensor, Tensor, Tensor>;

TensorTriple composite_rays_op(const Tensor& tau, const Tensor& colors, const Tensor& t,
                               const Tensor& offsets, const std::optional<Tensor>& background) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("grid::composite_rays", "")
                             .typed<TensorTriple(const Tensor&, const Tensor&, const Tensor&,
                                                 const Tensor&, const std::optional<Tensor>&)>();
  return op.call(tau, colors, t, offsets, background);
}

TensorTriple composite_rays_backward_op(const Tensor& grad_rgb, const Tensor& grad_depth,
                                        const Tensor& grad_acc, const Tensor& tau,
                                        const Tensor& colors, const Tensor& t,
                                        const Tensor& offsets,
                                        const std::optional<Tensor>& background,
                                        std::array<bool, 3> mask) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("grid::composite_rays_backward", "")
          .typed<TensorTriple(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const Tensor&, const Tensor&,
                              const std::optional<Tensor>&, std::array<bool, 3>)>();
  return op.call(grad_rgb, grad_depth, grad_acc, tau, colors, t, offsets, background, mask);
}

// A Function's tensor arguments must be defined: no background travels as an empty [0] tensor
// (never a valid background, whose C >= 1).
std::optional<Tensor> present(const Tensor& background) {
  if (background.dim() == 1 && background.size(0) == 0) return std::nullopt;
  return background;
}

// Inputs: tau [S], colors [S, C], t [S], offsets [R + 1], background [C] / [R, C] (empty [0]:
// none). Outputs: rgb [R, C], depth [R], acc [R].
struct CompositeRaysFunction : torch::autograd::Function<CompositeRaysFunction> {
  static variable_list forward(AutogradContext* ctx, const Tensor& tau, const Tensor& colors,
                               const Tensor& t, const Tensor& offsets, const Tensor& background) {
    const std::optional<Tensor> bg = present(background);
    Tensor rgb, depth, acc;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      std::tie(rgb, depth, acc) = composite_rays_op(tau, colors, t, offsets, bg);
    }
    ctx->save_for_backward({tau, colors, t, offsets, background, acc});
    return {rgb, depth, acc};
  }

  // grads: {[R, C], [R], [R]} (zeros where an output was not used)
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &tau = saved[0], &colors = saved[1], &t = saved[2], &offsets = saved[3];
    const Tensor &background = saved[4], &acc = saved[5];
    const std::optional<Tensor> bg = present(background);
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                      ctx->needs_input_grad(2)};
    Tensor grad_tau, grad_colors, grad_t, grad_background;
    if (mask[0] || mask[1] || mask[2]) {
      // Through the dispatcher: its own autograd raises if a graph of it is asked for.
      std::tie(grad_tau, grad_colors, grad_t) = composite_rays_backward_op(
          grads[0], grads[1], grads[2], tau, colors, t, offsets, bg, mask);
    }
    if (bg && ctx->needs_input_grad(4)) {
      // rgb = ... + (1 - acc) background: d rgb / d background = 1 - acc, per ray.
      grad_background = grads[0].mul(acc.neg().add(1).unsqueeze(1));  // [R, C]
      if (background.dim() == 1) grad_background = grad_background.sum(0);
    }
    return {grad_or_none(mask[0], grad_tau), grad_or_none(mask[1], grad_colors),
            grad_or_none(mask[2], grad_t), Tensor(), grad_background};
  }
};

std::tuple<Tensor, Tensor, Tensor> composite_rays_autograd(
    const Tensor& tau, const Tensor& colors, const Tensor& t, const Tensor& offsets,
    const std::optional<Tensor>& background) {
  const Tensor bg = background ? *background : tau.new_empty({0});
  if (!records({&tau, &colors, &t, &bg})) {
    at::AutoDispatchBelowADInplaceOrView below;
    return composite_rays_op(tau, colors, t, offsets, background);
  }
  const variable_list out = CompositeRaysFunction::apply(tau, colors, t, offsets, bg);
  return {out[0], out[1], out[2]};
}

// The ops without gradients (samples are constants; ray_weights is for decisions such as which
// samples to colour): run below autograd, so their outputs never require grad.
Tensor march_rays_count_autograd(const Tensor& origins, const Tensor& directions, const Tensor& lo,
                                 const Tensor& hi, double near, const Tensor& step,
                                 const std::optional<Tensor>& jitter,
                                 const std::optional<Tensor>& occupancy,
                                 const std::optional<Tensor>& occupancy_bounds, int64_t max_steps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("grid::march_rays_count", "")
          .typed<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                        const Tensor&, const std::optional<Tensor>&, const std::optional<Tensor>&,
                        const std::optional<Tensor>&, int64_t)>();
  at::AutoDispatchBelowADInplaceOrView below;
  return op.call(origins, directions, lo, hi, near, step, jitter, occupancy, occupancy_bounds,
                 max_steps);
}

TensorTriple march_rays_fill_autograd(const Tensor& origins, const Tensor& directions,
                                      const Tensor& lo, const Tensor& hi, double near,
                                      const Tensor& step, const std::optional<Tensor>& jitter,
                                      const std::optional<Tensor>& occupancy,
                                      const std::optional<Tensor>& occupancy_bounds,
                                      int64_t max_steps, const Tensor& offsets, int64_t capacity) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("grid::march_rays_fill", "")
          .typed<TensorTriple(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                              const Tensor&, const std::optional<Tensor>&,
                              const std::optional<Tensor>&, const std::optional<Tensor>&, int64_t,
                              const Tensor&, int64_t)>();
  at::AutoDispatchBelowADInplaceOrView below;
  return op.call(origins, directions, lo, hi, near, step, jitter, occupancy, occupancy_bounds,
                 max_steps, offsets, capacity);
}

Tensor ray_weights_autograd(const Tensor& tau, const Tensor& offsets) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("grid::ray_weights", "")
                             .typed<Tensor(const Tensor&, const Tensor&)>();
  at::AutoDispatchBelowADInplaceOrView below;
  return op.call(tau, offsets);
}

// ---- multiresolution grid ----------------------------------------------------------------

using Levels = c10::IntArrayRef;  // grid.multires's resolutions, one per level

Tensor multires_op(const Tensor& table, const Tensor& points, Levels resolutions) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("grid::multires", "")
                             .typed<Tensor(const Tensor&, const Tensor&, Levels)>();
  return op.call(table, points, resolutions);
}

std::tuple<Tensor, Tensor> multires_backward_op(const Tensor& grad_out, const Tensor& table,
                                                const Tensor& points, Levels resolutions,
                                                std::array<bool, 2> mask) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("grid::multires_backward", "")
          .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, Levels,
                                            std::array<bool, 2>)>();
  return op.call(grad_out, table, points, resolutions, mask);
}

std::tuple<Tensor, Tensor, Tensor> multires_double_backward_op(
    const std::optional<Tensor>& grad_grad_table, const std::optional<Tensor>& grad_grad_points,
    const Tensor& grad_out, const Tensor& table, const Tensor& points, Levels resolutions,
    std::array<bool, 3> mask) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("grid::multires_double_backward", "")
                             .typed<std::tuple<Tensor, Tensor, Tensor>(
                                 const std::optional<Tensor>&, const std::optional<Tensor>&,
                                 const Tensor&, const Tensor&, const Tensor&, Levels,
                                 std::array<bool, 3>)>();
  return op.call(grad_grad_table, grad_grad_points, grad_out, table, points, resolutions, mask);
}

struct MultiresBackwardFunction : torch::autograd::Function<MultiresBackwardFunction> {
  static variable_list forward(AutogradContext* ctx, const Tensor& grad_out, const Tensor& table,
                               const Tensor& points, Levels resolutions,
                               std::array<bool, 2> mask) {
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined (zero)
    ctx->save_for_backward({grad_out, table, points});
    ctx->saved_data["resolutions"] = resolutions.vec();
    ctx->saved_data["mask0"] = mask[0];
    ctx->saved_data["mask1"] = mask[1];
    at::AutoDispatchBelowADInplaceOrView below;
    auto [grad_table, grad_points] =
        multires_backward_op(grad_out, table, points, resolutions, mask);
    return {grad_table, grad_points};
  }

  // grads: {[L, T, F] or undefined, [..., 3] or undefined}
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const std::optional<Tensor> gg_table = incoming(grads[0], ctx->saved_data["mask0"].toBool());
    const std::optional<Tensor> gg_points = incoming(grads[1], ctx->saved_data["mask1"].toBool());
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                      ctx->needs_input_grad(2)};
    if (!(gg_table || gg_points) || !(mask[0] || mask[1] || mask[2]))
      return {Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    const std::vector<int64_t> resolutions = ctx->saved_data["resolutions"].toIntVector();
    auto [grad_grad_out, grad_table, grad_points] = multires_double_backward_op(
        gg_table, gg_points, saved[0], saved[1], saved[2], resolutions, mask);
    return {grad_or_none(mask[0], grad_grad_out), grad_or_none(mask[1], grad_table),
            grad_or_none(mask[2], grad_points), Tensor(), Tensor()};
  }
};

std::tuple<Tensor, Tensor> multires_backward_autograd(const Tensor& grad_out, const Tensor& table,
                                                      const Tensor& points, Levels resolutions,
                                                      std::array<bool, 2> mask) {
  if (!records({&grad_out, &table, &points})) {
    at::AutoDispatchBelowADInplaceOrView below;
    return multires_backward_op(grad_out, table, points, resolutions, mask);
  }
  const variable_list grads =
      MultiresBackwardFunction::apply(grad_out, table, points, resolutions, mask);
  return {grads[0], grads[1]};
}

struct MultiresFunction : torch::autograd::Function<MultiresFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& table, const Tensor& points,
                        Levels resolutions) {
    Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      out = multires_op(table, points, resolutions);
    }
    ctx->save_for_backward({table, points});
    ctx->saved_data["resolutions"] = resolutions.vec();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {  // {[..., L F]}
    const variable_list saved = ctx->get_saved_variables();
    const std::array<bool, 2> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
    const std::vector<int64_t> resolutions = ctx->saved_data["resolutions"].toIntVector();
    // Through the dispatcher, so that under create_graph the backward op's own autograd runs.
    auto [grad_table, grad_points] =
        multires_backward_autograd(grads[0], saved[0], saved[1], resolutions, mask);
    return {grad_or_none(mask[0], grad_table), grad_or_none(mask[1], grad_points), Tensor()};
  }
};

Tensor multires_autograd(const Tensor& table, const Tensor& points, Levels resolutions) {
  if (!records({&table, &points})) {
    at::AutoDispatchBelowADInplaceOrView below;
    return multires_op(table, points, resolutions);
  }
  return MultiresFunction::apply(table, points, resolutions);
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, Autograd, m) {
  m.impl("sample", &sample_autograd);
  m.impl("sample_backward", &sample_backward_autograd);
  m.impl("trilinear", &trilinear_autograd);
  m.impl("trilinear_backward", &trilinear_backward_autograd);
  m.impl("trilinear_double_backward", torch::autograd::autogradNotImplementedFallback());
  m.impl("sample_double_backward", torch::autograd::autogradNotImplementedFallback());
  m.impl("total_variation", &total_variation_autograd);
  m.impl("total_variation_backward", &total_variation_backward_autograd);
  m.impl("march_rays_count", &march_rays_count_autograd);
  m.impl("march_rays_fill", &march_rays_fill_autograd);
  m.impl("composite_rays", &composite_rays_autograd);
  m.impl("composite_rays_backward", torch::autograd::autogradNotImplementedFallback());
  m.impl("ray_weights", &ray_weights_autograd);
  m.impl("multires", &multires_autograd);
  m.impl("multires_backward", &multires_backward_autograd);
  m.impl("multires_double_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace grid
