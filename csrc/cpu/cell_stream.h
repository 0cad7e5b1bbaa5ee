// Walks points in order, locating each point's cell kAhead points early and prefetching its
// corners, so the random reads of a large grid overlap instead of stalling one by one.
#pragma once

#include <cstdint>

#include "trilinear_math.h"

namespace grid {

template <typename acc_t, typename point_t, typename scalar_t>
class CellStream {
 public:
  static constexpr int64_t kAhead = 8;

  // Prefetches corners of `grid` (strides of `shape`, or contiguous when `contiguous`) whose
  // (x, y) row lies in [row_begin, row_end); rows are x * Y + y. With `order`, position m of
  // [begin, end) is point order[m] (a list of point indices), else point m.
  CellStream(const point_t* points, const GridShape& shape, Sampling mode, const scalar_t* grid,
             bool contiguous, int64_t begin, int64_t end, int64_t row_begin = 0,
             int64_t row_end = INT64_MAX, const int32_t* order = nullptr)
      : points_(points),
        order_(order),
        shape_(shape),
        mode_(mode),
        grid_(grid),
        end_(end),
        row_begin_(row_begin),
        row_end_(row_end) {
    const int64_t F = shape.F;
    stride_[0] = contiguous ? shape.size[1] * shape.size[2] * F : shape.stride[0];
    stride_[1] = contiguous ? shape.size[2] * F : shape.stride[1];
    stride_[2] = contiguous ? F : shape.stride[2];
    for (int64_t m = begin; m < begin + kAhead && m < end; ++m) fill(m);
  }

  // The cell at position n (point n, or order[n]); call with n = begin, begin + 1, ... in order.
  Cell<acc_t> get(int64_t n) {
    const Cell<acc_t> cell = ring_[n % kAhead];  // its slot is refilled for n + kAhead next
    if (n + kAhead < end_) fill(n + kAhead);
    return cell;
  }

 private:
  void fill(int64_t m) {
    Cell<acc_t>& c = ring_[m % kAhead];
    const int64_t point = order_ ? order_[m] : m;
    c = locate_cell<acc_t>(points_ + 3 * point, shape_, mode_);
    for (int k = 0; k < 8; ++k) {
      if (!c.valid(k)) continue;
      const int64_t row =
          (c.axis[0].i0 + corner_dx(k)) * shape_.size[1] + c.axis[1].i0 + corner_dy(k);
      if (row < row_begin_ || row >= row_end_) continue;
      const scalar_t* p = grid_ + c.offset(k, stride_[0], stride_[1], stride_[2]);
      __builtin_prefetch(p);
      __builtin_prefetch(p + shape_.F - 1);
    }
  }

  const point_t* points_;
  const int32_t* order_;
  GridShape shape_;
  Sampling mode_;
  const scalar_t* grid_;
  int64_t stride_[3];
  int64_t end_, row_begin_, row_end_;
  Cell<acc_t> ring_[kAhead];
};

}  // namespace grid
