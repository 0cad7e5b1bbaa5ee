// Launch configuration, vector loads and vector atomics shared by the CUDA kernels.
#pragma once

#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "trilinear_math.h"

namespace grid {

constexpr int kThreads = 256;

// V values of T read or written as one access (16 bytes at most).
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ Vec<T, V> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, V>*>(p);
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, V>& v) {
  *reinterpret_cast<Vec<T, V>*>(p) = v;
}

// A stored value widened to its accumulation type (half types straight from their bits).
__device__ __forceinline__ float to_acc(float x) {
  return x;
}
__device__ __forceinline__ double to_acc(double x) {
  return x;
}
__device__ __forceinline__ float to_acc(at::BFloat16 x) {
  return __uint_as_float(uint32_t(x.x) << 16);
}
__device__ __forceinline__ float to_acc(at::Half x) {
  return __half2float(__ushort_as_half(x.x));
}

// V values of T as they are stored. 16 bytes of a half type stay four 32-bit words that
// widen() splits with shifts: as c10 types they cost 16-bit moves (the bf16 sample forward
// went from 0.069 to 0.062 ms on an H200 with this and to_acc).
template <typename T, int V>
using raw_t = std::conditional_t<sizeof(T) == 2 && V == 8, uint4, Vec<T, V>>;

template <typename T, int V>
__device__ __forceinline__ raw_t<T, V> load_raw(const T* p) {
  return *reinterpret_cast<const raw_t<T, V>*>(p);
}

template <typename T, int V>
__device__ __forceinline__ void widen(const raw_t<T, V>& r, acc_type<T> (&x)[V]) {
  if constexpr (std::is_same_v<raw_t<T, V>, uint4>) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (std::is_same_v<T, at::BFloat16>) {
        x[2 * j] = __uint_as_float(w[j] << 16);
        x[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      } else {
        x[2 * j] = __half2float(__ushort_as_half(static_cast<uint16_t>(w[j])));
        x[2 * j + 1] = __half2float(__ushort_as_half(static_cast<uint16_t>(w[j] >> 16)));
      }
    }
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) x[v] = to_acc(r.v[v]);
  }
}

// p[0..V) += v[0..V) atomically per element; one vector atomic per 16 bytes on sm_90.
template <int V>
__device__ __forceinline__ void atomic_add_vec(float* p, const float (&v)[V]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kWidth = V % 4 == 0 ? 4 : V % 2 == 0 ? 2 : 1;
#else
  constexpr int kWidth = 1;
#endif
#pragma unroll
  for (int i = 0; i < V; i += kWidth) {
    if constexpr (kWidth == 4)
      atomicAdd(reinterpret_cast<float4*>(p + i), make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]));
    else if constexpr (kWidth == 2)
      atomicAdd(reinterpret_cast<float2*>(p + i), make_float2(v[i], v[i + 1]));
    else
      atomicAdd(p + i, v[i]);
  }
}

// Half-precision grids accumulate their gradient in their own dtype (as F.grid_sample and
// tiny-cuda-nn do): one 16-byte vector reduction carries 8 values on sm_90.
__device__ __forceinline__ uint32_t pack2(at::Half*, float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack2(at::BFloat16*, float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ void red_v4(at::Half* p, uint32_t a, uint32_t b, uint32_t c,
                                       uint32_t d) {
  asm volatile("red.global.add.noftz.v4.f16x2 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b),
               "r"(c), "r"(d)
               : "memory");
}
__device__ __forceinline__ void red_v4(at::BFloat16* p, uint32_t a, uint32_t b, uint32_t c,
                                       uint32_t d) {
  asm volatile("red.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b),
               "r"(c), "r"(d)
               : "memory");
}
__device__ __forceinline__ void atomic_add_one(at::Half* p, float v) {
  atomicAdd(reinterpret_cast<__half*>(p), __float2half_rn(v));
}
__device__ __forceinline__ void atomic_add_one(at::BFloat16* p, float v) {
  atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __float2bfloat16_rn(v));
}

template <int V, typename half_t>
__device__ __forceinline__ void atomic_add_vec(half_t* p, const float (&v)[V]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kVector = V % 8 == 0;
#else
  constexpr bool kVector = false;
#endif
  if constexpr (kVector) {
#pragma unroll
    for (int i = 0; i < V; i += 8)
      red_v4(p + i, pack2(p, v[i], v[i + 1]), pack2(p, v[i + 2], v[i + 3]),
             pack2(p, v[i + 4], v[i + 5]), pack2(p, v[i + 6], v[i + 7]));
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) atomic_add_one(p + i, v[i]);
  }
}

template <int V>
__device__ __forceinline__ void atomic_add_vec(double* p, const double (&v)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) atomicAdd(p + i, v[i]);
}

// Threads that share one point: a power of two up to a warp, enough for its F / V vectors.
inline int group_log2(int64_t vectors_per_point) {
  int log2 = 0;
  while ((1 << log2) < vectors_per_point && log2 < 5) ++log2;
  return log2;
}

// Mask of the lanes of this thread's group (groups never straddle a warp).
__device__ __forceinline__ unsigned group_mask(int log2) {
  const int size = 1 << log2;
  if (size == 32) return 0xffffffffu;
  const int lane = threadIdx.x & 31;
  return ((1u << size) - 1) << (lane & ~(size - 1));
}

// Sum over the lanes of the group; every lane gets the total.
template <typename T>
__device__ __forceinline__ T group_sum(T x, unsigned mask, int log2) {
  for (int offset = (1 << log2) >> 1; offset > 0; offset >>= 1)
    x += __shfl_xor_sync(mask, x, offset, 1 << log2);
  return x;
}

// Gives the kernel's whole L1/shared-memory store to the L1 cache (the sample kernels use no
// shared memory and their gathers hit L1 ~40% of the time). Left to the driver, a kernel may
// run with the split an earlier kernel chose: with a max-shared split an H100 took 106 instead
// of 93 us for S1's forward and 84 instead of 56 us in bf16. Set once per kernel and device.
template <auto kKernel>
void prefer_l1() {
  static std::atomic<uint64_t> done{0};  // bit d: set on device d (devices past 63: every call)
  const int device = c10::cuda::current_device();
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (done.load(std::memory_order_relaxed) & bit) return;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxL1));
  done.fetch_or(bit, std::memory_order_relaxed);
}

// A new CUDA tensor for a kernel to write in full. Under torch.use_deterministic_algorithms(True)
// at::empty fills what it allocates (NaN, or the largest integer) so that reads of uninitialised
// memory show; that is one more pass over every buffer (D1 on S1: about 230 MB), which a buffer
// the kernels write before anything reads it does not need.
inline at::Tensor unfilled_cuda(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::detail::empty_cuda(sizes, options);
}

// Blocks for one thread per item, no grid-stride loop.
inline unsigned one_pass_blocks(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  TORCH_CHECK(blocks < (int64_t(1) << 31), "grid: ", items, " threads exceed one CUDA launch");
  return static_cast<unsigned>(std::max<int64_t>(1, blocks));
}

// Blocks for a grid-stride loop over `items` threads of work.
inline unsigned blocks_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 1 << 22)));
}

}  // namespace grid
