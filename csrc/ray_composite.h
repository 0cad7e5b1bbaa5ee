// Per-ray math of front-to-back compositing over packed samples (grid::composite_rays,
// grid::composite_rays_backward and grid::ray_weights): csrc/cpu/composite_rays.cpp runs one ray
// per thread through these functions; csrc/cuda/composite_rays.cu computes the same with one
// warp per ray (ray_segment, exp_, expm1_, write_ray_outputs and dloss_dweight are shared with
// it). Host and device.
//
// Ray r owns the samples [offsets[r], offsets[r + 1]) of the packed list, front to back. Sample i
// has optical thickness tau_i (density times the length of its step), opacity
// alpha_i = 1 - exp(-tau_i) and weight
//     w_i = alpha_i T_i,   T_i = prod_{j < i} exp(-tau_j)   (the transmittance in front of it).
// The ray's opacity is acc = sum w_i, its depth sum w_i t_i, its colour
//     rgb = sum w_i c_i + (1 - acc) background.
//
// Backward, for a loss with g_i = dL/dw_i (from the gradients of rgb, depth and acc):
//     dL/dtau_i = T_{i+1} g_i - sum_{k > i} w_k g_k
// (dw_i/dtau_i = exp(-tau_i) T_i = T_{i+1}; dw_k/dtau_i = -w_k for k > i), computed in two
// forward passes over the ray: the total sum_k w_k g_k, then each suffix as the total minus the
// running prefix. No division, so opaque samples (alpha = 1) are safe.
#pragma once

#include <cmath>
#include <cstdint>

#include "trilinear_math.h"  // GRID_HD, acc_type

namespace grid {

GRID_HD float exp_(float x) {
  return expf(x);
}
GRID_HD double exp_(double x) {
  return ::exp(x);
}
GRID_HD float expm1_(float x) {
  return expm1f(x);
}
GRID_HD double expm1_(double x) {
  return ::expm1(x);
}

// A ray's samples: [begin, end), offsets clamped into [0, S] (never an access out of bounds).
GRID_HD void ray_segment(const int64_t* offsets, int64_t r, int64_t S, int64_t& begin,
                         int64_t& end) {
  begin = offsets[r];
  end = offsets[r + 1];
  begin = begin < 0 ? 0 : (begin > S ? S : begin);
  end = end < begin ? begin : (end > S ? S : end);
}

// The packed inputs of the compositing ops (contiguous), the outputs they write and the
// incoming gradients of the backward. C: channels of the colours.
template <typename scalar_t>
struct CompositeArgs {
  const scalar_t* tau;         // [S]
  const scalar_t* colors;      // [S, C]
  const scalar_t* t;           // [S]
  const int64_t* offsets;      // [R + 1]
  const scalar_t* background;  // row r at background + r * bg_stride, C values; or nullptr
  int64_t bg_stride;           // 0 for one [C] background shared by every ray
  int64_t S, C;
};

// Ray r's outputs from its sums over channels [c0, c0 + kChunk) (those below C): rgb =
// col + (1 - acc) background, and with c0 == 0 its depth and opacity.
template <typename scalar_t, typename acc_t, int kChunk>
GRID_HD void write_ray_outputs(const CompositeArgs<scalar_t>& a, int64_t r, int64_t c0,
                               const acc_t (&col)[kChunk], acc_t acc, acc_t dep, scalar_t* rgb,
                               scalar_t* depth, scalar_t* acc_out) {
  const scalar_t* bg = a.background ? a.background + r * a.bg_stride + c0 : nullptr;
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    if (c0 + k >= a.C) break;
    const acc_t b = bg ? static_cast<acc_t>(bg[k]) : acc_t(0);
    rgb[r * a.C + c0 + k] = static_cast<scalar_t>(col[k] + (1 - acc) * b);
  }
  if (c0 == 0) {
    depth[r] = static_cast<scalar_t>(dep);
    acc_out[r] = static_cast<scalar_t>(acc);
  }
}

// Forward of ray r: rgb [C] (row r), depth and acc.
template <typename scalar_t>
GRID_HD void composite_ray(const CompositeArgs<scalar_t>& a, int64_t r, scalar_t* rgb,
                           scalar_t* depth, scalar_t* acc_out) {
  using acc_t = acc_type<scalar_t>;
  constexpr int kChunk = 4;  // channels per pass, kept in registers
  int64_t begin, end;
  ray_segment(a.offsets, r, a.S, begin, end);
  for (int64_t c0 = 0; c0 < a.C; c0 += kChunk) {
    acc_t T = 1, acc = 0, dep = 0, col[kChunk] = {0, 0, 0, 0};
    for (int64_t i = begin; i < end; ++i) {
      const acc_t tau = static_cast<acc_t>(a.tau[i]);
      const acc_t w = -expm1_(-tau) * T;
      const scalar_t* c = a.colors + i * a.C + c0;
#pragma unroll
      for (int k = 0; k < kChunk; ++k)
        if (c0 + k < a.C) col[k] += w * static_cast<acc_t>(c[k]);
      acc += w;
      if (c0 == 0) dep += w * static_cast<acc_t>(a.t[i]);
      T *= exp_(-tau);
    }
    write_ray_outputs(a, r, c0, col, acc, dep, rgb, depth, acc_out);
  }
}

// Weights of ray r's samples: weights[i] = w_i.
template <typename scalar_t>
GRID_HD void ray_weights_of(const scalar_t* tau, const int64_t* offsets, int64_t S, int64_t r,
                            scalar_t* weights) {
  using acc_t = acc_type<scalar_t>;
  int64_t begin, end;
  ray_segment(offsets, r, S, begin, end);
  acc_t T = 1;
  for (int64_t i = begin; i < end; ++i) {
    const acc_t x = static_cast<acc_t>(tau[i]);
    weights[i] = static_cast<scalar_t>(-expm1_(-x) * T);
    T *= exp_(-x);
  }
}

// The incoming gradients of the rays' outputs.
template <typename scalar_t>
struct CompositeGrads {
  const scalar_t* rgb;    // [R, C]
  const scalar_t* depth;  // [R]
  const scalar_t* acc;    // [R]
};

// dL/dw_i of sample i of ray r: <grad rgb, c_i - background> + grad depth * t_i + grad acc.
template <typename scalar_t, typename acc_t = acc_type<scalar_t>>
GRID_HD acc_t dloss_dweight(const CompositeArgs<scalar_t>& a, const CompositeGrads<scalar_t>& g,
                            int64_t r, int64_t i) {
  const scalar_t* g_rgb = g.rgb + r * a.C;
  const scalar_t* bg = a.background ? a.background + r * a.bg_stride : nullptr;
  const scalar_t* c = a.colors + i * a.C;
  acc_t s =
      static_cast<acc_t>(g.acc[r]) + static_cast<acc_t>(g.depth[r]) * static_cast<acc_t>(a.t[i]);
  for (int64_t k = 0; k < a.C; ++k) {
    const acc_t b = bg ? static_cast<acc_t>(bg[k]) : acc_t(0);
    s += static_cast<acc_t>(g_rgb[k]) * (static_cast<acc_t>(c[k]) - b);
  }
  return s;
}

// Backward of ray r: grad_tau [S], grad_colors [S, C], grad_t [S] over its samples (each may be
// nullptr: not asked for). Samples outside every ray are left alone (the caller zeroes them).
template <typename scalar_t>
GRID_HD void composite_ray_backward(const CompositeArgs<scalar_t>& a,
                                    const CompositeGrads<scalar_t>& g, int64_t r,
                                    scalar_t* grad_tau, scalar_t* grad_colors, scalar_t* grad_t) {
  using acc_t = acc_type<scalar_t>;
  int64_t begin, end;
  ray_segment(a.offsets, r, a.S, begin, end);
  const scalar_t* g_rgb = g.rgb + r * a.C;
  const acc_t g_depth = static_cast<acc_t>(g.depth[r]);
  acc_t total = 0;
  if (grad_tau != nullptr) {  // dL/dw matters for the thickness only
    acc_t T = 1;
    for (int64_t i = begin; i < end; ++i) {
      const acc_t x = static_cast<acc_t>(a.tau[i]);
      total += -expm1_(-x) * T * dloss_dweight(a, g, r, i);
      T *= exp_(-x);
    }
  }
  acc_t T = 1, prefix = 0;
  for (int64_t i = begin; i < end; ++i) {
    const acc_t x = static_cast<acc_t>(a.tau[i]);
    const acc_t w = -expm1_(-x) * T, T_next = T * exp_(-x);
    if (grad_tau != nullptr) {
      const acc_t gw = dloss_dweight(a, g, r, i);
      prefix += w * gw;
      grad_tau[i] = static_cast<scalar_t>(T_next * gw - (total - prefix));
    }
    if (grad_colors != nullptr)
      for (int64_t k = 0; k < a.C; ++k)
        grad_colors[i * a.C + k] = static_cast<scalar_t>(w * static_cast<acc_t>(g_rgb[k]));
    if (grad_t != nullptr) grad_t[i] = static_cast<scalar_t>(w * g_depth);
    T = T_next;
  }
}

}  // namespace grid
