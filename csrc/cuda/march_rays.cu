// CUDA fixed-step ray marching with empty-space skipping, in two passes over the rays:
// march_rays_count (samples each ray keeps) and march_rays_fill (the samples, written packed at
// the offsets the caller scanned from the counts, into a buffer of fixed capacity). Nothing is
// read back to the host: the counts, offsets and padding stay on the device.
//
// One warp per ray: lane l takes the steps j = l, l + 32, ... of its ray. A ballot over the warp
// says which of the 32 steps are kept; a lane's slot is the ray's start, plus what the ray kept
// in earlier rounds, plus the kept steps of the lanes below it, so the samples come out in order
// and the writes of a round are contiguous. The per-ray math is csrc/ray_march.h, shared with the
// CPU kernels.
#include <torch/library.h>

#include <optional>

#include "cuda_utils.cuh"
#include "ray_checks.h"
#include "ray_march.h"

namespace grid {
namespace {

constexpr int kWarp = 32;

// Device pointers of one march (contiguous, in the rays' dtype).
template <typename T>
struct MarchParams {
  const T* origins;     // [R, 3]
  const T* directions;  // [R, 3]
  const T* lo;          // [3]
  const T* hi;          // [3]
  T near;
  const T* step;  // [R] at step_stride
  int64_t step_stride;
  const T* jitter;  // [R] at jitter_stride, or nullptr (0.5)
  int64_t jitter_stride;
  const bool* flags;     // [X, Y, Z] or nullptr
  int64_t flag_size[3];  //
  const T* flag_bounds;  // [2, 3]
  int64_t max_steps;
  int64_t R;
};

template <typename T>
__device__ __forceinline__ RayMarch<T> ray_of(const MarchParams<T>& p, int64_t r) {
  const T jitter = p.jitter ? p.jitter[r * p.jitter_stride] : T(0.5);
  return ray_march(p.origins + 3 * r, p.directions + 3 * r, p.lo, p.hi, p.near,
                   p.step[r * p.step_stride], jitter, p.max_steps);
}

template <typename T>
__device__ __forceinline__ Occupancy<T> occupancy_of(const MarchParams<T>& p) {
  Occupancy<T> occ;
  occ.flags = p.flags;
  if (p.flags != nullptr) {
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      occ.size[a] = p.flag_size[a];
      occ.lo[a] = p.flag_bounds[a];
      occ.extent[a] = sub_rn(p.flag_bounds[3 + a], p.flag_bounds[a]);
    }
  }
  return occ;
}

// kFill = false: counts[r] = samples ray r keeps. kFill = true: write them from offsets[r] on,
// up to `capacity`.
template <typename T, bool kFill>
__global__ void __launch_bounds__(kThreads)
    march_kernel(MarchParams<T> p, int64_t* __restrict__ counts,       // [R] (count)
                 const int64_t* __restrict__ offsets,                  // [R + 1] (fill)
                 int64_t capacity, int64_t* __restrict__ ray_out,      // [capacity]
                 T* __restrict__ t_out, T* __restrict__ points_out) {  // [capacity], [capacity, 3]
  const int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (r >= p.R) return;  // the whole warp: kThreads is a multiple of 32
  const RayMarch<T> ray = ray_of(p, r);
  const Occupancy<T> occ = occupancy_of(p);
  const int64_t start = kFill ? offsets[r] : 0;
  // only inside the ray's own range: offsets that are not the scan of this march's counts
  // then drop samples or leave padding, never write another ray's slots
  const int64_t stop = kFill ? min(offsets[r + 1], capacity) : 0;
  int64_t kept = 0;  // the same in every lane of the warp
  for (int64_t j0 = 0; j0 < ray.steps; j0 += kWarp) {
    if (kFill && start + kept >= stop) break;
    const int64_t j = j0 + lane;
    bool keep = false;
    T tj = 0, pt[3] = {0, 0, 0};
    if (j < ray.steps) {
      tj = ray.t_at(j);
      ray.point_at(tj, pt);
      keep = occ.occupied(pt);
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, keep);
    if (kFill && keep) {
      const int64_t at = start + kept + __popc(ballot & ((1u << lane) - 1u));
      if (at >= 0 && at < stop) {
        ray_out[at] = r;
        t_out[at] = tj;
#pragma unroll
        for (int a = 0; a < 3; ++a) points_out[3 * at + a] = pt[a];
      }
    }
    kept += __popc(ballot);
  }
  if (!kFill && lane == 0) counts[r] = kept;
  if (kFill) {  // a range longer than the count: padding, as after the last ray
    const T* lo = p.lo;
    const T* hi = p.hi;
    for (int64_t at = max(start + kept, int64_t(0)) + lane; at < stop; at += kWarp) {
      ray_out[at] = p.R;
      t_out[at] = 0;
#pragma unroll
      for (int a = 0; a < 3; ++a) points_out[3 * at + a] = sub_rn(lo[a], sub_rn(hi[a], lo[a]));
    }
  }
}

// The slots from offsets[R] on: ray index R, t = 0, point 2 lo - hi (outside the box).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    pad_kernel(const int64_t* __restrict__ offsets, int64_t R, int64_t capacity,
               const T* __restrict__ lo, const T* __restrict__ hi, int64_t* __restrict__ ray_out,
               T* __restrict__ t_out, T* __restrict__ points_out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= capacity) return;
  const int64_t used = offsets[R];
  if (i < used) return;
  ray_out[i] = R;
  t_out[i] = 0;
#pragma unroll
  for (int a = 0; a < 3; ++a) points_out[3 * i + a] = sub_rn(lo[a], sub_rn(hi[a], lo[a]));
}

struct MarchTensors {  // contiguous copies, alive until the kernels are enqueued
  at::Tensor origins, directions, lo, hi, flags, flag_bounds;
};

template <typename T>
MarchParams<T> march_params(MarchTensors& k, const at::Tensor& origins,
                            const at::Tensor& directions, const at::Tensor& lo,
                            const at::Tensor& hi, double near, const at::Tensor& step,
                            const std::optional<at::Tensor>& jitter,
                            const std::optional<at::Tensor>& occupancy,
                            const std::optional<at::Tensor>& occupancy_bounds, int64_t max_steps) {
  k.origins = origins.contiguous();
  k.directions = directions.contiguous();
  k.lo = lo.contiguous();
  k.hi = hi.contiguous();
  MarchParams<T> p;
  p.origins = k.origins.data_ptr<T>();
  p.directions = k.directions.data_ptr<T>();
  p.lo = k.lo.data_ptr<T>();
  p.hi = k.hi.data_ptr<T>();
  p.near = static_cast<T>(near);
  p.step = step.data_ptr<T>();
  p.step_stride = step.stride(0);
  p.jitter = jitter ? jitter->data_ptr<T>() : nullptr;
  p.jitter_stride = jitter ? jitter->stride(0) : 0;
  p.flags = nullptr;
  p.flag_bounds = nullptr;
  for (int a = 0; a < 3; ++a) p.flag_size[a] = 1;
  if (occupancy) {
    k.flags = occupancy->contiguous();
    k.flag_bounds = occupancy_bounds->contiguous();
    p.flags = k.flags.data_ptr<bool>();
    p.flag_bounds = k.flag_bounds.data_ptr<T>();
    for (int a = 0; a < 3; ++a) p.flag_size[a] = k.flags.size(a);
  }
  p.max_steps = max_steps;
  p.R = origins.size(0);
  return p;
}

at::Tensor march_rays_count_cuda(const at::Tensor& origins, const at::Tensor& directions,
                                 const at::Tensor& lo, const at::Tensor& hi, double near,
                                 const at::Tensor& step, const std::optional<at::Tensor>& jitter,
                                 const std::optional<at::Tensor>& occupancy,
                                 const std::optional<at::Tensor>& occupancy_bounds,
                                 int64_t max_steps) {
  check_march_args("grid.march_rays_count", origins, directions, lo, hi, step, jitter, occupancy,
                   occupancy_bounds, max_steps);
  const c10::cuda::CUDAGuard guard(origins.device());
  const int64_t R = origins.size(0);
  at::Tensor counts = at::empty({R}, origins.options().dtype(at::kLong));  // [R]
  if (R == 0) return counts;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(origins.scalar_type(), "march_rays_count", [&] {
    MarchTensors keep;
    const auto p = march_params<scalar_t>(keep, origins, directions, lo, hi, near, step, jitter,
                                          occupancy, occupancy_bounds, max_steps);
    march_kernel<scalar_t, false><<<one_pass_blocks(R * kWarp), kThreads, 0, stream>>>(
        p, counts.data_ptr<int64_t>(), nullptr, 0, nullptr, nullptr, nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return counts;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> march_rays_fill_cuda(
    const at::Tensor& origins, const at::Tensor& directions, const at::Tensor& lo,
    const at::Tensor& hi, double near, const at::Tensor& step,
    const std::optional<at::Tensor>& jitter, const std::optional<at::Tensor>& occupancy,
    const std::optional<at::Tensor>& occupancy_bounds, int64_t max_steps,
    const at::Tensor& offsets,  // [R + 1] int64
    int64_t capacity) {
  const char* op = "grid.march_rays_fill";
  check_march_args(op, origins, directions, lo, hi, step, jitter, occupancy, occupancy_bounds,
                   max_steps);
  check_offsets(op, offsets, origins);
  const int64_t R = origins.size(0);
  TORCH_CHECK(offsets.size(0) == R + 1, op, ": offsets: expected shape [", R + 1, "], got ",
              offsets.sizes());
  TORCH_CHECK(capacity >= 0, op, ": capacity: expected an int >= 0, got ", capacity);
  const c10::cuda::CUDAGuard guard(origins.device());
  at::Tensor ray_indices = at::empty({capacity}, offsets.options());  // [capacity]
  at::Tensor t = at::empty({capacity}, origins.options());            // [capacity]
  at::Tensor points = at::empty({capacity, 3}, origins.options());    // [capacity, 3]
  if (capacity == 0) return {ray_indices, t, points};
  const at::Tensor starts = offsets.contiguous();
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(origins.scalar_type(), "march_rays_fill", [&] {
    MarchTensors keep;
    const auto p = march_params<scalar_t>(keep, origins, directions, lo, hi, near, step, jitter,
                                          occupancy, occupancy_bounds, max_steps);
    if (R > 0) {
      march_kernel<scalar_t, true><<<one_pass_blocks(R * kWarp), kThreads, 0, stream>>>(
          p, nullptr, starts.data_ptr<int64_t>(), capacity, ray_indices.data_ptr<int64_t>(),
          t.data_ptr<scalar_t>(), points.data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    pad_kernel<scalar_t><<<one_pass_blocks(capacity), kThreads, 0, stream>>>(
        starts.data_ptr<int64_t>(), R, capacity, p.lo, p.hi, ray_indices.data_ptr<int64_t>(),
        t.data_ptr<scalar_t>(), points.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {ray_indices, t, points};
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CUDA, m) {
  m.impl("march_rays_count", &march_rays_count_cuda);
  m.impl("march_rays_fill", &march_rays_fill_cuda);
}

}  // namespace grid
