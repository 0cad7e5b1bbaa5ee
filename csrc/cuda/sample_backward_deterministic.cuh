// The atomic-free gradient of grid::sample with respect to the features (CUDA), used when
// torch.use_deterministic_algorithms(True) is set. Defined in sample_backward_deterministic.cu.
#pragma once

#include <ATen/ATen.h>

namespace grid {

// grad_features [X, Y, Z, F] of sample(features, points) for grad_out; all inputs contiguous
// and on one CUDA device. Bitwise the same from run to run.
at::Tensor sample_grad_features_deterministic(const at::Tensor& grad_out,  // [N, F]
                                              const at::Tensor& features,  // [X, Y, Z, F]
                                              const at::Tensor& points,    // [N, 3]
                                              Sampling mode);

}  // namespace grid
