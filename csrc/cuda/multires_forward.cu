// CUDA forward of grid::multires, one launch for every level: a thread per (point, group of
// levels), the group on blockIdx.y (multires_level_group: 4 levels of F = 2 float32), so the
// blocks in flight read one group's rows, which stay in L2, and each thread writes its point's
// group as one 32-byte sector. Each level's eight rows come from csrc/multires_math.h.
#include <torch/library.h>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"
#include "multires_checks.h"
#include "multires_launch.cuh"
#include "multires_math.h"

namespace grid {
namespace {

// kVec: each row of kF values read (and each output row written) as one vector access.
template <typename scalar_t, typename point_t, int kF, bool kVec>
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
#pragma unroll
      for (int k = 0; k < 8; ++k)
        v[k] = load_vec<scalar_t, kF>(table + multires_row_offset(levels, l, cell.row[k], kF));
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
        multires_forward_kernel<scalar_t, point_t, kF, kVec>
            <<<multires_group_blocks(N, levels, group), kThreads, 0, stream>>>(
                table.data_ptr<scalar_t>(), points.data_ptr<point_t>(), out.data_ptr<scalar_t>(),
                levels, group, N);
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
