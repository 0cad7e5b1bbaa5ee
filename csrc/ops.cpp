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
  // or "smoothstep" (the same corners, weights from t^2 (3 - 2t) per axis).
  m.def(
      "sample(Tensor features, Tensor points, bool align_corners, str padding, "
      "str interpolation=\"linear\") -> Tensor");
  // -> (grad_features [X, Y, Z, F], grad_points [..., 3]); masked-out outputs are empty [0].
  m.def(
      "sample_backward(Tensor grad_out, Tensor features, Tensor points, bool align_corners, "
      "str padding, str interpolation, bool[2] output_mask) -> (Tensor, Tensor)");
  // The gradient of sample_backward (double backward). grad_grad_features: [X, Y, Z, F] and
  // grad_grad_points: [..., 3], the incoming gradients of its two outputs (None: zero).
  // -> (grad of grad_out [..., F], grad of features [X, Y, Z, F], grad of points [..., 3]);
  // masked-out outputs are empty [0].
  m.def(
      "sample_double_backward(Tensor? grad_grad_features, Tensor? grad_grad_points, "
      "Tensor grad_out, Tensor features, Tensor points, bool align_corners, str padding, "
      "str interpolation, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
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
  // One Adam step (torch.optim.Adam's update, bias corrections of the given global step) on the
  // elements whose grad is non-zero; the others keep param, exp_avg and exp_avg_sq unchanged.
  // param, exp_avg, exp_avg_sq: updated in place; all four tensors of one dtype, shape and layout.
  m.def(
      "masked_adam_(Tensor(a!) param, Tensor(b!) exp_avg, Tensor(c!) exp_avg_sq, Tensor grad, "
      "float lr, float beta1, float beta2, float eps, float weight_decay, "
      "bool decoupled_weight_decay, int step) -> ()");
}

// Lets `import grid._C` load the library (which registers the ops above) as a Python module.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module);
}
