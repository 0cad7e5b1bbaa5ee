// Shared inline math of the trilinear operators: corner weights, their derivatives, and how a
// normalised point maps onto a grid cell (F.grid_sample's rules). Host and device.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GRID_HD __host__ __device__ __forceinline__
#elif defined(__GNUC__)
// Forced on the host too: GCC at -O3 kept locate_axis, locate_cell and
// corner_weights_and_moves as calls (a struct returned through memory per axis), and the
// CPU double backward's feature gradient took 3.5 ms instead of 2.9 (F = 1, 128^3, 49152
// points, one core: bench/notes/sdf.md, 2026-11-28).
#define GRID_HD inline __attribute__((always_inline))
#else
#define GRID_HD inline
#endif

namespace grid {

// Accumulation type: double for double storage, float otherwise (float16 / bfloat16 too).
template <typename T>
struct AccType {
  using type = float;
};
template <>
struct AccType<double> {
  using type = double;
};
template <typename T>
using acc_type = typename AccType<T>::type;

GRID_HD float floor_(float x) {
  return floorf(x);
}
GRID_HD double floor_(double x) {
  return ::floor(x);
}

// Corner k of a cell sits at (dx, dy, dz) = ((k >> 2) & 1, (k >> 1) & 1, k & 1).
GRID_HD int corner_dx(int k) {
  return (k >> 2) & 1;
}
GRID_HD int corner_dy(int k) {
  return (k >> 1) & 1;
}
GRID_HD int corner_dz(int k) {
  return k & 1;
}

// Weights of the 8 corners for a position (u, v, w) in [0, 1]^3 inside the cell.
template <typename acc_t>
GRID_HD void corner_weights(acc_t u, acc_t v, acc_t w, acc_t (&weight)[8]) {
  const acc_t wx[2] = {1 - u, u}, wy[2] = {1 - v, v}, wz[2] = {1 - w, w};
#pragma unroll
  for (int k = 0; k < 8; ++k) weight[k] = wx[corner_dx(k)] * wy[corner_dy(k)] * wz[corner_dz(k)];
}

// d weight[k] / d(u, v, w) of corner k, from the per-axis weights wx = {1 - u, u}, wy, wz.
template <typename acc_t>
GRID_HD void corner_weight_grad(int k, const acc_t (&wx)[2], const acc_t (&wy)[2],
                                const acc_t (&wz)[2], acc_t (&grad)[3]) {
  const int dx = corner_dx(k), dy = corner_dy(k), dz = corner_dz(k);
  grad[0] = (dx ? acc_t(1) : acc_t(-1)) * wy[dy] * wz[dz];
  grad[1] = wx[dx] * (dy ? acc_t(1) : acc_t(-1)) * wz[dz];
  grad[2] = wx[dx] * wy[dy] * (dz ? acc_t(1) : acc_t(-1));
}

// d weight[k] / d(u, v, w) of all corners: grad[a][k] for axis a.
template <typename acc_t>
GRID_HD void corner_weight_grads(acc_t u, acc_t v, acc_t w, acc_t (&grad)[3][8]) {
  const acc_t wx[2] = {1 - u, u}, wy[2] = {1 - v, v}, wz[2] = {1 - w, w};
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    acc_t g[3];
    corner_weight_grad(k, wx, wy, wz, g);
    grad[0][k] = g[0], grad[1][k] = g[1], grad[2][k] = g[2];
  }
}

// A grid of [X, Y, Z, F] with element strides (sx, sy, sz, 1).
struct GridShape {
  int64_t size[3];
  int64_t stride[3];
  int64_t F;
};

// How points read the grid: F.grid_sample's align_corners and padding ("border" or "zeros"),
// the blend between the two corners of an axis (smooth: smoothstep, else linear), and
// optionally a world box (grid.sample's `bounds`): with `world`, a point is in world units and
// its normalised coordinate on axis a is fma(point[a], scale[a], shift[a]) (the box mapped onto
// [-1, 1]), so every derivative with respect to the point is one in world units. The float and
// double copies hold the same map, each computed in that precision (see check_sample_args).
struct Sampling {
  bool align_corners;
  bool border;
  bool smooth;
  bool world = false;
  float scale_f[3] = {1, 1, 1};
  float shift_f[3] = {0, 0, 0};
  double scale_d[3] = {1, 1, 1};
  double shift_d[3] = {0, 0, 0};
};

// The box's scale and shift on `axis` in the precision of the coordinates (acc_t).
template <typename acc_t>
GRID_HD acc_t box_scale(const Sampling& mode, int axis);
template <>
GRID_HD float box_scale<float>(const Sampling& mode, int axis) {
  return mode.scale_f[axis];
}
template <>
GRID_HD double box_scale<double>(const Sampling& mode, int axis) {
  return mode.scale_d[axis];
}
template <typename acc_t>
GRID_HD acc_t box_shift(const Sampling& mode, int axis);
template <>
GRID_HD float box_shift<float>(const Sampling& mode, int axis) {
  return mode.shift_f[axis];
}
template <>
GRID_HD double box_shift<double>(const Sampling& mode, int axis) {
  return mode.shift_d[axis];
}

// x * scale + shift with one rounding, as torch.addcmul computes it on the CPU.
GRID_HD float fma_(float x, float scale, float shift) {
#if defined(__CUDA_ARCH__)
  return fmaf(x, scale, shift);
#else
  return std::fma(x, scale, shift);
#endif
}
GRID_HD double fma_(double x, double scale, double shift) {
#if defined(__CUDA_ARCH__)
  return ::fma(x, scale, shift);
#else
  return std::fma(x, scale, shift);
#endif
}

// One axis of a point's cell. index_t: int32_t where every element offset of the grid fits
// (fewer registers and instructions on the GPU), else int64_t.
template <typename acc_t, typename index_t = int64_t>
struct AxisCell {
  index_t i0;     // index of the low corner; the high corner is i0 + 1
  acc_t frac;     // weight t of the high corner (1 - t of the low one): the position u in
                  // [0, 1] between them (linear) or u^2 (3 - 2u) (smoothstep)
  acc_t dindex;   // d t / d coordinate (normalised, or world with a box); 0 where border
                  // padding clamps
  acc_t d2index;  // d^2 t / d coordinate^2: 0 for linear, (6 - 12u) * scale^2 for smoothstep
  bool valid[2];  // whether corners i0 and i0 + 1 lie inside the grid
  bool outside;   // zeros padding: the point is too far (or NaN) to touch the grid
};

// Maps a coordinate onto axis `axis` of `size` voxels as F.grid_sample does (bilinear, zeros or
// border padding): a normalised one, or a world one through the box of `mode.world`. Far and
// non-finite coordinates never produce an index outside [-1, size], so the int64 conversion is
// always defined.
template <typename acc_t, typename index_t = int64_t>
GRID_HD AxisCell<acc_t, index_t> locate_axis(acc_t coord, int64_t size, const Sampling& mode,
                                             int axis) {
  AxisCell<acc_t, index_t> a;
  // The box's numbers are read where they are used (kernel parameters: no register kept).
  if (mode.world) coord = fma_(coord, box_scale<acc_t>(mode, axis), box_shift<acc_t>(mode, axis));
  acc_t index, dindex;
  if (mode.align_corners) {
    index = (coord + 1) / 2 * acc_t(size - 1);
    dindex = acc_t(size - 1) / 2;
  } else {
    index = ((coord + 1) * acc_t(size) - 1) / 2;
    dindex = acc_t(size) / 2;
  }
  if (mode.world) dindex *= box_scale<acc_t>(mode, axis);  // d index / d world coordinate
  a.outside = false;
  if (mode.border) {
    const acc_t hi = acc_t(size - 1);
    if (!(index > 0 && index < hi)) {  // clamped (NaN goes to the low border): no gradient
      index = index >= hi ? hi : acc_t(0);
      dindex = 0;
    }
  } else if (!(index >= -1 && index <= acc_t(size))) {  // every corner outside, or NaN
    a.outside = true;
    index = 0;
    dindex = 0;
  }
  const acc_t low = floor_(index);
  const acc_t u = index - low;
  a.i0 = static_cast<index_t>(low);
  if (mode.smooth) {  // t = u^2 (3 - 2u): t' = 6u (1 - u), t'' = 6 - 12u
    a.frac = u * u * (3 - 2 * u);
    a.dindex = 6 * u * (1 - u) * dindex;
    a.d2index = (6 - 12 * u) * dindex * dindex;
  } else {
    a.frac = u;
    a.dindex = dindex;
    a.d2index = 0;
  }
  a.valid[0] = a.i0 >= 0 && a.i0 < size;
  a.valid[1] = a.i0 + 1 >= 0 && a.i0 + 1 < size;
  return a;
}

// The cell of one point: its three axes, the corner weights and which corners are inside.
template <typename acc_t, typename index_t = int64_t>
struct Cell {
  AxisCell<acc_t, index_t> axis[3];
  acc_t weight[8];  // 0 for corners outside the grid
  unsigned inside;  // bit k: corner k lies inside the grid
  bool any;         // some corner is inside the grid

  GRID_HD bool valid(int k) const { return (inside >> k) & 1u; }

  // Element offset of corner k in a grid with the given strides.
  GRID_HD index_t offset(int k, index_t sx, index_t sy, index_t sz) const {
    return (axis[0].i0 + corner_dx(k)) * sx + (axis[1].i0 + corner_dy(k)) * sy +
           (axis[2].i0 + corner_dz(k)) * sz;
  }
};

template <typename acc_t, typename index_t = int64_t, typename point_t>
GRID_HD Cell<acc_t, index_t> locate_cell(const point_t* point, const GridShape& g,
                                         const Sampling& mode) {
  Cell<acc_t, index_t> c;
  bool outside = false;
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    c.axis[a] = locate_axis<acc_t, index_t>(static_cast<acc_t>(point[a]), g.size[a], mode, a);
    outside = outside || c.axis[a].outside;
  }
  corner_weights(c.axis[0].frac, c.axis[1].frac, c.axis[2].frac, c.weight);
  c.inside = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const bool in = !outside && c.axis[0].valid[corner_dx(k)] && c.axis[1].valid[corner_dy(k)] &&
                    c.axis[2].valid[corner_dz(k)];
    c.inside |= unsigned(in) << k;
    if (!in) c.weight[k] = 0;
  }
  c.any = c.inside != 0;
  return c;
}

// Corner k's weight and its first and second derivatives with respect to the point, from the
// per-axis blend t (AxisCell::frac) and its derivatives dt (dindex) and d2t (d2index):
// w = P0 P1 P2 with P_a = t_a (high corner) or 1 - t_a (low corner).
template <typename acc_t>
struct CornerDerivatives {
  acc_t w;
  acc_t d[3];      // d w / d point_a
  acc_t dd[3][3];  // d^2 w / d point_a d point_b
};

template <typename acc_t>
GRID_HD CornerDerivatives<acc_t> corner_derivatives(int k, const acc_t (&t)[3],
                                                    const acc_t (&dt)[3], const acc_t (&d2t)[3]) {
  const int bit[3] = {corner_dx(k), corner_dy(k), corner_dz(k)};
  acc_t P[3], D[3], DD[3];
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    P[a] = bit[a] ? t[a] : 1 - t[a];
    D[a] = bit[a] ? dt[a] : -dt[a];
    DD[a] = bit[a] ? d2t[a] : -d2t[a];
  }
  CornerDerivatives<acc_t> c;
  c.w = P[0] * P[1] * P[2];
  c.d[0] = D[0] * P[1] * P[2];
  c.d[1] = P[0] * D[1] * P[2];
  c.d[2] = P[0] * P[1] * D[2];
  c.dd[0][0] = DD[0] * P[1] * P[2];
  c.dd[1][1] = P[0] * DD[1] * P[2];
  c.dd[2][2] = P[0] * P[1] * DD[2];
  c.dd[0][1] = c.dd[1][0] = D[0] * D[1] * P[2];
  c.dd[0][2] = c.dd[2][0] = D[0] * P[1] * D[2];
  c.dd[1][2] = c.dd[2][1] = P[0] * D[1] * D[2];
  return c;
}

// The double backward of one point splits into a pass over the F channels and two per-point
// sums. With q_k = sum_a ggp_a d w_k / d p_a (how corner k's weight moves along the incoming
// gradient ggp of the point gradient), V_k corner k's features, G_k the incoming gradient of
// the feature gradient at corner k and g the point's grad_out row:
//   grad of grad_out[f]   = sum_k w_k G_k[f] + q_k V_k[f]
//   grad of V_k[f]       += q_k g[f]
//   grad of the point[b]  = sum_k d w_k / d p_b <g, G_k> + sum_a ggp_a d^2 w_k / d p_a d p_b <g,
//   V_k>
// `inside` masks the corners that lie in the grid (the others read zeros).

// w_k and q_k of the eight corners (0 outside).
template <typename acc_t>
GRID_HD void corner_weights_and_moves(const acc_t (&t)[3], const acc_t (&dt)[3],
                                      const acc_t (&d2t)[3], const acc_t (&ggp)[3], unsigned inside,
                                      acc_t (&w)[8], acc_t (&q)[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const CornerDerivatives<acc_t> c = corner_derivatives(k, t, dt, d2t);
    const bool in = (inside >> k) & 1u;
    w[k] = in ? c.w : acc_t(0);
    q[k] = in ? ggp[0] * c.d[0] + ggp[1] * c.d[1] + ggp[2] * c.d[2] : acc_t(0);
  }
}

// The point's gradient from the per-corner dot products dot_g[k] = <g, G_k> and
// dot_v[k] = <g, V_k> (0 outside).
template <typename acc_t>
GRID_HD void point_second_order(const acc_t (&t)[3], const acc_t (&dt)[3], const acc_t (&d2t)[3],
                                const acc_t (&ggp)[3], const acc_t (&dot_g)[8],
                                const acc_t (&dot_v)[8], acc_t (&grad)[3]) {
  grad[0] = grad[1] = grad[2] = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const CornerDerivatives<acc_t> c = corner_derivatives(k, t, dt, d2t);
#pragma unroll
    for (int b = 0; b < 3; ++b)
      grad[b] += c.d[b] * dot_g[k] +
                 (ggp[0] * c.dd[0][b] + ggp[1] * c.dd[1][b] + ggp[2] * c.dd[2][b]) * dot_v[k];
  }
}

}  // namespace grid
