// Global gradient-norm clipping (docs/accumulation.md, "Clipping"), spelled as torch 2.11's
// torch.nn.utils.clip_grad_norm_ with norm_type 2 (get_total_norm, then clip_grads_with_norm_):
//   n_i   = linalg_vector_norm(g_i)                    each parameter's whole gradient, in its dtype
//   total = linalg_vector_norm([n_0, ..., n_{P-1}])    the P norms in model parameter order
//   coef  = clamp((total + 1e-6).reciprocal() * max_norm, max = 1)   1e-6 rounded to the total's dtype
//   g_i  *= coef                                       every gradient, also when coef is 1
// Under owner placement each n_i is computed on the one rank of the mesh that holds g_i whole (a
// split parameter is gathered there first) and the P-vector is all-reduced by SUM: every entry is
// non-zero on one rank only and x + 0 = x, so the vector, and so the total, is bitwise the
// oracle's on every rank, for every planner and world size.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace mfsdp {

// One parameter's entry: linalg_vector_norm(grad, 2) over every element (a 0-dim tensor).
at::Tensor parameter_norm(const at::Tensor& grad);
// The total over the per-parameter norms (a 1-D tensor of P entries, model parameter order).
at::Tensor total_norm(const at::Tensor& parameter_norms);
// torch's coefficient from the total (a 0-dim tensor of the total's dtype and device).
at::Tensor clip_coefficient(const at::Tensor& total, double max_norm);
// The whole rule where every gradient is held in full (the oracle): `grads` in model parameter
// order, each multiplied in place by the coefficient. Returns the total before clipping.
at::Tensor clip_full_gradients(const std::vector<at::Tensor>& grads, double max_norm);

// A clipping threshold a run can use: finite and > 0 (throws naming `what` otherwise).
void check_max_norm(double max_norm, const char* what);

}  // namespace mfsdp
