// grid::sample kernels for float32 grids of F <= 4 channels (density, SDF, RGB grids): one
// thread per point handles all F channels of the eight corners with scalar loads, where the
// general kernels give a point one thread per channel that each locate the cell again.
// The backward sums the contributions of consecutive points that share a voxel inside the warp
// (corner_runs.cuh), then scatters each z-pair of corners -- 2F contiguous floats in the
// channels-last grid -- with aligned 16-byte vector atomics, zero-padded where the pair does not
// fill them: for F = 1, 4.98 atomics per point on S5's rays without the run sums (8 corners),
// 2.86 with them (counted on the CPU). sample_forward.cu takes the forward for F = 3 (and strided
// F = 2, 4), sample_backward.cu the backward for F = 1 and 3: the choices
// bench/probes/small_f_probe.py measured (bench/NOTES.md). The probe times the other variants too.
#pragma once

#include "corner_runs.cuh"
#include "cuda_utils.cuh"

namespace grid {

// Points per thread of the library's small-F forward (2 measured 3-14% slower on S5).
constexpr int kSmallFPointsPerThread = 1;

// x[r] for a run-time r in [0, FC), without moving x to local memory.
template <int FC>
__device__ __forceinline__ float pick(const float (&x)[FC], int r) {
  float v = x[0];
#pragma unroll
  for (int c = 1; c < FC; ++c) v = r == c ? x[c] : v;
  return v;
}

// kPer points per thread: point j of a block's thread t is (block * kPer + j) * 256 + t, so
// each of the kPer rounds of loads is coalesced across the warp.
template <int FC, int kPer, typename index_t>
__global__ void __launch_bounds__(kThreads) sample_forward_small_f_kernel(
    const float* __restrict__ features,  // [X, Y, Z, FC], channel stride 1
    const float* __restrict__ points,    // [N, 3]
    float* __restrict__ out,             // [N, FC]
    GridShape shape, index_t N, Sampling mode) {
  const index_t sx = shape.stride[0], sy = shape.stride[1], sz = shape.stride[2];
  Cell<float, index_t> cell[kPer];
  index_t n[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    n[j] = (blockIdx.x * index_t(kPer) + j) * kThreads + threadIdx.x;
    cell[j] = locate_cell<float, index_t>(points + 3 * (n[j] < N ? n[j] : 0), shape, mode);
  }
  float f[kPer][8][FC];  // every load in flight before the first use
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const float* base = features + cell[j].offset(0, sx, sy, sz);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const bool in = n[j] < N && cell[j].valid(k);
      const float* p = base + corner_dx(k) * sx + corner_dy(k) * sy + corner_dz(k) * sz;
#pragma unroll
      for (int c = 0; c < FC; ++c) f[j][k][c] = in ? p[c] : 0.f;
    }
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (n[j] >= N) continue;
    float acc[FC] = {};
#pragma unroll
    for (int k = 0; k < 8; ++k)
#pragma unroll
      for (int c = 0; c < FC; ++c) acc[c] += cell[j].weight[k] * f[j][k][c];
#pragma unroll
    for (int c = 0; c < FC; ++c) out[n[j] * FC + c] = acc[c];
  }
}

// Adds a0 to voxel row [pair, pair + FC) (when in0) and a1 to [pair + FC, pair + 2FC) (when in1)
// with 16-byte atomics on the aligned float4s covering them. Needs a 16-byte aligned grid whose
// element count is a multiple of 4, so no float4 leaves it; the padding lanes add 0 to
// neighbouring values.
template <int FC, typename index_t>
__device__ __forceinline__ void scatter_z_pair(float* grad, index_t pair, bool in0, bool in1,
                                               const float (&a0)[FC], const float (&a1)[FC]) {
  const index_t a = pair + (in0 ? 0 : FC), b = pair + (in1 ? 2 * FC : FC);
#pragma unroll 1
  for (index_t s = a & ~index_t(3); s < b; s += 4) {
    float add[4];
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int r = static_cast<int>(s + l - pair);  // position in the pair, -3 .. 2FC + 2
      const bool low = r >= 0 && r < FC && in0, high = r >= FC && r < 2 * FC && in1;
      add[l] = low ? pick(a0, r) : high ? pick(a1, r - FC) : 0.f;
    }
    atomicAdd(reinterpret_cast<float4*>(grad + s), make_float4(add[0], add[1], add[2], add[3]));
  }
}

// One thread per point. With kRuns the feature gradient is summed over runs of consecutive points
// that share a voxel first (corner_runs.cuh; the library's choice, bench/probes/small_f_probe.py
// times both), then added with z-pair float4 atomics (kVector: contiguous, aligned grid, see
// scatter_z_pair), else one scalar atomic per corner and channel. Lanes past N stay for the
// warp's shuffles and touch nothing.
template <int FC, bool kVector, bool kFeatures, bool kPoints, bool kRuns, typename index_t>
__global__ void __launch_bounds__(kThreads) sample_backward_small_f_kernel(
    const float* __restrict__ grad_out,  // [N, FC]
    const float* __restrict__ features,  // [X, Y, Z, FC] contiguous (read for kPoints)
    const float* __restrict__ points,    // [N, 3]
    float* __restrict__ grad_features,   // [X, Y, Z, FC] contiguous (kFeatures)
    float* __restrict__ grad_points,     // [N, 3] (kPoints)
    GridShape shape, index_t N, Sampling mode) {
  const index_t n = blockIdx.x * index_t(kThreads) + threadIdx.x;
  const bool active = n < N;
  const index_t sx = shape.stride[0], sy = shape.stride[1], sz = shape.stride[2];
  Cell<float, index_t> cell =
      locate_cell<float, index_t>(points + 3 * (active ? n : 0), shape, mode);
  if (!active) cell.inside = 0;
  float g[FC];
#pragma unroll
  for (int c = 0; c < FC; ++c) g[c] = active ? grad_out[n * FC + c] : 0.f;
  const float u = cell.axis[0].frac, v = cell.axis[1].frac, w = cell.axis[2].frac;
  const float wx[2] = {1 - u, u}, wy[2] = {1 - v, v}, wz[2] = {1 - w, w};
  const index_t base = cell.offset(0, sx, sy, sz);
  if constexpr (kPoints) {
    float f[8][FC];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float* p = features + base + corner_dx(k) * sx + corner_dy(k) * sy + corner_dz(k) * sz;
#pragma unroll
      for (int c = 0; c < FC; ++c) f[k][c] = cell.valid(k) ? p[c] : 0.f;
    }
    float grad[3] = {0, 0, 0};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float dot = 0, dweight[3];
#pragma unroll
      for (int c = 0; c < FC; ++c) dot += g[c] * f[k][c];
      corner_weight_grad(k, wx, wy, wz, dweight);
#pragma unroll
      for (int a = 0; a < 3; ++a) grad[a] += dweight[a] * dot;
    }
    if (active) {
#pragma unroll
      for (int a = 0; a < 3; ++a) grad_points[3 * n + a] = grad[a] * cell.axis[a].dindex;
    }
  }
  if constexpr (kFeatures) {
    const index_t i0[3] = {cell.axis[0].i0, cell.axis[1].i0, cell.axis[2].i0};
    const float t[3] = {u, v, w};
    float acc[8][FC];  // [corner][channel]: this point's part, or its run's sum where it heads one
    const unsigned write = sum_corner_runs<8, kRuns>(i0, t, cell.inside, g, 0, 1, acc);
    if (!write) return;
#pragma unroll
    for (int dxy = 0; dxy < 4; ++dxy) {
      const int k = 2 * dxy;  // corner (dx, dy, 0); k + 1 is its z-neighbour
      const bool in0 = (write >> k) & 1u, in1 = (write >> (k + 1)) & 1u;
      if (!in0 && !in1) continue;
      const index_t pair = base + corner_dx(k) * sx + corner_dy(k) * sy;
      if constexpr (kVector) {
        scatter_z_pair<FC>(grad_features, pair, in0, in1, acc[k], acc[k + 1]);
      } else {
#pragma unroll
        for (int dz = 0; dz < 2; ++dz) {
          if (!(dz ? in1 : in0)) continue;
#pragma unroll
          for (int c = 0; c < FC; ++c)
            atomicAdd(grad_features + pair + dz * sz + c, acc[k + dz][c]);
        }
      }
    }
  }
}

// Calls fn(std::integral_constant<int, F>) for F in 1..4.
template <typename Fn>
void dispatch_small_f(int64_t F, Fn&& fn) {
  switch (F) {
    case 1:
      return fn(std::integral_constant<int, 1>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    case 3:
      return fn(std::integral_constant<int, 3>{});
    default:
      return fn(std::integral_constant<int, 4>{});
  }
}

}  // namespace grid
