// CUDA total variation of a [X, Y, Z, F] grid: the value, its gradient (backward), and the
// gradient added in place into an existing one (add_grad_), in one pass over the grid.
//
// Each thread owns one V-wide vector of channels at one (y, z) and marches along x over a chunk
// of x-slabs, keeping the x-1, x and x+1 vectors in registers: per step it loads one new vector
// from memory, the y and z neighbours come from L1/L2 (neighbouring threads and blocks read them
// at about the same time). The value is reduced without atomics: a fixed tree per block into one
// partial per block, then one block sums the partials in a fixed order, so it is bitwise the
// same on every run.
#include <torch/library.h>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"

namespace grid {
namespace {

template <typename acc_t>
struct Coefficients {
  acc_t value[3];  // weight of one squared difference along x, y, z
};

// Sum of `x` over the block (every thread gets a valid result in thread 0 only).
template <typename acc_t>
__device__ acc_t block_sum(acc_t x) {
  __shared__ acc_t warp_sums[kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_down_sync(0xffffffffu, x, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = x;
  __syncthreads();
  x = 0;
  if (warp == 0) {
    if (lane < kThreads / 32) x = warp_sums[lane];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_down_sync(0xffffffffu, x, offset);
  }
  return x;
}

// grid (blockIdx.x: vectors of an x-slab, blockIdx.y: chunks of x_chunk slabs).
template <typename scalar_t, int V, bool kValue, bool kGrad, bool kAdd>
__global__ void __launch_bounds__(kThreads)
    total_variation_kernel(const scalar_t* __restrict__ f,                // [X, Y, Z, F]
                           scalar_t* __restrict__ grad,                   // [X, Y, Z, F] (kGrad)
                           acc_type<scalar_t>* __restrict__ block_sums,   // [blocks] (kValue)
                           const acc_type<scalar_t>* __restrict__ scale,  // [] or nullptr
                           double weight, int64_t X, int64_t Y, int64_t Z, int64_t F,
                           int64_t x_chunk, Coefficients<acc_type<scalar_t>> coef) {
  using acc_t = acc_type<scalar_t>;
  const int64_t sy = Z * F, sx = Y * sy;
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // vector in the slab
  const int64_t x_begin = blockIdx.y * x_chunk, x_end = min(X, x_begin + x_chunk);
  acc_t sum = 0;
  if (t * V < sx) {
    using raw_t = Vec<scalar_t, V>;
    const int64_t e = t * V, voxel = e / F, y = voxel / Z, z = voxel % Z;
    acc_t gc[3];
    if constexpr (kGrad) {
      const acc_t s = acc_t(weight) * (scale != nullptr ? *scale : acc_t(1));
#pragma unroll
      for (int a = 0; a < 3; ++a) gc[a] = 2 * s * coef.value[a];
    }
    const auto load = [&](int64_t offset) { return load_vec<scalar_t, V>(f + offset); };
    // The x-walk keeps slabs x-1, x, x+1 in registers and loads x+2 one step ahead, so
    // every load of a step (x+2, the y and z neighbours, the old gradient) is in flight
    // before its first use.
    const int64_t o0 = x_begin * sx + e;
    raw_t r_prev{}, r_cur = load(o0), r_next{};
    if (x_begin + 1 < X) r_next = load(o0 + sx);
    if (kGrad && x_begin > 0) r_prev = load(o0 - sx);
    const bool has_next_yz[2] = {y + 1 < Y, z + 1 < Z};
    const bool has_prev_yz[2] = {y > 0, z > 0};
    const int64_t step_yz[2] = {sy, F};
    for (int64_t x = x_begin; x < x_end; ++x) {
      const int64_t o = x * sx + e;
      raw_t r_after{}, r_up[2]{}, r_down[2]{}, r_old{};
      if (x + 2 < X && x + 1 < x_end) r_after = load(o + 2 * sx);
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        if (has_next_yz[a]) r_up[a] = load(o + step_yz[a]);
        if (kGrad && has_prev_yz[a]) r_down[a] = load(o - step_yz[a]);
      }
      if constexpr (kAdd) r_old = load_vec<scalar_t, V>(grad + o);

      const raw_t* up[3] = {&r_next, &r_up[0], &r_up[1]};
      const raw_t* down[3] = {&r_prev, &r_down[0], &r_down[1]};
      const bool has_up[3] = {x + 1 < X, has_next_yz[0], has_next_yz[1]};
      const bool has_down[3] = {x > 0, has_prev_yz[0], has_prev_yz[1]};
      acc_t g[V] = {};
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const acc_t c = to_acc(r_cur.v[i]);
#pragma unroll
        for (int a = 0; a < 3; ++a) {
          if (has_up[a]) {
            const acc_t d = to_acc(up[a]->v[i]) - c;
            if constexpr (kValue) sum += coef.value[a] * d * d;
            if constexpr (kGrad) g[i] -= gc[a] * d;
          }
          if (kGrad && has_down[a]) g[i] += gc[a] * (c - to_acc(down[a]->v[i]));
        }
      }
      if constexpr (kGrad) {
        raw_t out;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          if constexpr (kAdd) g[i] += to_acc(r_old.v[i]);
          out.v[i] = static_cast<scalar_t>(g[i]);
        }
        store_vec<scalar_t, V>(grad + o, out);
      }
      r_prev = r_cur;
      r_cur = r_next;
      r_next = r_after;
    }
  }
  if constexpr (kValue) {
    sum = block_sum(sum);
    if (threadIdx.x == 0) block_sums[blockIdx.y * int64_t(gridDim.x) + blockIdx.x] = sum;
  }
}

// out[0] = sum of block_sums[0, n), in a fixed order (one block, double accumulation).
template <typename acc_t>
__global__ void __launch_bounds__(kThreads)
    sum_partials_kernel(const acc_t* __restrict__ block_sums, int64_t n, acc_t* __restrict__ out) {
  double x = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) x += block_sums[i];
  x = block_sum(x);
  if (threadIdx.x == 0) *out = static_cast<acc_t>(x);
}

// One pass over `features` (contiguous). Returns the [] value when `value`, else an empty [0].
at::Tensor run_total_variation(const at::Tensor& features, at::Tensor* grad,
                               const at::Tensor* grad_out, double weight, bool value, bool add) {
  const int64_t X = features.size(0), Y = features.size(1), Z = features.size(2);
  const int64_t F = features.size(3);
  const auto options = features.options().dtype(total_variation_dtype(features));
  at::Tensor result = value ? at::empty({}, options) : at::empty({0}, options);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const auto coef = total_variation_coefficients(features);

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, features.scalar_type(), "tv", [&] {
    using acc_t = acc_type<scalar_t>;
    const bool aligned = vec_aligned(max_vec<scalar_t>(), {F},
                                     {features.data_ptr(), grad ? grad->data_ptr() : nullptr});
    dispatch_vec<scalar_t>(aligned, [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      const int64_t slab_vectors = Y * Z * F / V;
      const int64_t blocks_x = (slab_vectors + kThreads - 1) / kThreads;
      TORCH_CHECK(blocks_x < (int64_t(1) << 31), "grid.total_variation: an x-slab of ",
                  slab_vectors, " vectors exceeds one CUDA launch");
      // Enough x-chunks for about 2^21 threads (the GPU full several times over), each
      // chunk long enough that re-reading its x-1 slab costs little.
      const int64_t chunks = std::clamp<int64_t>((int64_t(1) << 21) / (blocks_x * kThreads), 1,
                                                 std::min<int64_t>(X / 8 + 1, 65535));
      const int64_t x_chunk = (X + chunks - 1) / chunks;
      const dim3 blocks(static_cast<unsigned>(blocks_x),
                        static_cast<unsigned>((X + x_chunk - 1) / x_chunk));
      at::Tensor partials =
          value ? at::empty({int64_t(blocks.x) * blocks.y}, options) : at::Tensor();
      Coefficients<acc_t> c;
      for (int a = 0; a < 3; ++a) c.value[a] = static_cast<acc_t>(coef[a]);
      const auto launch = [&](auto kValue, auto kGrad, auto kAdd) {
        total_variation_kernel<scalar_t, V, decltype(kValue)::value, decltype(kGrad)::value,
                               decltype(kAdd)::value><<<blocks, kThreads, 0, stream>>>(
            features.data_ptr<scalar_t>(), grad ? grad->data_ptr<scalar_t>() : nullptr,
            value ? partials.data_ptr<acc_t>() : nullptr,
            grad_out ? grad_out->data_ptr<acc_t>() : nullptr, weight, X, Y, Z, F, x_chunk, c);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      using T = std::true_type;
      using N = std::false_type;
      if (!grad)
        launch(T{}, N{}, N{});
      else if (!add)
        launch(N{}, T{}, N{});
      else if (value)
        launch(T{}, T{}, T{});
      else
        launch(N{}, T{}, T{});
      if (value) {
        sum_partials_kernel<acc_t><<<1, kThreads, 0, stream>>>(
            partials.data_ptr<acc_t>(), partials.numel(), result.data_ptr<acc_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
    });
  });
  return result;
}

at::Tensor total_variation_cuda(const at::Tensor& features_in) {  // [X, Y, Z, F] -> []
  check_total_variation_args("grid.total_variation", features_in);
  const c10::cuda::CUDAGuard guard(features_in.device());
  return run_total_variation(features_in.contiguous(), nullptr, nullptr, 1.0, true, false);
}

at::Tensor total_variation_backward_cuda(const at::Tensor& grad_out,       // []
                                         const at::Tensor& features_in) {  // [X, Y, Z, F]
  check_total_variation_args("grid.total_variation_backward", features_in);
  check_total_variation_grad_out(grad_out, features_in);
  const c10::cuda::CUDAGuard guard(features_in.device());
  const at::Tensor features = features_in.contiguous();
  at::Tensor grad = at::empty_like(features, at::MemoryFormat::Contiguous);
  run_total_variation(features, &grad, &grad_out, 1.0, false, false);
  return grad;
}

at::Tensor total_variation_add_grad_cuda(at::Tensor& grad,               // [X, Y, Z, F]
                                         const at::Tensor& features_in,  // [X, Y, Z, F]
                                         double weight, bool compute_value) {
  check_total_variation_args("grid.total_variation_add_grad_", features_in);
  check_total_variation_grad(grad, features_in);
  const c10::cuda::CUDAGuard guard(features_in.device());
  return run_total_variation(features_in.contiguous(), &grad, nullptr, weight, compute_value, true);
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("total_variation", &total_variation_cuda);
  m.impl("total_variation_backward", &total_variation_backward_cuda);
  m.impl("total_variation_add_grad_", &total_variation_add_grad_cuda);
}

}  // namespace grid
