// Variants of the small-F sample kernels (csrc/cuda/sample_small_f.cuh) for
// bench/probes/small_f_probe.py: points per thread in the forward; in the backward, vector or
// scalar atomics, with or without the warp's run sums (csrc/cuda/corner_runs.cuh). float32,
// align_corners=True, zeros padding, contiguous inputs.
#include <torch/extension.h>

#include "cuda/sample_small_f.cuh"

namespace {

grid::GridShape shape_of(const at::Tensor& f) {
  return {{f.size(0), f.size(1), f.size(2)}, {f.stride(0), f.stride(1), f.stride(2)}, f.size(3)};
}

at::Tensor forward(const at::Tensor& features, const at::Tensor& points, int64_t per) {
  const int N = points.size(0);
  at::Tensor out = at::empty({N, features.size(3)}, features.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  grid::dispatch_small_f(features.size(3), [&](auto fc) {
    constexpr int FC = decltype(fc)::value;
    const auto launch = [&](auto kper) {
      constexpr int kPer = decltype(kper)::value;
      constexpr auto kernel = grid::sample_forward_small_f_kernel<FC, kPer, int32_t>;
      grid::prefer_l1<kernel>();
      kernel<<<grid::one_pass_blocks((N + kPer - 1) / kPer), grid::kThreads, 0, stream>>>(
          features.data_ptr<float>(), points.data_ptr<float>(), out.data_ptr<float>(),
          shape_of(features), N, grid::Sampling{true, false, false});
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (per == 2)
      launch(std::integral_constant<int, 2>{});
    else
      launch(std::integral_constant<int, 1>{});
  });
  return out;
}

at::Tensor backward(const at::Tensor& grad_out, const at::Tensor& features,
                    const at::Tensor& points, bool vector, bool runs) {
  const int N = points.size(0);
  at::Tensor grad = at::empty_like(features);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  C10_CUDA_CHECK(cudaMemsetAsync(grad.data_ptr(), 0, grad.nbytes(), stream));
  grid::dispatch_small_f(features.size(3), [&](auto fc) {
    constexpr int FC = decltype(fc)::value;
    const auto launch = [&](auto kv, auto kr) {
      constexpr auto kernel =
          grid::sample_backward_small_f_kernel<FC, decltype(kv)::value, true, false,
                                               decltype(kr)::value, int32_t>;
      grid::prefer_l1<kernel>();
      kernel<<<grid::one_pass_blocks(N), grid::kThreads, 0, stream>>>(
          grad_out.data_ptr<float>(), features.data_ptr<float>(), points.data_ptr<float>(),
          grad.data_ptr<float>(), nullptr, shape_of(features), N,
          grid::Sampling{true, false, false});
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    const auto with_runs = [&](auto kv) {
      if (runs)
        launch(kv, std::true_type{});
      else
        launch(kv, std::false_type{});
    };
    if (vector)
      with_runs(std::true_type{});
    else
      with_runs(std::false_type{});
  });
  return grad;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward);
  m.def("backward", &backward);
}
