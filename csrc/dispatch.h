// Dtype and vector-width dispatch shared by the CPU and CUDA launchers. Host only.
#pragma once

#include <ATen/ATen.h>

#include <limits>
#include <type_traits>

namespace grid {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<scalar_t>, TypeTag<point_t>) for the supported (value, coordinate) dtype
// pairs: equal dtypes, or float32 coordinates with float16 / bfloat16 values. The pair has
// been checked before (check_pair), so only these combinations are instantiated.
template <typename Fn>
void dispatch_dtypes(at::ScalarType value, at::ScalarType coords, Fn&& fn) {
  switch (value) {
    case at::kDouble:
      return fn(TypeTag<double>{}, TypeTag<double>{});
    case at::kFloat:
      return fn(TypeTag<float>{}, TypeTag<float>{});
    case at::kHalf:
      if (coords == at::kFloat) return fn(TypeTag<at::Half>{}, TypeTag<float>{});
      return fn(TypeTag<at::Half>{}, TypeTag<at::Half>{});
    case at::kBFloat16:
      if (coords == at::kFloat) return fn(TypeTag<at::BFloat16>{}, TypeTag<float>{});
      return fn(TypeTag<at::BFloat16>{}, TypeTag<at::BFloat16>{});
    default:
      TORCH_CHECK(false, "grid: unsupported dtype ", value);
  }
}

// Widest vector of scalar_t that is 16 bytes or less.
template <typename scalar_t>
constexpr int max_vec() {
  return 16 / sizeof(scalar_t);
}

// Calls fn(std::integral_constant<int, V>) with V = max_vec<scalar_t>() when every row of F
// values starts 16-byte aligned (F, the strides and the base pointers all multiples of V),
// else V = 1.
template <typename scalar_t, typename Fn>
void dispatch_vec(bool aligned, Fn&& fn) {
  if (aligned) return fn(std::integral_constant<int, max_vec<scalar_t>()>{});
  return fn(std::integral_constant<int, 1>{});
}

// As dispatch_vec, with a middle width for float32 rows of an even F that 16 bytes do not divide
// (F = 2, 6, 10, ...): V = 2, 8-byte accesses, when `pairs` (F, strides and pointers even).
// A 2-channel grid then takes one thread per point instead of two.
template <typename scalar_t, typename Fn>
void dispatch_vec_or_pairs(bool aligned, bool pairs, Fn&& fn) {
  if (aligned) return fn(std::integral_constant<int, max_vec<scalar_t>()>{});
  if constexpr (sizeof(scalar_t) == 4) {
    if (pairs) return fn(std::integral_constant<int, 2>{});
  }
  return fn(std::integral_constant<int, 1>{});
}

// Calls fn(std::bool_constant<a>, std::bool_constant<b>) for the outputs a backward was asked
// for (at least one of the two), so each kernel is compiled without the work it skips.
template <typename Fn>
void dispatch_mask(bool a, bool b, Fn&& fn) {
  if (a && b) return fn(std::true_type{}, std::true_type{});
  if (a) return fn(std::true_type{}, std::false_type{});
  return fn(std::false_type{}, std::true_type{});
}

// Calls fn(TypeTag<int32_t>) when 32-bit arithmetic can index everything a kernel touches,
// else fn(TypeTag<int64_t>). 64-bit offsets cost the sample kernels registers and about a
// fifth of their speed, so the common case gets its own instantiation.
template <typename Fn>
void dispatch_index(bool fits_int32, Fn&& fn) {
  if (fits_int32) return fn(TypeTag<int32_t>{});
  return fn(TypeTag<int64_t>{});
}

// Whether `items` threads (at most 2^30, so a thread index never nears 2^31) and element
// offsets below each of `spans` fit the int32 kernels.
inline bool fits_int32(int64_t items, std::initializer_list<int64_t> spans) {
  if (items > (int64_t(1) << 30)) return false;
  for (int64_t s : spans)
    if (s > std::numeric_limits<int32_t>::max()) return false;
  return true;
}

inline bool vec_aligned(int64_t V, std::initializer_list<int64_t> extents,
                        std::initializer_list<const void*> pointers) {
  for (int64_t e : extents)
    if (e % V != 0) return false;
  for (const void* p : pointers)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace grid
