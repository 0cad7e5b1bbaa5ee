// Every operator schema of the library, defined once. Kernels are registered per device in
// cpu/ and cuda/; fake (shape) rules and autograd are attached in grid/ops.py.
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
  // features: [X, Y, Z, F], points: [..., 3] -> [..., F]
  m.def("sample(Tensor features, Tensor points, bool align_corners, str padding) -> Tensor");
  // -> (grad_features [X, Y, Z, F], grad_points [..., 3]); masked-out outputs are empty [0].
  m.def(
      "sample_backward(Tensor grad_out, Tensor features, Tensor points, bool align_corners, "
      "str padding, bool[2] output_mask) -> (Tensor, Tensor)");
}

// Lets `import grid._C` load the library (which registers the ops above) as a Python module.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module);
}
