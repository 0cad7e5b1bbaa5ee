// CUDA backward of grid::multires. A thread per (point, group of levels), as the forward (the
// group on blockIdx.y, so the rows in flight stay in L2), scatters w_k * grad_out into the table
// gradient with atomics (float32 accumulation for float16 / bfloat16 tables, rounded once at the
// end); when the points' gradient is asked, the group is every level, so that a thread sums its
// point's gradient over the levels in registers (deterministic). Levels whose rows fit a block's
// shared memory (the coarse ones, where thousands of points land on each row and global atomics on
// one address serialise) are summed instead per block in shared memory by a second kernel, the
// level on blockIdx.y, and added to the table gradient once per block. Under
// torch.use_deterministic_algorithms(True) the table gradient comes instead from a sorted,
// atomic-free accumulation (index_put_ with accumulate), which holds [N, L, 8] rows and
// [N, L, 8, F] contributions in memory.
#include <ATen/Context.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <tuple>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"
#include "multires_checks.h"
#include "multires_launch.cuh"
#include "multires_math.h"

namespace grid {
namespace {

// kVec: each row of kF values read as one vector, and its gradient added with vector atomics
// (float2 / float4 on sm_90).
template <typename scalar_t, typename point_t, int kF, bool kVec, bool kTable, bool kPoints>
__global__ void __launch_bounds__(kThreads) multires_backward_kernel(
    const scalar_t* __restrict__ grad_out,        // [N, L F]
    const scalar_t* __restrict__ table,           // [L, T, F] contiguous
    const point_t* __restrict__ points,           // [N, 3]
    acc_type<scalar_t>* __restrict__ grad_table,  // [L, T, F] zeroed, accumulation dtype
    point_t* __restrict__ grad_points,            // [N, 3]
    MultiresLevels levels, uint32_t shared_levels, int group, int64_t N) {
  // shared_levels: bit l set where multires_backward_shared_kernel adds level l's gradient;
  // group: levels per thread (all of them when kPoints)
  using acc_t = acc_type<scalar_t>;
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const int F = multires_features<kF>(levels);
  acc_t p[3];
  multires_load_point(points, n, p);
  const scalar_t* g = grad_out + n * levels.L * F;
  acc_t grad[3] = {0, 0, 0};
  const int first = blockIdx.y * group, end = min(first + group, int(levels.L));
  for (int l = first; l < end; ++l) {
    const bool table_here = kTable && !((shared_levels >> l) & 1u);
    if (!kPoints && !table_here) continue;  // a shared level, and no points gradient asked
    const MultiresCell<acc_t> cell = multires_cell(p, levels, l);
    acc_t w[8], dot[8] = {};
    corner_weights(cell.t[0], cell.t[1], cell.t[2], w);
    if constexpr (kVec) {
      const Vec<scalar_t, kF> grow = load_vec<scalar_t, kF>(g + l * kF);
      acc_t gf[kF];
#pragma unroll
      for (int f = 0; f < kF; ++f) gf[f] = to_acc(grow.v[f]);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int64_t off = multires_row_offset(levels, l, cell.row[k], kF);
        if (table_here) {
          acc_t add[kF];
#pragma unroll
          for (int f = 0; f < kF; ++f) add[f] = w[k] * gf[f];
          atomic_add_vec<kF>(grad_table + off, add);
        }
        if constexpr (kPoints) {
          const Vec<scalar_t, kF> v = load_vec<scalar_t, kF>(table + off);
#pragma unroll
          for (int f = 0; f < kF; ++f) dot[k] += gf[f] * to_acc(v.v[f]);
        }
      }
    } else {
#pragma unroll
      for (int f = 0; f < F; ++f) {
        const acc_t gf = to_acc(g[l * F + f]);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int64_t off = multires_row_offset(levels, l, cell.row[k], F) + f;
          if (table_here) atomicAdd(grad_table + off, w[k] * gf);
          if constexpr (kPoints) dot[k] += gf * to_acc(table[off]);
        }
      }
    }
    if constexpr (kPoints) {
      acc_t dweight[3][8];
      corner_weight_grads<acc_t>(cell.t[0], cell.t[1], cell.t[2], dweight);
#pragma unroll
      for (int k = 0; k < 8; ++k)
#pragma unroll
        for (int a = 0; a < 3; ++a) grad[a] += dweight[a][k] * dot[k] * cell.dt[a];
    }
  }
  if constexpr (kPoints)
#pragma unroll
    for (int a = 0; a < 3; ++a) grad_points[3 * n + a] = static_cast<point_t>(grad[a]);
}

// The levels summed in shared memory: level[i] has rows[i] table rows (its possible row
// indices: (R + 1)^3 dense, T hashed).
struct MultiresSharedLevels {
  int32_t count;
  int32_t level[kMultiresMaxLevels];
  int32_t rows[kMultiresMaxLevels];
};

// Shared memory a level's row sums may take in one block: two blocks per SM on sm_90 (228 KB
// an SM, 1 KB of it reserved per block), so level 1 of instant-ngp's NeRF levels (23^3 rows x
// F = 2 x 4 B = 97 KB) fits. Capped by the device's opt-in limit at launch.
constexpr int64_t kMultiresSharedBytes = 100 * 1024;

// Table gradient of the shared levels: block (x, y) zeroes a [rows, F] sum of level
// shared.level[y] in shared memory, adds the contributions of points x, x + gridDim.x
// blockDim.x, ... with shared atomics, then adds its nonzero sums to grad_table with one global
// atomic each. Every thread reaches both __syncthreads (no early return).
template <typename scalar_t, typename point_t, int kF, bool kVec>
__global__ void __launch_bounds__(kThreads) multires_backward_shared_kernel(
    const scalar_t* __restrict__ grad_out,        // [N, L F]
    const point_t* __restrict__ points,           // [N, 3]
    acc_type<scalar_t>* __restrict__ grad_table,  // [L, T, F] accumulation dtype
    MultiresLevels levels, MultiresSharedLevels shared, int64_t N) {
  using acc_t = acc_type<scalar_t>;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  acc_t* sums = reinterpret_cast<acc_t*>(shared_bytes);  // [rows, F]
  const int l = shared.level[blockIdx.y];
  const int F = multires_features<kF>(levels);
  const int32_t count = shared.rows[blockIdx.y] * F;  // <= kMultiresSharedBytes / 4
  for (int32_t i = threadIdx.x; i < count; i += blockDim.x) sums[i] = acc_t(0);
  __syncthreads();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < N; n += stride) {
    acc_t p[3];
    multires_load_point(points, n, p);
    const MultiresCell<acc_t> cell = multires_cell(p, levels, l);
    acc_t w[8];
    corner_weights(cell.t[0], cell.t[1], cell.t[2], w);
    const scalar_t* g = grad_out + (n * levels.L + l) * F;
    if constexpr (kVec) {
      const Vec<scalar_t, kF> grow = load_vec<scalar_t, kF>(g);
#pragma unroll
      for (int f = 0; f < kF; ++f) {
        const acc_t gf = to_acc(grow.v[f]);
#pragma unroll
        for (int k = 0; k < 8; ++k) atomicAdd(sums + cell.row[k] * F + f, w[k] * gf);
      }
    } else {
      for (int f = 0; f < F; ++f) {
        const acc_t gf = to_acc(g[f]);
#pragma unroll
        for (int k = 0; k < 8; ++k) atomicAdd(sums + cell.row[k] * F + f, w[k] * gf);
      }
    }
  }
  __syncthreads();
  acc_t* out = grad_table + multires_row_offset(levels, l, 0, F);
  for (int32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const acc_t v = sums[i];
    if (v != acc_t(0)) atomicAdd(out + i, v);  // rows no point of this block touched stay out
  }
}

// The levels whose [rows, F] sums fit `budget` bytes of shared memory, and the most bytes any
// of them takes.
MultiresSharedLevels multires_shared_levels(const MultiresLevels& levels, int64_t acc_bytes,
                                            int64_t budget, int64_t* max_bytes) {
  MultiresSharedLevels shared{};
  *max_bytes = 0;
  for (int l = 0; l < levels.L; ++l) {
    const int64_t side = int64_t(levels.resolution[l]) + 1;
    const int64_t rows = levels.dense[l] ? side * side * side : int64_t(levels.T);
    const int64_t bytes = rows * levels.F * acc_bytes;
    if (bytes > budget) continue;
    shared.level[shared.count] = l;
    shared.rows[shared.count] = static_cast<int32_t>(rows);
    ++shared.count;
    *max_bytes = std::max(*max_bytes, bytes);
  }
  return shared;
}

// Blocks per shared level: about one point per row in each block (so that a block's flush,
// `rows` atomics, is small beside its points' 8 shared atomics each), at least one per SM, at
// most one per kThreads points.
unsigned multires_shared_blocks(int64_t N, const MultiresSharedLevels& shared, int sms) {
  int32_t rows = kThreads;
  for (int i = 0; i < shared.count; ++i) rows = std::max(rows, shared.rows[i]);
  const int64_t wanted = std::max<int64_t>((N + rows - 1) / rows, sms);
  return static_cast<unsigned>(std::min<int64_t>(wanted, one_pass_blocks(N)));
}

// For the deterministic path: each (point, level, corner)'s flat table row l T + row and its
// weight w_k.
template <typename point_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    multires_corner_rows_kernel(const point_t* __restrict__ points,  // [N, 3]
                                int64_t* __restrict__ rows,          // [N, L, 8]
                                acc_t* __restrict__ weights,         // [N, L, 8]
                                MultiresLevels levels, int64_t N) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  acc_t p[3];
  multires_load_point(points, n, p);
  for (int l = 0; l < levels.L; ++l) {
    const MultiresCell<acc_t> cell = multires_cell(p, levels, l);
    acc_t w[8];
    corner_weights(cell.t[0], cell.t[1], cell.t[2], w);
    const int64_t base = (n * levels.L + l) * 8;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      rows[base + k] = int64_t(l) * levels.T + cell.row[k];
      weights[base + k] = w[k];
    }
  }
}

// grad_table [L, T, F] (accumulation dtype) summed in a fixed order: the contributions are
// sorted by row inside index_put_ (its deterministic accumulate path).
at::Tensor multires_grad_table_deterministic(const at::Tensor& grad_out,  // [N, L F]
                                             const at::Tensor& table,     // [L, T, F]
                                             const at::Tensor& points,    // [N, 3]
                                             const MultiresLevels& levels, at::ScalarType acc) {
  const int64_t N = points.size(0), L = levels.L, F = levels.F;
  at::Tensor grad = at::zeros(table.sizes(), table.options().dtype(acc));
  if (N == 0) return grad;
  at::Tensor rows = at::empty({N, L, 8}, points.options().dtype(at::kLong));
  at::Tensor weights = at::empty({N, L, 8}, points.options().dtype(acc));
  const auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch_dtypes(table.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
    using acc_t = acc_type<typename decltype(s)::type>;
    using point_t = typename decltype(p)::type;
    multires_corner_rows_kernel<point_t, acc_t><<<one_pass_blocks(N), kThreads, 0, stream>>>(
        points.data_ptr<point_t>(), rows.data_ptr<int64_t>(), weights.data_ptr<acc_t>(), levels, N);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  const at::Tensor values = weights.unsqueeze(-1) * grad_out.view({N, L, 1, F}).to(acc);
  grad.view({L * levels.T, F})
      .index_put_({rows.view(-1)}, values.view({-1, F}),
                  /*accumulate=*/true);
  return grad;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> multires_backward_cuda(
    const at::Tensor& grad_out_in,  // [..., L F]
    const at::Tensor& table_in,     // [L, T, F]
    const at::Tensor& points_in,    // [..., 3]
    at::IntArrayRef resolutions, std::array<bool, 2> output_mask) {
  const MultiresLevels levels = check_multires_args(table_in, points_in, resolutions);
  check_grad_out("grid.multires_backward", grad_out_in, table_in,
                 multires_out_sizes(table_in, points_in));
  const c10::cuda::CUDAGuard guard(table_in.device());
  const at::Tensor table = table_in.contiguous();
  const at::Tensor points = contiguous_rows(points_in, 3);  // [N, 3]
  const int64_t row = int64_t(levels.L) * levels.F;
  const at::Tensor grad_out = contiguous_rows(grad_out_in, row);  // [N, L F]
  const int64_t N = points.size(0);
  const auto acc_dtype = table.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const bool deterministic = output_mask[0] && at::globalContext().deterministicAlgorithms();
  const bool want_table = output_mask[0] && !deterministic;  // by the atomic kernel
  const bool want_points = output_mask[1];
  at::Tensor grad_acc =
      deterministic ? multires_grad_table_deterministic(grad_out, table, points, levels, acc_dtype)
                    : masked_output(want_table, table.sizes(), table.options().dtype(acc_dtype));
  at::Tensor grad_points = want_points
                               ? unfilled_cuda(points_in.sizes(), points_in.options())
                               : masked_output(false, points_in.sizes(), points_in.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  if (want_table)  // all-zero bits are 0.0 in float32 and float64
    C10_CUDA_CHECK(cudaMemsetAsync(grad_acc.data_ptr(), 0, grad_acc.nbytes(), stream));
  // Coarse levels' table gradient summed per block in shared memory (the atomic path only).
  int64_t shared_bytes = 0, budget = 0;
  MultiresSharedLevels shared{};
  if (want_table && N > 0) {
    int device = 0, optin = 0, sms = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    budget = std::min<int64_t>(kMultiresSharedBytes, optin);
    shared = multires_shared_levels(levels, at::elementSize(acc_dtype), budget, &shared_bytes);
    if (shared.count > 0) {
      dispatch_dtypes(table.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
        using scalar_t = typename decltype(s)::type;
        using point_t = typename decltype(p)::type;
        using acc_t = acc_type<scalar_t>;
        dispatch_multires_f(levels.F, [&](auto f) {
          constexpr int kF = decltype(f)::value;
          const bool vector = multires_rows_aligned<scalar_t, kF>({grad_out.data_ptr()});
          dispatch_bool(vector, [&](auto kv) {
            constexpr bool kVec = decltype(kv)::value && multires_vector_width_ok<scalar_t, kF>();
            const auto kernel = multires_backward_shared_kernel<scalar_t, point_t, kF, kVec>;
            // above 48 KB a block's dynamic shared memory is opt-in; always the same value, so
            // that calls from other host threads never lower it under one another's launch
            C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(budget)));
            const dim3 blocks(multires_shared_blocks(N, shared, sms),
                              static_cast<unsigned>(shared.count));
            kernel<<<blocks, kThreads, shared_bytes, stream>>>(
                grad_out.data_ptr<scalar_t>(), points.data_ptr<point_t>(),
                grad_acc.data_ptr<acc_t>(), levels, shared, N);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
          });
        });
      });
    }
  }
  uint32_t shared_mask = 0;
  for (int i = 0; i < shared.count; ++i) shared_mask |= 1u << shared.level[i];
  // the per-point kernel: the points gradient, and the table gradient of the other levels
  const bool table_left = want_table && shared.count < levels.L;
  if (N > 0 && (table_left || want_points)) {
    dispatch_dtypes(table.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
      using scalar_t = typename decltype(s)::type;
      using point_t = typename decltype(p)::type;
      using acc_t = acc_type<scalar_t>;
      dispatch_multires_f(levels.F, [&](auto f) {
        constexpr int kF = decltype(f)::value;
        const bool vector =
            multires_rows_aligned<scalar_t, kF>({table.data_ptr(), grad_out.data_ptr()});
        dispatch_bool(vector, [&](auto kv) {
          constexpr bool kVec = decltype(kv)::value && multires_vector_width_ok<scalar_t, kF>();
          const int group =
              want_points ? int(levels.L) : multires_level_group(levels, sizeof(scalar_t));
          dispatch_mask(table_left, want_points, [&](auto kt, auto kp) {
            multires_backward_kernel<scalar_t, point_t, kF, kVec, decltype(kt)::value,
                                     decltype(kp)::value>
                <<<multires_group_blocks(N, levels, group), kThreads, 0, stream>>>(
                    grad_out.data_ptr<scalar_t>(), table.data_ptr<scalar_t>(),
                    points.data_ptr<point_t>(), table_left ? grad_acc.data_ptr<acc_t>() : nullptr,
                    want_points ? grad_points.data_ptr<point_t>() : nullptr, levels, shared_mask,
                    group, N);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
          });
        });
      });
    });
  }
  // The float accumulator rounded to the table's dtype (no copy when they are equal).
  return {grad_acc.to(table.scalar_type()), grad_points};
}

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("multires_backward", &multires_backward_cuda);
}

}  // namespace grid
