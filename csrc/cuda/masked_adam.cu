// CUDA masked Adam (grid.masked_adam_): one pass over param, exp_avg, exp_avg_sq and grad, in
// place, updating only the elements whose gradient is non-zero (adam_math.h has the update).
//
// A grid-stride loop over V-wide (16-byte) vectors of the four tensors, walked as flat arrays.
// A thread reads its gradient vector and stops there when every value in it is zero (-0
// included); otherwise it reads the three state vectors, updates the elements with a non-zero
// gradient and writes the three vectors back. An untouched vector costs its gradient read only:
// the sectors of the other three arrays are never fetched.
//
// The step's coefficients (make_adam_step) are derived on the host from host numbers; from the lr
// and step tensors of grid.masked_adam_.tensor, by a one-thread kernel on the stream first, into a
// small device buffer that each thread of the update reads (nothing goes back to the host).
#include <torch/library.h>

#include "adam_math.h"
#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"

namespace grid {
namespace {

// The coefficients of one step: `value`, or, where `device` is set, the ones found there.
template <typename acc_t>
struct StepSource {
  AdamStep<acc_t> value;
  const AdamStep<acc_t>* device;
};

template <typename acc_t>
__global__ void adam_step_kernel(const AdamScalars a, AdamStep<acc_t>* __restrict__ out) {
  *out = make_adam_step<acc_t>(a);
}

template <typename scalar_t, int V, WeightDecay kDecay>
__global__ void __launch_bounds__(kThreads)
    masked_adam_kernel(scalar_t* __restrict__ param,       // [numel]
                       scalar_t* __restrict__ exp_avg,     // [numel]
                       scalar_t* __restrict__ exp_avg_sq,  // [numel]
                       const scalar_t* __restrict__ grad,  // [numel]
                       int64_t vectors,                    // numel / V
                       const StepSource<acc_type<scalar_t>> source) {
  using acc_t = acc_type<scalar_t>;
  const AdamStep<acc_t> s = source.device != nullptr ? *source.device : source.value;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride) {
    const int64_t o = i * V;
    const Vec<scalar_t, V> g = load_vec<scalar_t, V>(grad + o);
    acc_t ga[V];
    bool any = false;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      ga[k] = to_acc(g.v[k]);
      any |= ga[k] != acc_t(0);
    }
    if (!any) continue;
    Vec<scalar_t, V> p = load_vec<scalar_t, V>(param + o);
    Vec<scalar_t, V> m = load_vec<scalar_t, V>(exp_avg + o);
    Vec<scalar_t, V> v = load_vec<scalar_t, V>(exp_avg_sq + o);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (ga[k] == acc_t(0)) continue;
      acc_t pa = to_acc(p.v[k]), ma = to_acc(m.v[k]), va = to_acc(v.v[k]);
      adam_update<kDecay>(ga[k], pa, ma, va, s);
      p.v[k] = static_cast<scalar_t>(pa);
      m.v[k] = static_cast<scalar_t>(ma);
      v.v[k] = static_cast<scalar_t>(va);
    }
    store_vec<scalar_t, V>(param + o, p);
    store_vec<scalar_t, V>(exp_avg + o, m);
    store_vec<scalar_t, V>(exp_avg_sq + o, v);
  }
}

void run_masked_adam_cuda(at::Tensor& param, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                          const at::Tensor& grad, bool decoupled_weight_decay,
                          const AdamScalars& a) {
  check_masked_adam_args(param, exp_avg, exp_avg_sq, grad, a);
  const int64_t numel = param.numel();
  if (numel == 0) return;
  const c10::cuda::CUDAGuard guard(param.device());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const WeightDecay decay = a.weight_decay == 0      ? WeightDecay::kNone
                            : decoupled_weight_decay ? WeightDecay::kDecoupled
                                                     : WeightDecay::kL2;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, param.scalar_type(), "masked_adam", [&] {
        using acc_t = acc_type<scalar_t>;
        StepSource<acc_t> source{};
        at::Tensor buffer;  // the device coefficients; the stream-ordered allocator keeps it
                            // until the update below has read it
        if (a.lr_ptr != nullptr || a.step_ptr != nullptr) {
          buffer = at::empty({int64_t(sizeof(AdamStep<acc_t>))}, param.options().dtype(at::kByte));
          auto* out = reinterpret_cast<AdamStep<acc_t>*>(buffer.data_ptr());
          adam_step_kernel<acc_t><<<1, 1, 0, stream>>>(a, out);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
          source.device = out;
        } else {
          source.value = make_adam_step<acc_t>(a);
        }
        // Dense tensors of the same layout: element k of each sits k elements past its data
        // pointer.
        scalar_t* p = param.data_ptr<scalar_t>();
        scalar_t* m = exp_avg.data_ptr<scalar_t>();
        scalar_t* v = exp_avg_sq.data_ptr<scalar_t>();
        const scalar_t* g = grad.data_ptr<scalar_t>();
        const bool aligned = vec_aligned(max_vec<scalar_t>(), {numel}, {p, m, v, g});
        dispatch_vec<scalar_t>(aligned, [&](auto vec) {
          constexpr int V = decltype(vec)::value;
          const int64_t vectors = numel / V;
          const auto launch = [&](auto kind) {
            constexpr WeightDecay kDecay = decltype(kind)::value;
            masked_adam_kernel<scalar_t, V, kDecay>
                <<<blocks_for(vectors), kThreads, 0, stream>>>(p, m, v, g, vectors, source);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
          };
          using W = WeightDecay;
          if (decay == W::kNone) return launch(std::integral_constant<W, W::kNone>{});
          if (decay == W::kL2) return launch(std::integral_constant<W, W::kL2>{});
          return launch(std::integral_constant<W, W::kDecoupled>{});
        });
      });
}

void masked_adam_cuda(at::Tensor& param, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                      const at::Tensor& grad, double lr, double beta1, double beta2, double eps,
                      double weight_decay, bool decoupled_weight_decay, int64_t step) {
  run_masked_adam_cuda(param, exp_avg, exp_avg_sq, grad, decoupled_weight_decay,
                       {lr, beta1, beta2, eps, weight_decay, static_cast<double>(step)});
}

// lr, step: [] tensors on param's GPU, read by the kernels (not checked on the host: lr < 0 or
// step < 1 would give a wrong or non-finite update).
void masked_adam_tensor_cuda(at::Tensor& param, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                             const at::Tensor& grad, const at::Tensor& lr, double beta1,
                             double beta2, double eps, double weight_decay,
                             bool decoupled_weight_decay, const at::Tensor& step) {
  check_adam_scalar_tensor("lr", lr, param);
  check_adam_scalar_tensor("step", step, param);
  AdamScalars a{0, beta1, beta2, eps, weight_decay, 0};
  a.lr_ptr = lr.data_ptr();
  a.lr_double = lr.scalar_type() == at::kDouble;
  a.step_ptr = step.data_ptr();
  a.step_double = step.scalar_type() == at::kDouble;
  run_masked_adam_cuda(param, exp_avg, exp_avg_sq, grad, decoupled_weight_decay, a);
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("masked_adam_", &masked_adam_cuda);
  m.impl("masked_adam_.tensor", &masked_adam_tensor_cuda);
}

}  // namespace grid
