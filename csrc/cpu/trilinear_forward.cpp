// CPU forward of grid::trilinear: out[n] = sum_k weight_k(local[n]) * corners[n, k].
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

#include "checks.h"
#include "dispatch.h"
#include "trilinear_math.h"

namespace grid {

at::Tensor trilinear_forward_cpu(const at::Tensor& corners_in,  // [N, 8, F]
                                 const at::Tensor& local_in) {  // [N, 3]
  check_trilinear_args(corners_in, local_in);
  const at::Tensor corners = corners_in.contiguous();
  const at::Tensor local = local_in.contiguous();
  const int64_t N = corners.size(0), F = corners.size(2);
  at::Tensor out = at::empty({N, F}, corners.options());  // [N, F]
  if (N == 0 || F == 0) return out;

  dispatch_dtypes(corners.scalar_type(), local.scalar_type(), [&](auto s, auto p) {
    using scalar_t = typename decltype(s)::type;
    using point_t = typename decltype(p)::type;
    using acc_t = acc_type<scalar_t>;
    const scalar_t* c = corners.data_ptr<scalar_t>();
    const point_t* l = local.data_ptr<point_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 16384 / (8 * F));
    at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
      std::vector<acc_t> row(F);
      for (int64_t n = begin; n < end; ++n) {
        acc_t w[8];
        corner_weights<acc_t>((acc_t(l[3 * n]) + 1) / 2, (acc_t(l[3 * n + 1]) + 1) / 2,
                              (acc_t(l[3 * n + 2]) + 1) / 2, w);
        std::fill(row.begin(), row.end(), acc_t(0));
        for (int k = 0; k < 8; ++k) {
          const scalar_t* ck = c + (n * 8 + k) * F;
          for (int64_t f = 0; f < F; ++f) row[f] += w[k] * static_cast<acc_t>(ck[f]);
        }
        for (int64_t f = 0; f < F; ++f) o[n * F + f] = static_cast<scalar_t>(row[f]);
      }
    });
  });
  return out;
}

TORCH_LIBRARY_IMPL(grid, CPU, m) {
  m.impl("trilinear", &trilinear_forward_cpu);
}

}  // namespace grid
