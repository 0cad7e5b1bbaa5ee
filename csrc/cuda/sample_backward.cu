// CUDA backward of grid::sample. A group of threads per point, as in the forward, but split by
// the z side of the cell: a thread reads and scatters the four corners of its side, so one warp
// instruction covers both z-neighbours, which sit next to each other in the channels-last grid.
// The feature gradient is summed over runs of consecutive points that share a voxel inside the
// warp (corner_runs.cuh: ray-ordered points share corners), then scattered with 16-byte vector
// atomics straight into a grid of the features' dtype, one per run; the point gradient is
// reduced over the group with warp shuffles. Under
// torch.use_deterministic_algorithms(True) the feature gradient comes from the atomic-free
// sample_backward_deterministic.cu instead.
#include <ATen/Context.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <tuple>

#include "checks.h"
#include "corner_runs.cuh"
#include "cuda_utils.cuh"
#include "dispatch.h"
#include "sample_backward_deterministic.cuh"
#include "sample_small_f.cuh"

namespace grid {
namespace {

// Blocks per SM the register budget must allow: the scatter needs many warps in flight.
constexpr int kBackwardBlocks = 3;

// Threads 2^plog * dz + c of a point's group handle vectors c, c + 2^plog, ... of the four
// corners on z side dz (corners 2j + dz). With kRuns (float accumulation: kSumRuns), the
// feature gradient is summed over runs of consecutive points that share a voxel before the
// atomics (corner_runs.cuh), in a second loop after the point gradient (one loop for both held
// 78 instead of 64 registers for float4 rows); the lane 2^glog further holds the next point with
// the same side and vector. Lanes past the last point stay for those shuffles and touch nothing.
// Without kRuns, one atomic per corner and vector, in the point gradient's loop.
template <typename scalar_t, typename point_t, typename index_t, int V, bool kFeatures,
          bool kPoints>
__global__ void __launch_bounds__(kThreads, kBackwardBlocks) sample_backward_kernel(
    const scalar_t* __restrict__ grad_out,  // [N, F]
    const scalar_t* __restrict__ features,  // [X, Y, Z, F] contiguous (read for kPoints)
    const point_t* __restrict__ points,     // [N, 3]
    scalar_t* __restrict__ grad_features,   // [X, Y, Z, F] contiguous (kFeatures)
    point_t* __restrict__ grad_points,      // [N, 3] (kPoints)
    GridShape shape, index_t N, int plog, Sampling mode) {
  using acc_t = acc_type<scalar_t>;
  constexpr bool kRuns = kFeatures && kSumRuns<acc_t, index_t, V>;
  const index_t F = shape.F, vectors = F / V;
  const index_t sx = shape.stride[0], sy = shape.stride[1], sz = shape.stride[2];
  const int glog = plog + 1;
  const unsigned mask = group_mask(glog);
  const index_t i = blockIdx.x * index_t(blockDim.x) + threadIdx.x;
  const index_t n = i >> glog;
  const bool active = n < N;  // whole groups: a point's lanes agree
  if (!kRuns && !active) return;
  const int lane = i & ((1 << glog) - 1);
  const int dz = lane >> plog;
  Cell<acc_t, index_t> cell =
      locate_cell<acc_t, index_t>(points + 3 * (active ? n : 0), shape, mode);
  if (!active) cell.inside = 0, cell.any = false;
  const acc_t u = cell.axis[0].frac, v_ = cell.axis[1].frac, w_ = cell.axis[2].frac;
  // This side's z weight, placed where corner_weight_grad reads the z = 0 side (indexing wz by
  // the run-time dz would put the arrays in local memory); the z derivative flips on side 1.
  const acc_t wx[2] = {1 - u, u}, wy[2] = {1 - v_, v_}, wz[2] = {dz ? w_ : 1 - w_, 0};
  const acc_t z_sign = dz ? acc_t(-1) : acc_t(1);
  acc_t grad[3] = {0, 0, 0};  // d loss / d(u, v, w), over this thread's channels and corners
  if (cell.any && (kPoints || !kRuns)) {
#pragma unroll 1  // one vector per thread is the common case; unrolling only costs registers
    for (index_t c = lane & ((1 << plog) - 1); c < vectors; c += (1 << plog)) {
      const index_t side = cell.offset(0, sx, sy, sz) + dz * sz + c * V;  // corner dz
      acc_t g[V];
      widen<scalar_t, V>(load_raw<scalar_t, V>(grad_out + n * F + c * V), g);
      if constexpr (kPoints) {
        raw_t<scalar_t, V> f[4];  // all four loads in flight before the first use
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          f[j] = cell.valid(2 * j + dz)
                     ? load_raw<scalar_t, V>(features + side + corner_dx(2 * j) * sx +
                                             corner_dy(2 * j) * sy)
                     : raw_t<scalar_t, V>{};
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc_t x[V], dot = 0, dweight[3];  // <grad_out, corner features>, d weight / d(u,v,w)
          widen<scalar_t, V>(f[j], x);
#pragma unroll
          for (int v = 0; v < V; ++v) dot += g[v] * x[v];
          corner_weight_grad(2 * j, wx, wy, wz, dweight);
          dweight[2] *= z_sign;
#pragma unroll
          for (int a = 0; a < 3; ++a) grad[a] += dweight[a] * dot;
        }
      }
      if constexpr (kFeatures && !kRuns) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (!cell.valid(2 * j + dz)) continue;
          const acc_t weight = wx[corner_dx(2 * j)] * wy[corner_dy(2 * j)] * wz[0];
          acc_t add[V];
#pragma unroll
          for (int v = 0; v < V; ++v) add[v] = weight * g[v];
          atomic_add_vec<V>(grad_features + side + corner_dx(2 * j) * sx + corner_dy(2 * j) * sy,
                            add);
        }
      }
    }
  }
  if constexpr (kPoints) {
#pragma unroll
    for (int a = 0; a < 3; ++a) grad[a] = group_sum(grad[a], mask, glog);
    if (active && lane == 0) {
#pragma unroll
      for (int a = 0; a < 3; ++a)
        grad_points[3 * n + a] = static_cast<point_t>(grad[a] * cell.axis[a].dindex);
    }
  }
  if constexpr (kRuns) {
    const index_t i0[3] = {cell.axis[0].i0, cell.axis[1].i0, cell.axis[2].i0};
    const acc_t t[3] = {u, v_, w_};
    // The same trip count on every lane of the warp (the run sums shuffle across it); the
    // grad_out row is read again, from L1.
#pragma unroll 1
    for (index_t c0 = 0; c0 < vectors; c0 += (1 << plog)) {
      const index_t c = c0 + (lane & ((1 << plog) - 1));
      const bool has = cell.any && c < vectors;
      acc_t g[V];
      if (has) {
        widen<scalar_t, V>(load_raw<scalar_t, V>(grad_out + n * F + c * V), g);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) g[v] = 0;
      }
      acc_t acc[4][V];  // [corner 2j + dz][channel]: this point's part, or its run's sum
      const unsigned write =
          sum_corner_runs<4, true>(i0, t, has ? cell.inside : 0u, g, dz, 1 << glog, acc);
      const index_t side = cell.offset(0, sx, sy, sz) + dz * sz + c * V;  // corner dz
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!((write >> (2 * j + dz)) & 1u)) continue;
        atomic_add_vec<V>(grad_features + side + corner_dx(2 * j) * sx + corner_dy(2 * j) * sy,
                          acc[j]);
      }
    }
  }
}

// float32 grids of one or three channels take the one-thread-per-point kernel of
// sample_small_f.cuh: z-pair vector atomics after the warp's run sums. S5 backward on an H100:
// F = 1 0.118 -> 0.098 ms; F = 3 0.208 -> 0.192 ms (bench/probes/small_f_probe.py). F = 2 and 4
// measured slower there than the kernels below, whose 4-8 threads per point have more in flight
// and coalesce their atomics.
bool use_small_f(const at::Tensor& features, const at::Tensor& points, const at::Tensor& grad_out) {
  return features.scalar_type() == at::kFloat && points.scalar_type() == at::kFloat &&
         (features.size(3) == 1 || features.size(3) == 3) &&
         fits_int32(points.size(0), {features.numel(), grad_out.numel(), points.numel()});
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> sample_backward_cuda(
    const at::Tensor& grad_out_in,  // [..., F]
    const at::Tensor& features_in,  // [X, Y, Z, F]
    const at::Tensor& points_in,    // [..., 3]
    bool align_corners, c10::string_view padding, c10::string_view interpolation,
    std::array<bool, 2> output_mask, std::optional<c10::ArrayRef<double>> bounds) {
  const Sampling mode =
      check_sample_args(features_in, points_in, align_corners, padding, interpolation, bounds);
  check_grad_out("grid.sample_backward", grad_out_in, features_in,
                 sample_out_sizes(features_in, points_in));
  const c10::cuda::CUDAGuard guard(features_in.device());
  const bool want_points = output_mask[1];
  const bool deterministic = output_mask[0] && at::globalContext().deterministicAlgorithms();
  const bool want_features = output_mask[0] && !deterministic;  // by the atomic kernel
  // Contiguous, so that one set of corner offsets addresses both the features and their
  // gradient (two sets cost the registers that occupancy needs).
  const at::Tensor features = features_in.contiguous();
  const at::Tensor points = points_in.reshape({-1, 3}).contiguous();                     // [N, 3]
  const at::Tensor grad_out = grad_out_in.reshape({-1, features.size(3)}).contiguous();  // [N, F]
  const int64_t N = points.size(0);
  const GridShape shape = grid_shape(features);
  at::Tensor grad_features =
      deterministic ? sample_grad_features_deterministic(grad_out, features, points, mode)
                    : masked_output(want_features, features.sizes(),
                                    features.options());  // [X, Y, Z, F]
  // [..., 3]; the kernels write every element, so deterministic mode need not fill it first
  at::Tensor grad_points = want_points
                               ? unfilled_cuda(points_in.sizes(), points_in.options())
                               : masked_output(false, points_in.sizes(), points_in.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  if (want_features)  // all-zero bits are 0.0 in every float dtype; faster than a fill kernel
    C10_CUDA_CHECK(cudaMemsetAsync(grad_features.data_ptr(), 0, grad_features.nbytes(), stream));
  if (N > 0 && (want_features || want_points) && use_small_f(features, points, grad_out)) {
    // one thread per point; z-pair vector atomics where no float4 can leave the grid
    const bool vector = vec_aligned(4, {features.numel()}, {grad_features.data_ptr()});
    dispatch_mask(want_features, want_points, [&](auto kf, auto kp) {
      const auto launch = [&](auto fc, auto kv) {
        constexpr auto kernel =
            sample_backward_small_f_kernel<decltype(fc)::value, decltype(kv)::value,
                                           decltype(kf)::value, decltype(kp)::value, true, int32_t>;
        prefer_l1<kernel>();
        kernel<<<one_pass_blocks(N), kThreads, 0, stream>>>(
            grad_out.data_ptr<float>(), features.data_ptr<float>(), points.data_ptr<float>(),
            want_features ? grad_features.data_ptr<float>() : nullptr,
            want_points ? grad_points.data_ptr<float>() : nullptr, shape, int32_t(N), mode);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      const auto with_f = [&](auto kv) {
        if (shape.F == 1)
          launch(std::integral_constant<int, 1>{}, kv);
        else
          launch(std::integral_constant<int, 3>{}, kv);
      };
      if (vector)
        with_f(std::true_type{});
      else
        with_f(std::false_type{});
    });
  } else if (N > 0 && (want_features || want_points)) {
    dispatch_dtypes(features.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
      using scalar_t = typename decltype(s)::type;
      using point_t = typename decltype(p)::type;
      const bool aligned = vec_aligned(max_vec<scalar_t>(),
                                       {shape.F, shape.stride[0], shape.stride[1], shape.stride[2]},
                                       {features.data_ptr(), grad_out.data_ptr()});
      const bool pairs =
          vec_aligned(2, {shape.F, shape.stride[0], shape.stride[1], shape.stride[2]},
                      {features.data_ptr(), grad_out.data_ptr()});
      dispatch_vec_or_pairs<scalar_t>(aligned, pairs, [&](auto vec) {
        constexpr int V = decltype(vec)::value;
        const int plog = std::min(group_log2(shape.F / V), 4);  // two z sides: at most 32 threads
        const bool small =
            fits_int32(N << (plog + 1), {features.numel(), grad_out.numel(), points.numel()});
        dispatch_mask(want_features, want_points, [&](auto kf, auto kp) {
          dispatch_index(small, [&](auto index) {
            using index_t = typename decltype(index)::type;
            constexpr auto kernel =
                sample_backward_kernel<scalar_t, point_t, index_t, V, decltype(kf)::value,
                                       decltype(kp)::value>;
            prefer_l1<kernel>();
            kernel<<<one_pass_blocks(N << (plog + 1)), kThreads, 0, stream>>>(
                grad_out.data_ptr<scalar_t>(), features.data_ptr<scalar_t>(),
                points.data_ptr<point_t>(),
                want_features ? grad_features.data_ptr<scalar_t>() : nullptr,
                want_points ? grad_points.data_ptr<point_t>() : nullptr, shape, index_t(N), plog,
                mode);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
          });
        });
      });
    });
  }
  return {grad_features, grad_points};
}

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("sample_backward", &sample_backward_cuda);
}

}  // namespace grid
