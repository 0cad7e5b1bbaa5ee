// CPU masked Adam (grid.masked_adam_): one pass over param, exp_avg, exp_avg_sq and grad, in
// place, updating only the elements whose gradient is non-zero (adam_math.h has the update).
//
// The four tensors are walked as flat arrays, chunk by chunk (kChunkLines 64-byte lines), each
// chunk in one of two modes, picked by how many of the previous chunk's lines held a non-zero
// gradient (a line "is active"):
// - sparse: the chunk's gradient lines are scanned (an OR of their bits, the sign dropped, so
//   that -0 counts as zero); the param / exp_avg / exp_avg_sq lines of the active ones are
//   prefetched as they are found, then updated; the other lines are neither read nor written.
// - dense (when at least 1 / kDenseShare of the previous chunk's lines were active): the whole
//   chunk is updated in one streaming loop, then its active lines are counted from the
//   gradient, still in L1. Updating scattered lines costs about as much as streaming them all
//   once a fifth to a quarter of them are active (measured on one core of a 2-core EPYC, random
//   voxels of a 160^3 x 12 grid), and the scan is then pure overhead.
// Inside a line, elements with a zero gradient are computed too and then discarded by a
// bitwise select, so that the loop has no branch and vectorises: they keep their exact bits.
// Each element is owned by one task: results do not depend on the thread count.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "adam_math.h"
#include "checks.h"

// The build targets the x86-64 baseline (SSE2, 4 floats per instruction), with which the dense
// update is bound by its square roots and divisions. On x86-64 Linux the pass is also compiled
// for AVX2 and AVX-512, and the loader picks the widest the CPU has (GCC / Clang function
// multi-versioning).
#if defined(__x86_64__) && defined(__linux__)
#define GRID_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GRID_SIMD_CLONES
#endif

namespace grid {
namespace {

constexpr int64_t kLineBytes = 64;
constexpr int64_t kChunkLines = 256;  // 16 KB of gradient per chunk
constexpr int64_t kDenseShare = 4;    // dense mode after a chunk with >= 1/4 of its lines active

// The unsigned integer as wide as scalar_t.
template <typename scalar_t>
using bits_t = std::conditional_t<sizeof(scalar_t) == 8, uint64_t,
                                  std::conditional_t<sizeof(scalar_t) == 4, uint32_t, uint16_t>>;

template <typename scalar_t>
inline bits_t<scalar_t> bits_of(scalar_t x) {
  bits_t<scalar_t> b;
  std::memcpy(&b, &x, sizeof(x));
  return b;
}

// `on ? a : b`, bit by bit (a select the compiler vectorises; a branch it would not).
template <typename scalar_t>
inline scalar_t pick(bool on, scalar_t a, scalar_t b) {
  using B = bits_t<scalar_t>;
  const B mask = static_cast<B>(-static_cast<B>(on));
  const B r = static_cast<B>((bits_of(a) & mask) | (bits_of(b) & static_cast<B>(~mask)));
  scalar_t out;
  std::memcpy(&out, &r, sizeof(out));
  return out;
}

// Whether any of the L values at g is non-zero (NaN counts as non-zero, -0 as zero).
template <typename scalar_t, int64_t L>
inline bool any_nonzero(const scalar_t* g) {
  using B = bits_t<scalar_t>;
  constexpr B kMagnitude = static_cast<B>(~(B(1) << (8 * sizeof(B) - 1)));  // all but the sign
  B acc = 0;
  for (int64_t j = 0; j < L; ++j) acc = static_cast<B>(acc | bits_of(g[j]));
  return (acc & kMagnitude) != 0;
}

// Elements [0, n) from the given pointers: those with a non-zero gradient get Adam's update.
template <WeightDecay kDecay, typename scalar_t>
inline __attribute__((always_inline)) void update_run(scalar_t* __restrict__ param,
                                                      scalar_t* __restrict__ exp_avg,
                                                      scalar_t* __restrict__ exp_avg_sq,
                                                      const scalar_t* __restrict__ grad, int64_t n,
                                                      const AdamStep<acc_type<scalar_t>>& step) {
  using acc_t = acc_type<scalar_t>;
  const AdamStep<acc_t> s = step;  // a local copy: the stores below cannot alias it
  for (int64_t i = 0; i < n; ++i) {
    const scalar_t g = grad[i], p0 = param[i], m0 = exp_avg[i], v0 = exp_avg_sq[i];
    const acc_t ga = static_cast<acc_t>(g);
    acc_t p = static_cast<acc_t>(p0), m = static_cast<acc_t>(m0), v = static_cast<acc_t>(v0);
    adam_update<kDecay>(ga, p, m, v, s);
    const bool on = ga != acc_t(0);
    param[i] = pick(on, static_cast<scalar_t>(p), p0);
    exp_avg[i] = pick(on, static_cast<scalar_t>(m), m0);
    exp_avg_sq[i] = pick(on, static_cast<scalar_t>(v), v0);
  }
}

// Elements [begin, end) of the flat arrays, chunk by chunk (see the top of the file).
template <WeightDecay kDecay, typename scalar_t>
GRID_SIMD_CLONES void masked_adam_range(scalar_t* param, scalar_t* exp_avg, scalar_t* exp_avg_sq,
                                        const scalar_t* grad, int64_t begin, int64_t end,
                                        const AdamStep<acc_type<scalar_t>>& s) {
  constexpr int64_t L = kLineBytes / sizeof(scalar_t);  // elements per line
  int32_t active[kChunkLines];
  bool dense = false;
  for (int64_t c = begin; c < end; c += kChunkLines * L) {
    const int64_t n = std::min(kChunkLines * L, end - c);
    const int64_t lines = n / L;  // whole lines; a last partial one is updated below
    int64_t count = 0;
    if (dense) {
      update_run<kDecay>(param + c, exp_avg + c, exp_avg_sq + c, grad + c, lines * L, s);
      for (int64_t l = 0; l < lines; ++l) count += any_nonzero<scalar_t, L>(grad + c + l * L);
    } else {
      for (int64_t l = 0; l < lines; ++l) {
        const int64_t o = c + l * L;
        if (!any_nonzero<scalar_t, L>(grad + o)) continue;
        active[count++] = static_cast<int32_t>(l);
        __builtin_prefetch(param + o, 1);
        __builtin_prefetch(exp_avg + o, 1);
        __builtin_prefetch(exp_avg_sq + o, 1);
      }
      if (count == lines) {
        update_run<kDecay>(param + c, exp_avg + c, exp_avg_sq + c, grad + c, lines * L, s);
      } else {
        for (int64_t a = 0; a < count; ++a) {
          const int64_t o = c + active[a] * L;
          update_run<kDecay>(param + o, exp_avg + o, exp_avg_sq + o, grad + o, L, s);
        }
      }
    }
    const int64_t o = c + lines * L;
    update_run<kDecay>(param + o, exp_avg + o, exp_avg_sq + o, grad + o, n - lines * L, s);
    dense = count * kDenseShare >= lines && lines > 0;
  }
}

void run_masked_adam_cpu(at::Tensor& param, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                         const at::Tensor& grad, bool decoupled_weight_decay,
                         const AdamScalars& a) {
  check_masked_adam_args(param, exp_avg, exp_avg_sq, grad, a);
  const int64_t numel = param.numel();
  if (numel == 0) return;
  const WeightDecay decay = a.weight_decay == 0      ? WeightDecay::kNone
                            : decoupled_weight_decay ? WeightDecay::kDecoupled
                                                     : WeightDecay::kL2;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, param.scalar_type(), "masked_adam", [&] {
        using acc_t = acc_type<scalar_t>;
        const auto s = make_adam_step<acc_t>(a);
        // Dense tensors of the same layout: element k of each sits k elements past its data pointer
        // in one and the same order, whatever the strides.
        scalar_t* p = param.data_ptr<scalar_t>();
        scalar_t* m = exp_avg.data_ptr<scalar_t>();
        scalar_t* v = exp_avg_sq.data_ptr<scalar_t>();
        const scalar_t* g = grad.data_ptr<scalar_t>();
        constexpr int64_t kChunk = kChunkLines * kLineBytes / sizeof(scalar_t);
        const int64_t chunks = (numel + kChunk - 1) / kChunk;
        const auto run = [&](auto kind) {
          constexpr WeightDecay kDecay = decltype(kind)::value;
          at::parallel_for(0, chunks, 16, [&](int64_t c0, int64_t c1) {
            masked_adam_range<kDecay>(p, m, v, g, c0 * kChunk, std::min(c1 * kChunk, numel), s);
          });
        };
        using W = WeightDecay;
        if (decay == W::kNone) return run(std::integral_constant<W, W::kNone>{});
        if (decay == W::kL2) return run(std::integral_constant<W, W::kL2>{});
        return run(std::integral_constant<W, W::kDecoupled>{});
      });
}

void masked_adam_cpu(at::Tensor& param, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                     const at::Tensor& grad, double lr, double beta1, double beta2, double eps,
                     double weight_decay, bool decoupled_weight_decay, int64_t step) {
  run_masked_adam_cpu(param, exp_avg, exp_avg_sq, grad, decoupled_weight_decay,
                      {lr, beta1, beta2, eps, weight_decay, static_cast<double>(step)});
}

// lr, step: [] tensors on the CPU, read here.
void masked_adam_tensor_cpu(at::Tensor& param, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                            const at::Tensor& grad, const at::Tensor& lr, double beta1,
                            double beta2, double eps, double weight_decay,
                            bool decoupled_weight_decay, const at::Tensor& step) {
  check_adam_scalar_tensor("lr", lr, param);
  check_adam_scalar_tensor("step", step, param);
  run_masked_adam_cpu(param, exp_avg, exp_avg_sq, grad, decoupled_weight_decay,
                      {lr.item<double>(), beta1, beta2, eps, weight_decay, step.item<double>()});
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("masked_adam_", &masked_adam_cpu);
  m.impl("masked_adam_.tensor", &masked_adam_tensor_cpu);
}

}  // namespace grid
