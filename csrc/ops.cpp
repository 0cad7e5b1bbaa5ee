// Every operator schema of the library, defined once. Kernels are registered per device in
// cpu/ and cuda/, autograd in autograd.cpp; fake (shape) rules are attached in grid/ops.py.
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(grid, m) {
  // corners: [N, 8, F], local: [N, 3] -> [N, F]
  m.def("trilinear(Tensor corners, Tensor local) -> Tensor");
  // -> (grad_corners [N, 8, F], grad_local [N, 3]); an output not asked for in output_mask
  // comes back as an empty tensor of shape [0].
  m.def(
      "trilinear_backward(Tensor grad_out, Tensor corners, Tensor local, bool[2] output_mask) "
      "-> (Tensor, Tensor)");
  // The gradient of trilinear_backward (double backward). grad_grad_corners: [N, 8, F] and
  // grad_grad_local: [N, 3], the incoming gradients of its two outputs (None: zero).
  // -> (grad of grad_out [N, F], grad of corners [N, 8, F], grad of local [N, 3]); masked-out
  // outputs are empty [0].
  m.def(
      "trilinear_double_backward(Tensor? grad_grad_corners, Tensor? grad_grad_local, "
      "Tensor grad_out, Tensor corners, Tensor local, bool[3] output_mask) "
      "-> (Tensor, Tensor, Tensor)");
  // features: [X, Y, Z, F], points: [..., 3] -> [..., F]. interpolation: "linear" (trilinear)
  // or "smoothstep" (the same corners, weights from t^2 (3 - 2t) per axis). bounds: None (the
  // points are normalised, in [-1, 1]) or the world box (xmin, ymin, zmin, xmax, ymax, zmax) that
  // maps onto [-1, 1] (the points and their gradients are in world units).
  m.def(
      "sample(Tensor features, Tensor points, bool align_corners, str padding, "
      "str interpolation=\"linear\", float[]? bounds=None) -> Tensor");
  // -> (grad_features [X, Y, Z, F], grad_points [..., 3]); masked-out outputs are empty [0].
  m.def(
      "sample_backward(Tensor grad_out, Tensor features, Tensor points, bool align_corners, "
      "str padding, str interpolation, bool[2] output_mask, float[]? bounds=None) "
      "-> (Tensor, Tensor)");
  // The gradient of sample_backward (double backward). grad_grad_features: [X, Y, Z, F] and
  // grad_grad_points: [..., 3], the incoming gradients of its two outputs (None: zero).
  // -> (grad of grad_out [..., F], grad of features [X, Y, Z, F], grad of points [..., 3]);
  // masked-out outputs are empty [0].
  m.def(
      "sample_double_backward(Tensor? grad_grad_features, Tensor? grad_grad_points, "
      "Tensor grad_out, Tensor features, Tensor points, bool align_corners, str padding, "
      "str interpolation, bool[3] output_mask, float[]? bounds=None) -> (Tensor, Tensor, Tensor)");
  // features: [X, Y, Z, F], X, Y, Z >= 2 -> [] (float32; float64 for float64 features): the mean
  // over the three axes of the mean squared difference between neighbouring voxels.
  m.def("total_variation(Tensor features) -> Tensor");
  // grad_out: [] like the value -> grad_features [X, Y, Z, F] in the dtype of features.
  m.def("total_variation_backward(Tensor grad_out, Tensor features) -> Tensor");
  // grad [X, Y, Z, F] (dtype of features) += weight * d total_variation / d features, in place,
  // without a graph. Returns the value (as total_variation) if compute_value, else an empty [0].
  m.def(
      "total_variation_add_grad_(Tensor(a!) grad, Tensor features, float weight, "
      "bool compute_value) -> Tensor");

  // ---- rendering: ray marching and compositing of packed samples --------------------------
  // Fixed-step marching with empty-space skipping (csrc/ray_march.h). origins, directions:
  // [R, 3]; lo, hi: [3] the box; step: [R]; jitter: [R] in [0, 1) or None (0.5, step centres);
  // occupancy: [X, Y, Z] bool with occupancy_bounds [2, 3], or neither; at most max_steps
  // steps per ray -> the number of samples each ray keeps, [R] int64. Not differentiable.
  m.def(
      "march_rays_count(Tensor origins, Tensor directions, Tensor lo, Tensor hi, float near, "
      "Tensor step, Tensor? jitter, Tensor? occupancy, Tensor? occupancy_bounds, int max_steps) "
      "-> Tensor");
  // The same samples, packed in a buffer of `capacity`: ray r's from offsets[r] on (offsets:
  // [R + 1] int64, the exclusive scan of the counts), those at or past capacity dropped
  // -> (ray_indices [capacity] int64, t [capacity], points [capacity, 3]); the slots from
  // offsets[R] on are padding: ray index R, t = 0, point 2 lo - hi. Not differentiable.
  m.def(
      "march_rays_fill(Tensor origins, Tensor directions, Tensor lo, Tensor hi, float near, "
      "Tensor step, Tensor? jitter, Tensor? occupancy, Tensor? occupancy_bounds, int max_steps, "
      "Tensor offsets, int capacity) -> (Tensor, Tensor, Tensor)");
  // Front-to-back compositing (csrc/ray_composite.h). tau: [S] optical thickness of each sample
  // (alpha = 1 - exp(-tau)); colors: [S, C]; t: [S]; offsets: [R + 1] int64, ray r owns samples
  // [offsets[r], offsets[r + 1]); background: [C], [R, C] or None
  // -> (rgb [R, C], depth [R], acc [R]).
  m.def(
      "composite_rays(Tensor tau, Tensor colors, Tensor t, Tensor offsets, Tensor? background) "
      "-> (Tensor, Tensor, Tensor)");
  // -> (grad_tau [S], grad_colors [S, C], grad_t [S]); masked-out outputs are empty [0].
  m.def(
      "composite_rays_backward(Tensor grad_rgb, Tensor grad_depth, Tensor grad_acc, Tensor tau, "
      "Tensor colors, Tensor t, Tensor offsets, Tensor? background, bool[3] output_mask) "
      "-> (Tensor, Tensor, Tensor)");
  // tau: [S], offsets: [R + 1] -> the compositing weights [S] (0 outside every ray). Not
  // differentiable (composite_rays is).
  m.def("ray_weights(Tensor tau, Tensor offsets) -> Tensor");
  // One Adam step (torch.optim.Adam's update, bias corrections of the given global step) on the
  // elements whose grad is non-zero; the others keep param, exp_avg and exp_avg_sq unchanged.
  // param, exp_avg, exp_avg_sq: updated in place; all four tensors of one dtype, shape and layout.
  m.def(
      "masked_adam_(Tensor(a!) param, Tensor(b!) exp_avg, Tensor(c!) exp_avg_sq, Tensor grad, "
      "float lr, float beta1, float beta2, float eps, float weight_decay, "
      "bool decoupled_weight_decay, int step) -> ()");
  // The same with lr and step as one-value float32 / float64 tensors on param's device, read by
  // the kernel: capturable in a CUDA graph (grid.MaskedAdam(capturable=True)).
  m.def(
      "masked_adam_.tensor(Tensor(a!) param, Tensor(b!) exp_avg, Tensor(c!) exp_avg_sq, "
      "Tensor grad, Tensor lr, float beta1, float beta2, float eps, float weight_decay, "
      "bool decoupled_weight_decay, Tensor step) -> ()");

  // ---- multiresolution grid (csrc/multires_math.h) ----------------------------------------
  // table: [L, T, F], points: [..., 3] in [-1, 1], resolutions: L cells-per-axis counts
  // -> [..., L * F]: level l trilinearly blended from its (R + 1)^3 vertices, stored densely in
  // table[l] where they fit T rows, else hashed into them (instant-ngp's spatial hash).
  m.def("multires(Tensor table, Tensor points, int[] resolutions) -> Tensor");
  // -> (grad_table [L, T, F], grad_points [..., 3]); masked-out outputs are empty [0].
  m.def(
      "multires_backward(Tensor grad_out, Tensor table, Tensor points, int[] resolutions, "
      "bool[2] output_mask) -> (Tensor, Tensor)");
  // The gradient of multires_backward. grad_grad_table: [L, T, F] and grad_grad_points:
  // [..., 3], the incoming gradients of its two outputs (None: zero) -> (grad of grad_out
  // [..., L * F], grad of table [L, T, F], grad of points [..., 3]); masked-out outputs are [0].
  m.def(
      "multires_double_backward(Tensor? grad_grad_table, Tensor? grad_grad_points, "
      "Tensor grad_out, Tensor table, Tensor points, int[] resolutions, bool[3] output_mask) "
      "-> (Tensor, Tensor, Tensor)");
}

// Lets `import grid._C` load the library (which registers the ops above) as a Python module.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module);
}
