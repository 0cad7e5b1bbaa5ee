// CUDA gradient of grid::sample with respect to the features, without atomics: used under
// torch.use_deterministic_algorithms(True). The result is bitwise the same from run to run,
// for any N and dtype, and does not depend on how the GPU schedules threads:
//   1. key[n]: the cell of point n (its low corner, -1..size-1 per axis), or `cells` (a
//      sentinel sorted last) for a point that touches no voxel;
//   2. a stable radix sort of (key, n) (cub, only the key bits in use): point indices grouped
//      by cell, ascending inside a cell;
//   3. one pass over the sorted points copies each point's cell fractions and grad_out row into
//      sorted order (so the sums below read runs, not through the index) and marks where each
//      cell's run begins and ends (range[c], zeroed first: an empty cell reads [0, 0));
//   4. one thread per (x, y column, chunk of kChunk voxels along z, vector of V channels) walks
//      up its chunk. Voxel z is corner dz = 1 of the four cells (x - dx, y - dy, z - 1) and
//      corner dz = 0 of the four cells (x - dx, y - dy, z); each cell's points are read once
//      for both of their voxels in the column (z and z + 1), where a thread per voxel read
//      every point twice. The sum of voxel z is, in this order and in float32 (float64 for
//      float64): the cells below in dx, dy order, then the cells at z in dx, dy order, each
//      cell's points in index order. A chunk's first voxel walks its cells below again, in
//      the same order, so the result does not depend on the chunk length. Each voxel is
//      written once: no zeroing pass and no atomics.
// Scratch buffers and the result are written in full, so they are allocated without the fill
// that deterministic mode gives at::empty (unfilled_cuda).
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
  const Cell<acc_t, index_t> cell = locate_cell<acc_t, index_t>(points + 3 * n, shape, mode);
  const index_t Y1 = shape.size[1] + 1, Z1 = shape.size[2] + 1;
  keys[n] = cell.any ? ((cell.axis[0].i0 + 1) * Y1 + cell.axis[1].i0 + 1) * Z1 + cell.axis[2].i0 + 1
                     : cells;
}

// Sorted position p: the point's cell fractions (u, v, w) and its grad_out row, and the edges of
// its cell's run in range[cell] (begin, end). One thread per (position, vector of V
// channels); the first of a position's threads writes the fractions and the edges.
template <typename scalar_t, typename point_t, typename index_t, int V>
__global__ void pack_sorted_kernel(const scalar_t* __restrict__ grad_out,          // [N, F]
                                   const point_t* __restrict__ points,             // [N, 3]
                                   const index_t* __restrict__ order,              // [N]
                                   const index_t* __restrict__ sorted_keys,        // [N]
                                   Vec<acc_type<scalar_t>, 4>* __restrict__ frac,  // [N]
                                   scalar_t* __restrict__ sorted_grad,             // [N, F]
                                   Vec<index_t, 2>* __restrict__ range,            // [cells]
                                   GridShape shape, index_t N, index_t cells, index_t items,
                                   Sampling mode) {
  using acc_t = acc_type<scalar_t>;
  const index_t i = blockIdx.x * index_t(blockDim.x) + threadIdx.x;
  if (i >= items) return;
  const index_t vectors = shape.F / V;
  const index_t c = i % vectors, p = i / vectors, n = order[p];
  store_vec<scalar_t, V>(sorted_grad + p * shape.F + c * V,
                         load_vec<scalar_t, V>(grad_out + n * shape.F + c * V));
  if (c != 0) return;
  const index_t key = sorted_keys[p];
  if (key >= cells) return;  // touches no voxel: read by no one
  const Cell<acc_t, index_t> cell = locate_cell<acc_t, index_t>(points + 3 * n, shape, mode);
  frac[p] = {{cell.axis[0].frac, cell.axis[1].frac, cell.axis[2].frac, acc_t(0)}};
  if (p == 0 || sorted_keys[p - 1] != key) range[key].v[0] = p;
  if (p == N - 1 || sorted_keys[p + 1] != key) range[key].v[1] = p + 1;
}

// Voxels along z per thread of the column walk: a chunk's first voxel reads its cells below
// again, 1 / kChunk more point visits; longer chunks leave fewer threads (S5: 160 x 160 columns
// x 20 chunks = 512K threads for F = 1).
constexpr int kChunk = 8;

// The points of one cell (sorted positions [begin, end)) added to the two voxels of the column
// above each other that the cell has as corners (dx, dy, 0) and (dx, dy, 1): low += w0 g and
// high += w1 g, with w0, w1 the weights the atomic kernel uses (wx[dx] * wy[dy] * wz[dz]).
// kLow: whether the low voxel is wanted (a chunk's first cells below only feed its first voxel).
template <bool kLow, typename scalar_t, typename index_t, int V>
__device__ __forceinline__ void add_cell(acc_type<scalar_t> (&low)[V],
                                         acc_type<scalar_t> (&high)[V], int dx, int dy,
                                         Vec<index_t, 2> run,
                                         const Vec<acc_type<scalar_t>, 4>* __restrict__ frac,
                                         const scalar_t* __restrict__ sorted_grad, index_t F,
                                         index_t c) {
  using acc_t = acc_type<scalar_t>;
#pragma unroll 1
  for (index_t p = run.v[0]; p < run.v[1]; ++p) {
    const Vec<acc_t, 4> f = frac[p];
    const acc_t wxy = (dx ? f.v[0] : 1 - f.v[0]) * (dy ? f.v[1] : 1 - f.v[1]);
    const acc_t w0 = wxy * (1 - f.v[2]), w1 = wxy * f.v[2];
    acc_t g[V];
    widen<scalar_t, V>(load_raw<scalar_t, V>(sorted_grad + p * F + c * V), g);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if constexpr (kLow) low[v] += w0 * g[v];
      high[v] += w1 * g[v];
    }
  }
}

// One thread per (column x, y; chunk of kChunk voxels along z; vector of V channels), vectors
// of a chunk on adjacent threads, then chunks, then columns.
template <typename scalar_t, typename index_t, int V>
__global__ void __launch_bounds__(kThreads)
    column_walk_kernel(const Vec<acc_type<scalar_t>, 4>* __restrict__ frac,  // [N] sorted
                       const scalar_t* __restrict__ sorted_grad,             // [N, F] sorted
                       const Vec<index_t, 2>* __restrict__ range,            // [cells]
                       scalar_t* __restrict__ grad_features,  // [X, Y, Z, F] contiguous
                       GridShape shape, index_t chunks, index_t items) {
  using acc_t = acc_type<scalar_t>;
  const index_t i = blockIdx.x * index_t(blockDim.x) + threadIdx.x;
  if (i >= items) return;
  const index_t F = shape.F, vectors = F / V;
  const index_t Y = shape.size[1], Z = shape.size[2];
  const index_t c = i % vectors, chunk = (i / vectors) % chunks, column = i / vectors / chunks;
  const index_t y = column % Y, x = column / Y;
  const index_t z0 = chunk * kChunk, z1 = z0 + kChunk < Z ? z0 + kChunk : Z;
  // key[2 dx + dy]: cell (x - dx, y - dy, z0 - 1); the cell at height z has key + z - z0 + 1.
  index_t key[4];
#pragma unroll
  for (int dxy = 0; dxy < 4; ++dxy)
    key[dxy] = ((x - (dxy >> 1) + 1) * (Y + 1) + y - (dxy & 1) + 1) * (Z + 1) + z0;
  Vec<index_t, 2> run[4];  // the four cells' runs, loaded together
#pragma unroll
  for (int dxy = 0; dxy < 4; ++dxy) run[dxy] = range[key[dxy]];
  acc_t carry[V] = {};  // voxel z's sum over the cells below it
#pragma unroll
  for (int dxy = 0; dxy < 4; ++dxy)
    add_cell<false, scalar_t>(carry, carry, dxy >> 1, dxy & 1, run[dxy], frac, sorted_grad, F, c);
#pragma unroll 1
  for (index_t z = z0; z < z1; ++z) {
#pragma unroll
    for (int dxy = 0; dxy < 4; ++dxy) run[dxy] = range[key[dxy] + (z - z0 + 1)];
    acc_t next[V] = {};  // voxel z + 1's sum over the cells at z
#pragma unroll
    for (int dxy = 0; dxy < 4; ++dxy)
      add_cell<true, scalar_t>(carry, next, dxy >> 1, dxy & 1, run[dxy], frac, sorted_grad, F, c);
    Vec<scalar_t, V> o;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      o.v[v] = static_cast<scalar_t>(carry[v]);
      carry[v] = next[v];
    }
    store_vec<scalar_t, V>(grad_features + ((x * Y + y) * Z + z) * F + c * V, o);
  }
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
  at::Tensor temp =
      unfilled_cuda({static_cast<int64_t>(temp_bytes)}, keys.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      temp.data_ptr(), temp_bytes, keys.data_ptr<index_t>(), sorted_keys.data_ptr<index_t>(),
      values.data_ptr<index_t>(), sorted_values.data_ptr<index_t>(), n, 0, bits, stream));
}

}  // namespace

at::Tensor sample_grad_features_deterministic(const at::Tensor& grad_out,  // [N, F] contiguous
                                              const at::Tensor& features,  // [X, Y, Z, F] contig.
                                              const at::Tensor& points,    // [N, 3] contiguous
                                              Sampling mode) {
  // [X, Y, Z, F] contiguous; every element is written below
  at::Tensor grad_features = unfilled_cuda(features.sizes(), features.options());
  const int64_t N = points.size(0);
  if (grad_features.numel() == 0) return grad_features;
  if (N == 0) return grad_features.zero_();
  const GridShape shape = grid_shape(features);
  const int64_t cells = cell_count(shape);
  const int64_t chunks = (shape.size[2] + kChunk - 1) / kChunk;
  const auto stream = c10::cuda::getCurrentCUDAStream();

  dispatch_dtypes(features.scalar_type(), points.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    using acc_t = acc_type<scalar_t>;
    const bool aligned =
        vec_aligned(max_vec<scalar_t>(), {shape.F}, {features.data_ptr(), grad_out.data_ptr()});
    dispatch_vec<scalar_t>(aligned, [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      const int64_t vectors = shape.F / V;
      const int64_t walkers = shape.size[0] * shape.size[1] * chunks * vectors;
      const bool small =
          fits_int32(std::max({walkers, N * vectors, cells}),
                     {2 * cells, N, features.numel(), grad_out.numel(), points.numel()});
      dispatch_index(small, [&](auto index) {
        using index_t = typename decltype(index)::type;
        const auto options = points.options().dtype(index_dtype<index_t>());
        at::Tensor keys = unfilled_cuda({N}, options), order = unfilled_cuda({N}, options);
        at::Tensor sorted_keys = unfilled_cuda({N}, options), sorted = unfilled_cuda({N}, options);
        cell_keys_kernel<acc_t, point_t, index_t><<<one_pass_blocks(N), kThreads, 0, stream>>>(
            points.data_ptr<point_t>(), keys.data_ptr<index_t>(), order.data_ptr<index_t>(), shape,
            index_t(N), index_t(cells), mode);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        // Radix sort is stable: inside a cell the points keep their index order, so the sums
        // below always add in the same order.
        sort_pairs<index_t>(keys, sorted_keys, order, sorted, key_bits(cells), stream);
        at::Tensor range = unfilled_cuda({cells, 2}, options);  // [cells, 2]: begin, end
        C10_CUDA_CHECK(cudaMemsetAsync(range.data_ptr(), 0, range.nbytes(), stream));
        at::Tensor frac = unfilled_cuda({N, int64_t(4 * sizeof(acc_t))}, options.dtype(at::kByte));
        at::Tensor sorted_grad = unfilled_cuda(grad_out.sizes(), grad_out.options());  // [N, F]
        auto* frac_ptr = reinterpret_cast<Vec<acc_t, 4>*>(frac.data_ptr());
        auto* range_ptr = reinterpret_cast<Vec<index_t, 2>*>(range.data_ptr());
        pack_sorted_kernel<scalar_t, point_t, index_t, V>
            <<<one_pass_blocks(N * vectors), kThreads, 0, stream>>>(
                grad_out.data_ptr<scalar_t>(), points.data_ptr<point_t>(),
                sorted.data_ptr<index_t>(), sorted_keys.data_ptr<index_t>(), frac_ptr,
                sorted_grad.data_ptr<scalar_t>(), range_ptr, shape, index_t(N), index_t(cells),
                index_t(N * vectors), mode);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        column_walk_kernel<scalar_t, index_t, V><<<one_pass_blocks(walkers), kThreads, 0, stream>>>(
            frac_ptr, sorted_grad.data_ptr<scalar_t>(), range_ptr,
            grad_features.data_ptr<scalar_t>(), shape, index_t(chunks), index_t(walkers));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  });
  return grad_features;
}

}  // namespace grid
