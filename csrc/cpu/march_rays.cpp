// CPU fixed-step ray marching with empty-space skipping, in two passes over the rays:
// march_rays_count (samples each ray keeps) and march_rays_fill (the samples, written packed at
// the offsets the caller scanned from the counts, into a buffer of fixed capacity). The
// per-ray math is csrc/ray_march.h, shared with the CUDA kernels.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <optional>

#include "ray_checks.h"
#include "ray_march.h"

namespace grid {
namespace {

constexpr int64_t kRayGrain = 64;

// The inputs of one march, laid out for the loops (contiguous, in the rays' dtype).
template <typename T>
struct MarchInputs {
  const T* origins;     // [R, 3]
  const T* directions;  // [R, 3]
  T box[6];             // lo, hi
  T near;
  const T* step;  // [R] at step_stride
  int64_t step_stride;
  const T* jitter;  // [R] at jitter_stride, or nullptr (0.5: the centre of each step)
  int64_t jitter_stride;
  Occupancy<T> occupancy;
  int64_t max_steps;

  RayMarch<T> ray(int64_t r) const {
    const T j = jitter ? jitter[r * jitter_stride] : T(0.5);
    return ray_march(origins + 3 * r, directions + 3 * r, box, box + 3, near, step[r * step_stride],
                     j, max_steps);
  }
};

struct MarchTensors {  // keeps the contiguous copies alive while the loops run
  at::Tensor origins, directions, lo, hi, flags, flag_bounds;
};

template <typename T>
MarchInputs<T> march_inputs(MarchTensors& k, const at::Tensor& origins,
                            const at::Tensor& directions, const at::Tensor& lo,
                            const at::Tensor& hi, double near, const at::Tensor& step,
                            const std::optional<at::Tensor>& jitter,
                            const std::optional<at::Tensor>& occupancy,
                            const std::optional<at::Tensor>& occupancy_bounds, int64_t max_steps) {
  k.origins = origins.contiguous();
  k.directions = directions.contiguous();
  k.lo = lo.contiguous();
  k.hi = hi.contiguous();
  MarchInputs<T> in;
  in.origins = k.origins.data_ptr<T>();
  in.directions = k.directions.data_ptr<T>();
  for (int a = 0; a < 3; ++a) {
    in.box[a] = k.lo.data_ptr<T>()[a];
    in.box[3 + a] = k.hi.data_ptr<T>()[a];
  }
  in.near = static_cast<T>(near);
  in.step = step.data_ptr<T>();
  in.step_stride = step.stride(0);
  in.jitter = jitter ? jitter->data_ptr<T>() : nullptr;
  in.jitter_stride = jitter ? jitter->stride(0) : 0;
  in.occupancy.flags = nullptr;
  if (occupancy) {
    k.flags = occupancy->contiguous();
    k.flag_bounds = occupancy_bounds->contiguous();
    const T* b = k.flag_bounds.data_ptr<T>();
    in.occupancy.flags = k.flags.data_ptr<bool>();
    for (int a = 0; a < 3; ++a) {
      in.occupancy.size[a] = k.flags.size(a);
      in.occupancy.lo[a] = b[a];
      in.occupancy.extent[a] = sub_rn(b[3 + a], b[a]);
    }
  }
  in.max_steps = max_steps;
  return in;
}

at::Tensor march_rays_count_cpu(const at::Tensor& origins,     // [R, 3]
                                const at::Tensor& directions,  // [R, 3]
                                const at::Tensor& lo, const at::Tensor& hi, double near,
                                const at::Tensor& step,                      // [R]
                                const std::optional<at::Tensor>& jitter,     // [R]
                                const std::optional<at::Tensor>& occupancy,  // [X, Y, Z] bool
                                const std::optional<at::Tensor>& occupancy_bounds,  // [2, 3]
                                int64_t max_steps) {
  check_march_args("grid.march_rays_count", origins, directions, lo, hi, step, jitter, occupancy,
                   occupancy_bounds, max_steps);
  const int64_t R = origins.size(0);
  at::Tensor counts = at::empty({R}, origins.options().dtype(at::kLong));  // [R]
  if (R == 0) return counts;
  AT_DISPATCH_FLOATING_TYPES(origins.scalar_type(), "march_rays_count", [&] {
    MarchTensors keep;
    const auto in = march_inputs<scalar_t>(keep, origins, directions, lo, hi, near, step, jitter,
                                           occupancy, occupancy_bounds, max_steps);
    int64_t* out = counts.data_ptr<int64_t>();
    at::parallel_for(0, R, kRayGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const RayMarch<scalar_t> ray = in.ray(r);
        int64_t kept = 0;
        for (int64_t j = 0; j < ray.steps; ++j) {
          scalar_t p[3];
          ray.point_at(ray.t_at(j), p);
          kept += in.occupancy.occupied(p);
        }
        out[r] = kept;
      }
    });
  });
  return counts;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> march_rays_fill_cpu(
    const at::Tensor& origins, const at::Tensor& directions, const at::Tensor& lo,
    const at::Tensor& hi, double near, const at::Tensor& step,
    const std::optional<at::Tensor>& jitter, const std::optional<at::Tensor>& occupancy,
    const std::optional<at::Tensor>& occupancy_bounds, int64_t max_steps,
    const at::Tensor& offsets,  // [R + 1] int64: ray r's samples start at offsets[r]
    int64_t capacity) {
  const char* op = "grid.march_rays_fill";
  check_march_args(op, origins, directions, lo, hi, step, jitter, occupancy, occupancy_bounds,
                   max_steps);
  check_offsets(op, offsets, origins);
  const int64_t R = origins.size(0);
  TORCH_CHECK(offsets.size(0) == R + 1, op, ": offsets: expected shape [", R + 1, "], got ",
              offsets.sizes());
  TORCH_CHECK(capacity >= 0, op, ": capacity: expected an int >= 0, got ", capacity);
  at::Tensor ray_indices = at::empty({capacity}, offsets.options());  // [capacity]
  at::Tensor t = at::empty({capacity}, origins.options());            // [capacity]
  at::Tensor points = at::empty({capacity, 3}, origins.options());    // [capacity, 3]
  const at::Tensor starts = offsets.contiguous();
  AT_DISPATCH_FLOATING_TYPES(origins.scalar_type(), "march_rays_fill", [&] {
    MarchTensors keep;
    const auto in = march_inputs<scalar_t>(keep, origins, directions, lo, hi, near, step, jitter,
                                           occupancy, occupancy_bounds, max_steps);
    const int64_t* start = starts.data_ptr<int64_t>();
    int64_t* ray_out = ray_indices.data_ptr<int64_t>();
    scalar_t* t_out = t.data_ptr<scalar_t>();
    scalar_t* p_out = points.data_ptr<scalar_t>();
    at::parallel_for(0, R, kRayGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const RayMarch<scalar_t> ray = in.ray(r);
        int64_t at = start[r];
        // only inside the ray's own range: offsets that are not the scan of this march's
        // counts then drop samples or leave padding, never write another ray's slots
        const int64_t stop = std::min<int64_t>(start[r + 1], capacity);
        for (int64_t j = 0; j < ray.steps && at < stop; ++j) {
          const scalar_t tj = ray.t_at(j);
          scalar_t p[3];
          ray.point_at(tj, p);
          if (!in.occupancy.occupied(p)) continue;
          if (at >= 0) {
            ray_out[at] = r;
            t_out[at] = tj;
            for (int a = 0; a < 3; ++a) p_out[3 * at + a] = p[a];
          }
          ++at;
        }
        for (at = std::max<int64_t>(at, 0); at < stop; ++at) {  // a range longer than the count
          ray_out[at] = R;
          t_out[at] = 0;
          for (int a = 0; a < 3; ++a)
            p_out[3 * at + a] = sub_rn(in.box[a], sub_rn(in.box[3 + a], in.box[a]));
        }
      }
    });
    // Padding after the last sample: no ray (index R), t = 0, a point one box-width below lo
    // (outside the box: a zero-padded grid reads nothing there and gets no gradient).
    const int64_t used = std::min<int64_t>(std::max<int64_t>(start[R], 0), capacity);
    for (int64_t i = used; i < capacity; ++i) {
      ray_out[i] = R;
      t_out[i] = 0;
      for (int a = 0; a < 3; ++a)
        p_out[3 * i + a] = sub_rn(in.box[a], sub_rn(in.box[3 + a], in.box[a]));
    }
  });
  return {ray_indices, t, points};
}

}  // namespace

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("march_rays_count", &march_rays_count_cpu);
  m.impl("march_rays_fill", &march_rays_fill_cpu);
}

}  // namespace grid
