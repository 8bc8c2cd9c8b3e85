#include "reference/ns_ref.h"

#include <ATen/ops/abs.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sum.h>
#include <ATen/TensorOperators.h>

#include <algorithm>
#include <vector>

namespace mfsdp::reference {
namespace {

at::Tensor one_matrix(const at::Tensor& g, const MuonOptions& o) {
  const NsVariantInfo& v = ns_variant_info(o.ns_variant);
  const bool tall = g.size(0) > g.size(1);
  at::Tensor x = g.to(at::kDouble);
  if (tall) x = x.t();
  const double eps = v.eps < 0 ? o.eps : v.eps;
  const double norm = x.norm().item<double>();
  switch (v.normalisation) {
    case NsNormalisation::clamp_in_dtype:
    case NsNormalisation::clamp_in_fp32:
      x = x / std::max(norm * v.safety, eps);
      break;
    case NsNormalisation::add_in_dtype:
    case NsNormalisation::add_in_fp32:
      x = x / (norm * v.safety + eps);
      break;
    case NsNormalisation::aol: {
      const at::Tensor rowsum = at::sum(at::abs(at::matmul(x, x.t())), 1);
      x = x / at::sqrt(at::clamp_min(rowsum, eps)).unsqueeze(1);  // D X, D = diag(1 / sqrt(max(sum_j |A_ij|, eps)))
      break;
    }
  }
  const NsTriple torch_triple{o.ns_a, o.ns_b, o.ns_c};
  const int steps = ns_steps_of(v, o.ns_steps);
  for (int i = 0; i < steps; ++i) {
    const NsTriple t = ns_coefficients(v, i, torch_triple);
    const at::Tensor A = at::matmul(x, x.t());
    const at::Tensor Ax = at::matmul(A, x);
    x = x * t.a + Ax * t.b + at::matmul(A, Ax) * t.c;
  }
  return tall ? x.t().contiguous() : x;
}

}  // namespace

at::Tensor newton_schulz_f64(const at::Tensor& grad, const MuonOptions& o) {
  TORCH_CHECK(grad.dim() == 2 || grad.dim() == 3, "newton_schulz_f64: needs 2-D or 3-D, got ", grad.dim(), "-D");
  if (grad.dim() == 2) return one_matrix(grad, o);
  std::vector<at::Tensor> slices;
  for (int64_t e = 0; e < grad.size(0); ++e) slices.push_back(one_matrix(grad.select(0, e), o));
  return at::stack(slices);
}

}  // namespace mfsdp::reference
