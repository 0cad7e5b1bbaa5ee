// Shared per-ray math of the fixed-step ray marcher (grid::march_rays_count and
// grid::march_rays_fill, csrc/cpu/march_rays.cpp and csrc/cuda/march_rays.cu). Host and device.
//
// A ray o + t d meets the box [lo, hi] for t_near < t < t_far (the slab test), t_near cut at
// `near`. It gets n = min(ceil((t_far - t_near) / step), max_steps) step positions
//     t_j = t_near + (j + jitter) * step,   p_j = o + d t_j,   j = 0 .. n - 1,
// and keeps those whose nearest occupancy voxel is set. A ray with a non-finite origin or
// direction, an all-zero direction, or a step that is not a positive finite number gets none.
//
// Every product, sum and quotient is rounded on its own (no fused multiply-add), so that the
// samples are bitwise those of the same formulas written with PyTorch ops
// (grid.reference.march_rays_static), on the CPU and on the GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "trilinear_math.h"  // GRID_HD

namespace grid {

GRID_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
GRID_HD double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
GRID_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GRID_HD double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
GRID_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
GRID_HD double sub_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
GRID_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
GRID_HD double div_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
GRID_HD float round_even(float x) {  // half to even, as torch.round
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}
GRID_HD double round_even(double x) {
#if defined(__CUDA_ARCH__)
  return rint(x);
#else
  return std::nearbyint(x);
#endif
}
GRID_HD float ceil_(float x) {
  return ceilf(x);
}
GRID_HD double ceil_(double x) {
  return ::ceil(x);
}
template <typename T>
GRID_HD bool finite_(T x) {
  return x - x == T(0);  // false for inf and NaN
}

// The occupancy grid a marcher consults: flags [X, Y, Z] bool (contiguous) over the box
// [lo, hi]; a point reads the flag of its nearest voxel (align_corners=True), clamped to the
// grid. flags == nullptr: every point is occupied.
template <typename T>
struct Occupancy {
  const bool* flags;
  int64_t size[3];
  T lo[3], extent[3];  // extent = hi - lo, rounded as PyTorch computes it

  GRID_HD bool occupied(const T (&p)[3]) const {
    if (flags == nullptr) return true;
    int64_t index[3];
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      const T last = T(size[a] - 1);
      T i = round_even(mul_rn(div_rn(sub_rn(p[a], lo[a]), extent[a]), last));
      i = i > T(0) ? i : T(0);  // NaN -> 0
      i = i < last ? i : last;
      index[a] = static_cast<int64_t>(i);
    }
    return flags[(index[0] * size[1] + index[1]) * size[2] + index[2]];
  }
};

// One ray's marching: where it starts, its step, and how many step positions it has.
template <typename T>
struct RayMarch {
  T o[3], d[3];
  T t_near, step, jitter;
  int64_t steps;

  // Sample j's distance and position.
  GRID_HD T t_at(int64_t j) const { return add_rn(t_near, mul_rn(add_rn(T(j), jitter), step)); }
  GRID_HD void point_at(T t, T (&p)[3]) const {
#pragma unroll
    for (int a = 0; a < 3; ++a) p[a] = add_rn(o[a], mul_rn(d[a], t));
  }
};

// origin, direction: the ray's 3 values; box: lo (3 values), hi (3 values).
template <typename T>
GRID_HD RayMarch<T> ray_march(const T* origin, const T* direction, const T* lo, const T* hi, T near,
                              T step, T jitter, int64_t max_steps) {
  RayMarch<T> r;
  bool ok = finite_(step) && step > T(0), moving = false;
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    r.o[a] = origin[a];
    r.d[a] = direction[a];
    ok = ok && finite_(r.o[a]) && finite_(r.d[a]);
    moving = moving || r.d[a] != T(0);
  }
  r.step = step;
  r.jitter = jitter;
  r.t_near = T(0);
  r.steps = 0;
  if (!ok || !moving) return r;
  T t_near = T(0), t_far = T(0);
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    // 1e-10 stands in for a zero component (as grid.ray_aabb): a huge finite slope.
    const T inv = div_rn(T(1), r.d[a] != T(0) ? r.d[a] : T(1e-10));
    const T t0 = mul_rn(sub_rn(lo[a], r.o[a]), inv), t1 = mul_rn(sub_rn(hi[a], r.o[a]), inv);
    const T entry = t0 < t1 ? t0 : t1, exit = t0 < t1 ? t1 : t0;
    t_near = a == 0 || entry > t_near ? entry : t_near;
    t_far = a == 0 || exit < t_far ? exit : t_far;
  }
  t_near = t_near < near ? near : t_near;
  const T n = ceil_(div_rn(sub_rn(t_far, t_near), step));
  r.t_near = t_near;
  if (finite_(n) && n > T(0)) r.steps = n < T(max_steps) ? static_cast<int64_t>(n) : max_steps;
  return r;
}

}  // namespace grid
