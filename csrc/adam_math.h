// Shared inline math of grid.masked_adam_: the Adam update of one element, written as
// torch.optim.Adam (single-tensor, non-amsgrad) computes it, so that with every gradient
// non-zero the result is Adam's. Host and device.
#pragma once

#include <cmath>
#include <cstdint>

#include "trilinear_math.h"

namespace grid {

// How the weight decay enters: none, L2 added to the gradient (torch.optim.Adam's default), or
// decoupled, the parameter shrunk before the update (torch.optim.Adam with
// decoupled_weight_decay=True, i.e. AdamW).
enum class WeightDecay { kNone, kL2, kDecoupled };

// The hyperparameters of one step, in the accumulation type of the parameter. Derived in double
// from the numbers of the step (make_adam_step), as torch.optim.Adam derives them.
template <typename acc_t>
struct AdamStep {
  acc_t lerp_coeff;     // exp_avg.lerp_(grad, w), w = 1 - beta1: w, or w - 1 when |w| >= 0.5
  bool lerp_small;      // |w| < 0.5: ATen's lerp picks its form by this
  acc_t beta2;          // exp_avg_sq.mul_(beta2)
  acc_t sq_weight;      // .addcmul_(grad, grad, value=1 - beta2)
  acc_t neg_step_size;  // -lr / (1 - beta1^step)
  acc_t bias2_sqrt;     // sqrt(1 - beta2^step)
  acc_t eps;            // denom = sqrt(exp_avg_sq) / bias2_sqrt + eps
  acc_t weight_decay;   // kL2: grad + weight_decay * param
  acc_t decay;          // kDecoupled: param * (1 - lr * weight_decay)
};

// The numbers of one step. lr and step are host numbers, or (grid.masked_adam_.tensor) read
// from one-element float32 / float64 tensors where the update runs: on a GPU nothing is read
// back to the host, so a CUDA graph can capture the step and replay it with new values.
struct AdamScalars {
  double lr, beta1, beta2, eps, weight_decay, step;
  const void* lr_ptr = nullptr;  // set: lr is read from here, a double or a float
  bool lr_double = false;
  const void* step_ptr = nullptr;  // set: step is read from here
  bool step_double = false;

  GRID_HD double lr_value() const { return value_at(lr_ptr, lr_double, lr); }
  GRID_HD double step_value() const { return value_at(step_ptr, step_double, step); }

 private:
  GRID_HD static double value_at(const void* p, bool is_double, double number) {
    if (p == nullptr) return number;
    return is_double ? *static_cast<const double*>(p) : *static_cast<const float*>(p);
  }
};

template <typename acc_t>
GRID_HD AdamStep<acc_t> make_adam_step(const AdamScalars& a) {
  const double lr = a.lr_value(), step = a.step_value();
  const double w1 = 1.0 - a.beta1;
  const double bias1 = 1.0 - ::pow(a.beta1, step);
  const double bias2 = 1.0 - ::pow(a.beta2, step);
  AdamStep<acc_t> s;
  const acc_t w = static_cast<acc_t>(w1);
  s.lerp_small = w < acc_t(0.5) && w > acc_t(-0.5);
  s.lerp_coeff = s.lerp_small ? w : w - acc_t(1);
  s.beta2 = static_cast<acc_t>(a.beta2);
  s.sq_weight = static_cast<acc_t>(1.0 - a.beta2);
  s.neg_step_size = static_cast<acc_t>(-(lr / bias1));
  s.bias2_sqrt = static_cast<acc_t>(::sqrt(bias2));
  s.eps = static_cast<acc_t>(a.eps);
  s.weight_decay = static_cast<acc_t>(a.weight_decay);
  s.decay = static_cast<acc_t>(1.0 - lr * a.weight_decay);
  return s;
}

// One element whose gradient is non-zero: param, exp_avg and exp_avg_sq updated in place, in
// the order and roundings of torch.optim.Adam's single-tensor step:
//   grad += weight_decay * param            (kL2)       param *= 1 - lr * weight_decay (kDecoupled)
//   exp_avg = lerp(exp_avg, grad, 1 - beta1)
//   exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
//   param += -step_size * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)
template <WeightDecay kDecay, typename acc_t>
GRID_HD void adam_update(acc_t grad, acc_t& param, acc_t& exp_avg, acc_t& exp_avg_sq,
                         const AdamStep<acc_t>& s) {
  if constexpr (kDecay == WeightDecay::kL2) grad = grad + s.weight_decay * param;
  if constexpr (kDecay == WeightDecay::kDecoupled) param = param * s.decay;
  // lerp as ATen vectorises it: from exp_avg by w for a small w, else from grad by w - 1 (the
  // two branches only pick operands, so the loop stays branch-free)
  exp_avg = (s.lerp_small ? exp_avg : grad) + s.lerp_coeff * (grad - exp_avg);
  exp_avg_sq = exp_avg_sq * s.beta2 + s.sq_weight * grad * grad;
  const acc_t denom = std::sqrt(exp_avg_sq) / s.bias2_sqrt + s.eps;
  param = param + s.neg_step_size * exp_avg / denom;
}

}  // namespace grid
