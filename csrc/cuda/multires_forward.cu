// CUDA forward of grid::multires, one launch for every level: a thread per (point, group of
// levels), the group on blockIdx.y (multires_level_group: 4 levels of F = 2 float32), so the
// blocks in flight read one group's rows, which stay in L2, and each thread writes its point's
// group as one 32-byte sector. Each level's eight rows come from csrc/multires_math.h; rows of
// 8 bytes are read in x-corner pairs (multires_load_rows_paired), as the kernel is bound by
// L2's sector requests (bench/notes/ops.md, R1 v4).
#include <torch/library.h>

#include <cstdint>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"
#include "multires_checks.h"
#include "multires_launch.cuh"
#include "multires_math.h"

namespace grid {
namespace {

// The eight rows of one cell, x-corner pairs (k, k + 4) from one 16-byte load where both
// rows sit in one aligned pair of rows (instant-ngp's hash keeps x's low bit: half the
// cells, dense or hashed): fewer L1 requests and L2 sectors than eight 8-byte loads.
// Needs rows of 8 bytes, an even T and a 16-byte aligned table.
template <typename scalar_t, int kF>
__device__ __forceinline__ void multires_load_rows_paired(const scalar_t* level_rows,
                                                          const uint32_t (&row)[8],
                                                          Vec<scalar_t, kF> (&v)[8]) {
  static_assert(kF * sizeof(scalar_t) == 8, "paired rows are 8 bytes");
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t a = row[k], b = row[k + 4], base = a & ~1u;
    const Vec<scalar_t, 2 * kF> pair = load_vec<scalar_t, 2 * kF>(level_rows + base * kF);
#pragma unroll
    for (int f = 0; f < kF; ++f) v[k].v[f] = pair.v[(a & 1u) * kF + f];
    if ((b & ~1u) == base) {
#pragma unroll
      for (int f = 0; f < kF; ++f) v[k + 4].v[f] = pair.v[(b & 1u) * kF + f];
    } else {
      v[k + 4] = load_vec<scalar_t, kF>(level_rows + b * kF);
    }
  }
}

// kVec: each row of kF values read (and each output row written) as one vector access.
// kPair: the rows by multires_load_rows_paired.
template <typename scalar_t, typename point_t, int kF, bool kVec, bool kPair = false>
__global__ void __launch_bounds__(kThreads)
    multires_forward_kernel(const scalar_t* __restrict__ table,  // [L, T, F] contiguous
                            const point_t* __restrict__ points,  // [N, 3]
                            scalar_t* __restrict__ out,          // [N, L F]
                            MultiresLevels levels, int group, int64_t N) {
  using acc_t = acc_type<scalar_t>;
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const int F = multires_features<kF>(levels);
  acc_t p[3];
  multires_load_point(points, n, p);
  scalar_t* o = out + n * levels.L * F;
  const int first = blockIdx.y * group, end = min(first + group, int(levels.L));
  for (int l = first; l < end; ++l) {
    const MultiresCell<acc_t> cell = multires_cell(p, levels, l);
    acc_t w[8];
    corner_weights(cell.t[0], cell.t[1], cell.t[2], w);
    if constexpr (kVec) {
      Vec<scalar_t, kF> v[8];  // the eight loads in flight before the first use
      if constexpr (kPair) {
        multires_load_rows_paired<scalar_t, kF>(table + multires_row_offset(levels, l, 0, kF),
                                                cell.row, v);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k)
          v[k] = load_vec<scalar_t, kF>(table + multires_row_offset(levels, l, cell.row[k], kF));
      }
      acc_t sum[kF] = {};
#pragma unroll
      for (int k = 0; k < 8; ++k)
#pragma unroll
        for (int f = 0; f < kF; ++f) sum[f] += w[k] * to_acc(v[k].v[f]);
      Vec<scalar_t, kF> row;
#pragma unroll
      for (int f = 0; f < kF; ++f) row.v[f] = static_cast<scalar_t>(sum[f]);
      store_vec<scalar_t, kF>(o + l * kF, row);
    } else {
#pragma unroll
      for (int f = 0; f < F; ++f) {
        acc_t sum = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k)
          sum += w[k] * to_acc(table[multires_row_offset(levels, l, cell.row[k], F) + f]);
        o[l * F + f] = static_cast<scalar_t>(sum);
      }
    }
  }
}

}  // namespace

at::Tensor multires_forward_cuda(const at::Tensor& table_in,   // [L, T, F]
                                 const at::Tensor& points_in,  // [..., 3]
                                 at::IntArrayRef resolutions) {
  const MultiresLevels levels = check_multires_args(table_in, points_in, resolutions);
  const c10::cuda::CUDAGuard guard(table_in.device());
  const at::Tensor table = table_in.contiguous();
  const at::Tensor points = contiguous_rows(points_in, 3);  // [N, 3]
  at::Tensor out = unfilled_cuda(multires_out_sizes(table, points_in), table.options());
  const int64_t N = points.size(0);
  if (N == 0) return out;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  dispatch_dtypes(table.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    dispatch_multires_f(levels.F, [&](auto f) {
      constexpr int kF = decltype(f)::value;
      const bool vector = multires_rows_aligned<scalar_t, kF>({table.data_ptr(), out.data_ptr()});
      dispatch_bool(vector, [&](auto kv) {
        constexpr bool kVec = decltype(kv)::value && multires_vector_width_ok<scalar_t, kF>();
        const int group = multires_level_group(levels, sizeof(scalar_t));
        constexpr bool kPairOk = kVec && kF * sizeof(scalar_t) == 8;
        const bool pair =
            kPairOk && levels.T % 2 == 0 && reinterpret_cast<uintptr_t>(table.data_ptr()) % 16 == 0;
        const dim3 blocks = multires_group_blocks(N, levels, group);
        if (pair) {
          if constexpr (kPairOk)
            multires_forward_kernel<scalar_t, point_t, kF, kVec, true>
                <<<blocks, kThreads, 0, stream>>>(table.data_ptr<scalar_t>(),
                                                  points.data_ptr<point_t>(),
                                                  out.data_ptr<scalar_t>(), levels, group, N);
        } else {
          multires_forward_kernel<scalar_t, point_t, kF, kVec><<<blocks, kThreads, 0, stream>>>(
              table.data_ptr<scalar_t>(), points.data_ptr<point_t>(), out.data_ptr<scalar_t>(),
              levels, group, N);
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  });
  return out;
}

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("multires", &multires_forward_cuda);
}

}  // namespace grid
