// CUDA gradient of grid::sample with respect to the features, without atomics: used under
// torch.use_deterministic_algorithms(True). The result is bitwise the same from run to run,
// for any N and dtype, and does not depend on how the GPU schedules threads:
//   1. key[n]: the cell of point n (its low corner, -1..size-1 per axis), or `cells` (a
//      sentinel sorted last) for a point that touches no voxel;
//   2. a stable radix sort of (key, n) (cub, only the key bits in use): point indices grouped
//      by cell, ascending inside a cell;
//   3. start[c]: the first sorted position whose key is >= c (a binary search per cell);
//   4. the points' cell fractions and grad_out rows copied into sorted order, so the gather
//      reads them in runs instead of through the index;
//   5. one thread per (voxel, vector of V channels) sums the contributions of the points of
//      the eight cells the voxel is a corner of, in a fixed order (cells in corner order,
//      points in index order), in float32 (float64 for float64), and writes its gradient
//      once: no zeroing pass and no atomics.
#include <ATen/ATen.h>

#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "checks.h"
#include "cuda_utils.cuh"
#include "dispatch.h"
#include "sample_backward_deterministic.cuh"

namespace grid {
namespace {

// Cells of a grid: the low corner runs over -1..size-1 on each axis.
inline int64_t cell_count(const GridShape& g) {
  return (g.size[0] + 1) * (g.size[1] + 1) * (g.size[2] + 1);
}

template <typename acc_t, typename point_t, typename index_t>
__global__ void cell_keys_kernel(const point_t* __restrict__ points,  // [N, 3]
                                 index_t* __restrict__ keys,          // [N]
                                 index_t* __restrict__ index,         // [N]: 0, 1, ..., N - 1
                                 GridShape shape, index_t N, index_t cells, Sampling mode) {
  const index_t n = blockIdx.x * index_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  index[n] = n;
  const Cell<acc_t, index_t> cell =
      locate_cell<acc_t, index_t>(points + 3 * n, shape, mode);
  const index_t Y1 = shape.size[1] + 1, Z1 = shape.size[2] + 1;
  keys[n] = cell.any ? ((cell.axis[0].i0 + 1) * Y1 + cell.axis[1].i0 + 1) * Z1 + cell.axis[2].i0 + 1
                     : cells;
}

// start[c] = lower bound of c in the sorted keys, for c in [0, cells].
template <typename index_t>
__global__ void cell_starts_kernel(const index_t* __restrict__ sorted_keys,  // [N]
                                   index_t* __restrict__ start,              // [cells + 1]
                                   index_t N, index_t cells) {
  const index_t c = blockIdx.x * index_t(blockDim.x) + threadIdx.x;
  if (c > cells) return;
  index_t lo = 0, hi = N;
  while (lo < hi) {
    const index_t mid = lo + (hi - lo) / 2;
    if (sorted_keys[mid] < c)
      lo = mid + 1;
    else
      hi = mid;
  }
  start[c] = lo;
}

// Sorted position p: the point's cell fractions (u, v, w) and its grad_out row. One thread
// per (position, vector of V channels); the first of a position's threads writes the fractions.
template <typename scalar_t, typename point_t, typename index_t, int V>
__global__ void pack_sorted_kernel(const scalar_t* __restrict__ grad_out,          // [N, F]
                                   const point_t* __restrict__ points,             // [N, 3]
                                   const index_t* __restrict__ order,              // [N]
                                   Vec<acc_type<scalar_t>, 4>* __restrict__ frac,  // [N]
                                   scalar_t* __restrict__ sorted_grad,             // [N, F]
                                   GridShape shape, index_t items, Sampling mode) {
  using acc_t = acc_type<scalar_t>;
  const index_t i = blockIdx.x * index_t(blockDim.x) + threadIdx.x;
  if (i >= items) return;
  const index_t vectors = shape.F / V;
  const index_t c = i % vectors, p = i / vectors, n = order[p];
  store_vec<scalar_t, V>(sorted_grad + p * shape.F + c * V,
                         load_vec<scalar_t, V>(grad_out + n * shape.F + c * V));
  if (c == 0) {
    const Cell<acc_t, index_t> cell =
        locate_cell<acc_t, index_t>(points + 3 * n, shape, mode);
    frac[p] = {{cell.axis[0].frac, cell.axis[1].frac, cell.axis[2].frac, acc_t(0)}};
  }
}

// Adds the contributions of sorted points [begin, end) to corner k of their (common) cell,
// with the weight the atomic kernel uses: wx[dx] * wy[dy] * wz[dz].
template <int k, typename scalar_t, typename index_t, int V>
__device__ __forceinline__ void add_cell(acc_type<scalar_t> (&acc)[V], index_t begin, index_t end,
                                         const Vec<acc_type<scalar_t>, 4>* __restrict__ frac,
                                         const scalar_t* __restrict__ sorted_grad, index_t F,
                                         index_t c) {
  using acc_t = acc_type<scalar_t>;
#pragma unroll 1
  for (index_t p = begin; p < end; ++p) {
    const Vec<acc_t, 4> f = frac[p];
    const acc_t wx = corner_dx(k) ? f.v[0] : 1 - f.v[0];
    const acc_t wy = corner_dy(k) ? f.v[1] : 1 - f.v[1];
    const acc_t wz = corner_dz(k) ? f.v[2] : 1 - f.v[2];
    const acc_t weight = wx * wy * wz;
    acc_t g[V];
    widen<scalar_t, V>(load_raw<scalar_t, V>(sorted_grad + p * F + c * V), g);
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] += weight * g[v];
  }
}

// One thread per voxel and vector of V channels; vectors of a voxel on adjacent threads.
template <typename scalar_t, typename index_t, int V>
__global__ void __launch_bounds__(kThreads)
    gather_grad_kernel(const Vec<acc_type<scalar_t>, 4>* __restrict__ frac,  // [N] sorted
                       const scalar_t* __restrict__ sorted_grad,             // [N, F] sorted
                       const index_t* __restrict__ start,                    // [cells + 1]
                       scalar_t* __restrict__ grad_features,  // [X, Y, Z, F] contiguous
                       GridShape shape, index_t items) {
  using acc_t = acc_type<scalar_t>;
  const index_t i = blockIdx.x * index_t(blockDim.x) + threadIdx.x;
  if (i >= items) return;
  const index_t F = shape.F, vectors = F / V;
  const index_t c = i % vectors, voxel = i / vectors;
  const index_t Y = shape.size[1], Z = shape.size[2];
  const index_t z = voxel % Z, y = (voxel / Z) % Y, x = voxel / (Y * Z);
  const index_t Y1 = Y + 1, Z1 = Z + 1;
  acc_t acc[V] = {};
  // Cells (x - dx, y - dy, z - 1) and (x - dx, y - dy, z) have consecutive keys: the voxel is
  // their corner (dx, dy, 1) and (dx, dy, 0), corner index k = 4 dx + 2 dy + dz.
#pragma unroll
  for (int dxy = 0; dxy < 4; ++dxy) {
    const int dx = dxy >> 1, dy = dxy & 1;
    const index_t key = ((x - dx + 1) * Y1 + y - dy + 1) * Z1 + z;  // cell (x-dx, y-dy, z-1)
    const index_t s0 = start[key], s1 = start[key + 1], s2 = start[key + 2];
    if (dxy == 0) {
      add_cell<1>(acc, s0, s1, frac, sorted_grad, F, c);
      add_cell<0>(acc, s1, s2, frac, sorted_grad, F, c);
    } else if (dxy == 1) {
      add_cell<3>(acc, s0, s1, frac, sorted_grad, F, c);
      add_cell<2>(acc, s1, s2, frac, sorted_grad, F, c);
    } else if (dxy == 2) {
      add_cell<5>(acc, s0, s1, frac, sorted_grad, F, c);
      add_cell<4>(acc, s1, s2, frac, sorted_grad, F, c);
    } else {
      add_cell<7>(acc, s0, s1, frac, sorted_grad, F, c);
      add_cell<6>(acc, s1, s2, frac, sorted_grad, F, c);
    }
  }
  Vec<scalar_t, V> o;
#pragma unroll
  for (int v = 0; v < V; ++v) o.v[v] = static_cast<scalar_t>(acc[v]);
  store_vec<scalar_t, V>(grad_features + voxel * F + c * V, o);
}

template <typename index_t>
at::ScalarType index_dtype() {
  return sizeof(index_t) == 4 ? at::kInt : at::kLong;
}

// Bits of the largest key: the radix sort skips the rest.
inline int key_bits(int64_t max_key) {
  int bits = 1;
  while (bits < 63 && (int64_t(1) << bits) <= max_key) ++bits;
  return bits;
}

// Stable ascending sort of (keys, values) pairs by the low `bits` bits of the keys.
template <typename index_t>
void sort_pairs(const at::Tensor& keys, at::Tensor& sorted_keys, const at::Tensor& values,
                at::Tensor& sorted_values, int bits, cudaStream_t stream) {
  const int64_t n = keys.numel();
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, keys.data_ptr<index_t>(), sorted_keys.data_ptr<index_t>(),
      values.data_ptr<index_t>(), sorted_values.data_ptr<index_t>(), n, 0, bits, stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)}, keys.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      temp.data_ptr(), temp_bytes, keys.data_ptr<index_t>(), sorted_keys.data_ptr<index_t>(),
      values.data_ptr<index_t>(), sorted_values.data_ptr<index_t>(), n, 0, bits, stream));
}

}  // namespace

at::Tensor sample_grad_features_deterministic(const at::Tensor& grad_out,  // [N, F] contiguous
                                              const at::Tensor& features,  // [X, Y, Z, F] contig.
                                              const at::Tensor& points,    // [N, 3] contiguous
                                              Sampling mode) {
  at::Tensor grad_features = at::empty_like(features);  // every element is written below
  const int64_t N = points.size(0);
  if (grad_features.numel() == 0) return grad_features;
  if (N == 0) return grad_features.zero_();
  const GridShape shape = grid_shape(features);
  const int64_t cells = cell_count(shape);
  const auto stream = c10::cuda::getCurrentCUDAStream();

  dispatch_dtypes(features.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    using acc_t = acc_type<scalar_t>;
    const bool aligned =
        vec_aligned(max_vec<scalar_t>(), {shape.F}, {features.data_ptr(), grad_out.data_ptr()});
    dispatch_vec<scalar_t>(aligned, [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      const int64_t vectors = shape.F / V, items = features.numel() / V;
      const bool small =
          fits_int32(std::max({items, N * vectors, cells + 1}),
                     {cells + 1, N, features.numel(), grad_out.numel(), points.numel()});
      dispatch_index(small, [&](auto index) {
        using index_t = typename decltype(index)::type;
        const auto options = points.options().dtype(index_dtype<index_t>());
        at::Tensor keys = at::empty({N}, options), order = at::empty({N}, options);
        at::Tensor sorted_keys = at::empty({N}, options), sorted = at::empty({N}, options);
        cell_keys_kernel<acc_t, point_t, index_t><<<one_pass_blocks(N), kThreads, 0, stream>>>(
            points.data_ptr<point_t>(), keys.data_ptr<index_t>(), order.data_ptr<index_t>(), shape,
            index_t(N), index_t(cells), mode);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        // Radix sort is stable: inside a cell the points keep their index order, so the sums
        // below always add in the same order.
        sort_pairs<index_t>(keys, sorted_keys, order, sorted, key_bits(cells), stream);
        at::Tensor start = at::empty({cells + 1}, options);
        cell_starts_kernel<index_t><<<one_pass_blocks(cells + 1), kThreads, 0, stream>>>(
            sorted_keys.data_ptr<index_t>(), start.data_ptr<index_t>(), index_t(N), index_t(cells));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        at::Tensor frac = at::empty({N, int64_t(4 * sizeof(acc_t))}, options.dtype(at::kByte));
        at::Tensor sorted_grad = at::empty_like(grad_out);  // [N, F]
        auto* frac_ptr = reinterpret_cast<Vec<acc_t, 4>*>(frac.data_ptr());
        pack_sorted_kernel<scalar_t, point_t, index_t, V>
            <<<one_pass_blocks(N * vectors), kThreads, 0, stream>>>(
                grad_out.data_ptr<scalar_t>(), points.data_ptr<point_t>(),
                sorted.data_ptr<index_t>(), frac_ptr, sorted_grad.data_ptr<scalar_t>(), shape,
                index_t(N * vectors), mode);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        gather_grad_kernel<scalar_t, index_t, V><<<one_pass_blocks(items), kThreads, 0, stream>>>(
            frac_ptr, sorted_grad.data_ptr<scalar_t>(), start.data_ptr<index_t>(),
            grad_features.data_ptr<scalar_t>(), shape, index_t(items));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  });
  return grad_features;
}

}  // namespace grid
