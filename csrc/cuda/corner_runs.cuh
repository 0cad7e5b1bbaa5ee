// Warp-aggregated scatter for the CUDA backward of grid::sample: before the grid-gradient
// atomics, the contributions of consecutive points that share a voxel are summed inside the warp,
// and one lane per run of such points adds the sum.
//
// Why: the points of a ray come one after the other (a NeRF batch is ordered ray by ray), and
// neighbouring samples share cell corners. On S5's rays (R = 160, 192 samples per ray) a voxel
// is a corner of about two consecutive samples: 8 corner updates per point become 3.98 distinct
// voxels per warp of 32 points, and on S1's (R = 128, 256 samples) 2.67 (bench/NOTES.md).
//
// How: lane l holds point p, lane l + stride point p + 1 (stride = the threads per point, a power
// of two dividing 32). For each corner it scatters, a lane checks whether the previous point
// (lane l - stride) has the same voxel as an inside corner; if not, it heads a run and pulls the
// contributions of the next points while they still have the voxel (lanes l + stride, l +
// 2 stride, ...): their cell, fractions and grad_out row come over warp shuffles and the weight of
// the voxel at that point is computed here. A voxel that appears in two separate runs of a warp
// is written once per run, so every contribution lands exactly once whatever the points' order.
// Points in random order rarely share a voxel with their neighbour: one vote then skips the sums
// and the cost over plain atomics is four shuffles and the vote.
#pragma once

#include <type_traits>

#include "cuda_utils.cuh"

namespace grid {

constexpr unsigned kFullWarp = 0xffffffffu;

// Corner masks (bit k: corner k, see corner_dx) of the corners with offset 0 along x, y and z.
constexpr unsigned kLowX = 0x0fu, kLowY = 0x33u, kLowZ = 0x55u;

// The corners of `other` (a mask over a cell d cells before ours on one axis, d = ours - its)
// seen as corners of our cell: bit k is set when our corner k is the same voxel as one of
// `other`'s corners. `bit` is the corner-index step of the axis (4 x, 2 y, 1 z), `low` its
// offset-0 corners.
template <typename index_t>
__device__ __forceinline__ unsigned shift_corners(unsigned other, index_t d, int bit,
                                                  unsigned low) {
  if (d == 0) return other;
  if (d == 1) return (other >> bit) & low;              // our offset 0 is its offset 1
  if (d == -1) return (other << bit) & (0xffu & ~low);  // our offset 1 is its offset 0
  return 0u;
}

// Our corners that are inside corners of a point whose cell is d = ours - its away.
template <typename index_t>
__device__ __forceinline__ unsigned shared_corners(const index_t (&d)[3], unsigned other_inside) {
  unsigned m = shift_corners(other_inside, d[2], 1, kLowZ);
  m = shift_corners(m, d[1], 2, kLowY);
  return shift_corners(m, d[0], 4, kLowX);
}

// The slots a lane scatters: all eight corners (kSlots = 8: slot s is corner s) or the four of
// z side `side` (kSlots = 4: slot s is corner 2 s + side).
template <int kSlots>
__device__ __forceinline__ unsigned slot_corners(int side) {
  return kSlots == 8 ? 0xffu : side ? 0xaau : 0x55u;
}
template <int kSlots>
__device__ __forceinline__ int slot_corner(int s, int side) {
  return kSlots == 8 ? s : 2 * s + side;
}
// The slot's x and y offsets, known at compile time for an unrolled s (the z offset of a 4-slot
// lane is its run-time side).
template <int kSlots>
__device__ __forceinline__ int slot_dx(int s) {
  return kSlots == 8 ? corner_dx(s) : s >> 1;
}
template <int kSlots>
__device__ __forceinline__ int slot_dy(int s) {
  return kSlots == 8 ? corner_dy(s) : s & 1;
}

// Whether the general backward kernel sums runs: float accumulation, except rows of 8 half values
// with 64-bit offsets. Those and double grids spilled registers at the kernel's 80-register
// budget, so they keep plain atomics (one per corner and vector). So do scalar rows (V = 1, e.g.
// F = 3): with the run sums S5's F = 3 fw+bw fell from 2.85x to 1.95x grid_sample on an H100 (the
// shuffles cost more than the scalar atomics they save).
template <typename acc_t, typename index_t, int V>
constexpr bool kSumRuns =
    std::is_same_v<acc_t, float> && V >= 2 && (V <= 4 || sizeof(index_t) == 4);

// acc[s] (for this lane's slots, see slot_corners): the contribution weight * g of this lane's
// point to the slot's voxel, plus, where the point heads a run of consecutive points of the warp
// that all have the voxel as an inside corner, those of the rest of the run. Returns the corners
// (a mask, bit k = corner k) this lane must add to the grid: its inside corners that the
// previous point does not have. With kRuns, every lane of the warp must call it, and those past
// the last point (or with nothing to scatter) pass inside = 0; without, acc is the point's own
// part and the mask its inside corners (plain atomics).
//   i0: [3] the cell's low corner, t: [3] the blend weights of its high corners
//   (AxisCell::frac), inside: the corners inside the grid (Cell::inside), g: [V] grad_out values.
template <int kSlots, bool kRuns, int V, typename acc_t, typename index_t>
__device__ __forceinline__ unsigned sum_corner_runs(const index_t (&i0)[3], const acc_t (&t)[3],
                                                    unsigned inside, const acc_t (&g)[V], int side,
                                                    int stride, acc_t (&acc)[kSlots][V]) {
  const int lane = threadIdx.x & 31;
  const unsigned mine = inside & slot_corners<kSlots>(side);
  {
    const acc_t wx[2] = {1 - t[0], t[0]}, wy[2] = {1 - t[1], t[1]}, wz[2] = {1 - t[2], t[2]};
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const acc_t w = wx[slot_dx<kSlots>(s)] * wy[slot_dy<kSlots>(s)] *
                      (kSlots == 8 ? wz[corner_dz(s)]
                       : side      ? wz[1]
                                   : wz[0]);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[s][v] = w * g[v];
    }
  }
  if constexpr (!kRuns) return mine;
  index_t d[3];  // our cell minus the previous point's
#pragma unroll
  for (int a = 0; a < 3; ++a) d[a] = i0[a] - __shfl_up_sync(kFullWarp, i0[a], stride);
  const unsigned prev_inside = __shfl_up_sync(kFullWarp, inside, stride);
  const unsigned from_prev = lane >= stride ? shared_corners(d, prev_inside) & mine : 0u;
  if (!__any_sync(kFullWarp, from_prev)) return mine;  // no neighbours share: plain atomics
  const unsigned heads = mine & ~from_prev;
  unsigned alive = heads;  // runs that reach the point j / stride after ours
  for (int j = stride; j < 32 && __any_sync(kFullWarp, alive); j += stride) {
    acc_t u[3];
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      d[a] = i0[a] - __shfl_down_sync(kFullWarp, i0[a], j);
      u[a] = __shfl_down_sync(kFullWarp, t[a], j);
    }
    const unsigned other_inside = __shfl_down_sync(kFullWarp, inside, j);
    alive = lane + j < 32 ? shared_corners(d, other_inside) & alive : 0u;
    // The weight of our corner with offset o on an axis, at the other point: its corner o + d.
    acc_t f[3][2], w[kSlots];
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      f[a][0] = d[a] == 1 ? u[a] : 1 - u[a];
      f[a][1] = d[a] == 0 ? u[a] : 1 - u[a];
    }
#pragma unroll
    for (int s = 0; s < kSlots; ++s)
      w[s] = f[0][slot_dx<kSlots>(s)] * f[1][slot_dy<kSlots>(s)] *
             (kSlots == 8 ? f[2][corner_dz(s)]
              : side      ? f[2][1]
                          : f[2][0]);
    // The other point's grad_out one value at a time (every lane shuffles; a lane adds where its
    // run goes on): fewer live registers than the whole row.
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const acc_t og = __shfl_down_sync(kFullWarp, g[v], j);
#pragma unroll
      for (int s = 0; s < kSlots; ++s)
        if ((alive >> slot_corner<kSlots>(s, side)) & 1u) acc[s][v] += w[s] * og;
    }
  }
  return heads;
}

}  // namespace grid
