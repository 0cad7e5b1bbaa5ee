// CPU total variation of a [X, Y, Z, F] grid: the value, its gradient (backward), and the
// gradient added in place into an existing one (add_grad_), in one pass over the grid. Each task
// owns whole x-slabs and the value is summed slab by slab in x order, so results are bitwise the
// same for any thread count.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "checks.h"
#include "dispatch.h"
#include "trilinear_math.h"

namespace grid {
namespace {

// One pass: the value's partial sum per x-slab into slab_sums[x] (if kValue) and
// grad = (kAdd ? grad : 0) + scale * d value / d features (if kGrad).
template <typename scalar_t, bool kValue, bool kGrad, bool kAdd>
void total_variation_pass(const scalar_t* f,  // [X, Y, Z, F], contiguous
                          scalar_t* grad,     // [X, Y, Z, F], contiguous (kGrad)
                          double* slab_sums,  // [X] (kValue)
                          int64_t X, int64_t Y, int64_t Z, int64_t F,
                          const std::array<double, 3>& coef, double scale) {
  using acc_t = acc_type<scalar_t>;
  const int64_t sx = Y * Z * F, sy = Z * F, sz = F;
  const acc_t c[3] = {acc_t(coef[0]), acc_t(coef[1]), acc_t(coef[2])};
  const acc_t gc[3] = {acc_t(2 * scale * coef[0]), acc_t(2 * scale * coef[1]),
                       acc_t(2 * scale * coef[2])};
  at::parallel_for(0, X, 1, [&](int64_t x_begin, int64_t x_end) {
    for (int64_t x = x_begin; x < x_end; ++x) {
      double slab = 0;
      for (int64_t y = 0; y < Y; ++y) {
        acc_t row = 0;
        for (int64_t z = 0; z < Z; ++z) {
          const int64_t o = x * sx + y * sy + z * sz;
          const bool has[3][2] = {{x > 0, x + 1 < X}, {y > 0, y + 1 < Y}, {z > 0, z + 1 < Z}};
          const int64_t step[3] = {sx, sy, sz};
          for (int64_t k = 0; k < F; ++k) {
            const acc_t v = static_cast<acc_t>(f[o + k]);
            acc_t g = 0;
            for (int a = 0; a < 3; ++a) {
              if (has[a][1]) {
                const acc_t d = static_cast<acc_t>(f[o + step[a] + k]) - v;
                if constexpr (kValue) row += c[a] * d * d;
                g -= gc[a] * d;
              }
              if (kGrad && has[a][0]) g += gc[a] * (v - static_cast<acc_t>(f[o - step[a] + k]));
            }
            if constexpr (kGrad) {
              if constexpr (kAdd) g += static_cast<acc_t>(grad[o + k]);
              grad[o + k] = static_cast<scalar_t>(g);
            }
          }
        }
        slab += row;
      }
      if constexpr (kValue) slab_sums[x] = slab;
    }
  });
}

// The pass for the flags asked; returns the value (0 when not asked).
double run_total_variation(const at::Tensor& features, at::Tensor* grad, bool value, bool add,
                           double scale) {
  const int64_t X = features.size(0), Y = features.size(1), Z = features.size(2);
  const int64_t F = features.size(3);
  const auto coef = total_variation_coefficients(features);
  std::vector<double> slab_sums(value ? X : 0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, features.scalar_type(), "tv", [&] {
    const scalar_t* f = features.data_ptr<scalar_t>();
    scalar_t* g = grad ? grad->data_ptr<scalar_t>() : nullptr;
    const auto run = [&](auto kValue, auto kGrad, auto kAdd) {
      total_variation_pass<scalar_t, decltype(kValue)::value, decltype(kGrad)::value,
                           decltype(kAdd)::value>(f, g, slab_sums.data(), X, Y, Z, F, coef, scale);
    };
    using T = std::true_type;
    using N = std::false_type;
    if (!grad) return run(T{}, N{}, N{});
    if (!add) return run(N{}, T{}, N{});
    if (value) return run(T{}, T{}, T{});
    return run(N{}, T{}, T{});
  });
  double total = 0;
  for (double s : slab_sums) total += s;  // in x order: independent of the thread count
  return total;
}

at::Tensor value_tensor(double value, const at::Tensor& features) {
  return at::scalar_tensor(value, features.options().dtype(total_variation_dtype(features)));
}

at::Tensor total_variation_cpu(const at::Tensor& features_in) {  // [X, Y, Z, F] -> []
  check_total_variation_args("grid.total_variation", features_in);
  const at::Tensor features = features_in.contiguous();
  return value_tensor(run_total_variation(features, nullptr, true, false, 0.0), features);
}

at::Tensor total_variation_backward_cpu(const at::Tensor& grad_out,       // []
                                        const at::Tensor& features_in) {  // [X, Y, Z, F]
  check_total_variation_args("grid.total_variation_backward", features_in);
  check_total_variation_grad_out(grad_out, features_in);
  const at::Tensor features = features_in.contiguous();
  at::Tensor grad = at::empty_like(features, at::MemoryFormat::Contiguous);
  run_total_variation(features, &grad, false, false, grad_out.item<double>());
  return grad;
}

at::Tensor total_variation_add_grad_cpu(at::Tensor& grad,               // [X, Y, Z, F]
                                        const at::Tensor& features_in,  // [X, Y, Z, F]
                                        double weight, bool compute_value) {
  check_total_variation_args("grid.total_variation_add_grad_", features_in);
  check_total_variation_grad(grad, features_in);
  const at::Tensor features = features_in.contiguous();
  const double value = run_total_variation(features, &grad, compute_value, true, weight);
  if (!compute_value)
    return at::empty({0}, features.options().dtype(total_variation_dtype(features)));
  return value_tensor(value, features);
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("total_variation", &total_variation_cpu);
  m.impl("total_variation_backward", &total_variation_backward_cpu);
  m.impl("total_variation_add_grad_", &total_variation_add_grad_cpu);
}

}  // namespace grid
