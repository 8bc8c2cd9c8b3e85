#include "core/runtime/clipping.h"

#include <ATen/ops/clamp.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/stack.h>
#include <c10/util/Exception.h>

#include <cmath>

namespace mfsdp {

at::Tensor parameter_norm(const at::Tensor& grad) { return at::linalg_vector_norm(grad, 2); }

at::Tensor total_norm(const at::Tensor& parameter_norms) {
  TORCH_CHECK(parameter_norms.dim() == 1, "clipping: the per-parameter norms form a vector");
  return at::linalg_vector_norm(parameter_norms, 2);
}

at::Tensor clip_coefficient(const at::Tensor& total, double max_norm) {
  // torch evaluates `max_norm / (total + 1e-6)` on a tensor as (total + 1e-6).reciprocal() * max_norm.
  return at::clamp((total + 1e-6).reciprocal() * max_norm, std::nullopt, 1.0);
}

at::Tensor clip_full_gradients(const std::vector<at::Tensor>& grads, double max_norm) {
  TORCH_CHECK(!grads.empty(), "clipping: no gradients");
  std::vector<at::Tensor> norms;
  norms.reserve(grads.size());
  for (const at::Tensor& g : grads) norms.push_back(parameter_norm(g));
  at::Tensor total = total_norm(at::stack(norms));
  const at::Tensor coef = clip_coefficient(total, max_norm);
  for (const at::Tensor& g : grads) g.mul_(coef);
  return total;
}

void check_max_norm(double max_norm, const char* what) {
  TORCH_CHECK(std::isfinite(max_norm) && max_norm > 0, what, ": the maximum gradient norm must be a finite number > 0, not ",
              max_norm);
}

}  // namespace mfsdp
