// The matrix functions the optimizers share: Newton–Schulz (2-D and batched), the inverse root,
// Muon's learning-rate adjustment.
#include "core/optim/optim.h"
#include "core/optim/optimizer_state.h"

#include <ATen/ops/addmm.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_eigh.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/mm.h>
#include <ATen/TensorOperators.h>

namespace mfsdp {

using namespace optim_detail;

at::Tensor newton_schulz(const at::Tensor& grad, const MuonOptions& o) {
  TORCH_CHECK(grad.dim() == 2, "muon: Newton–Schulz needs a 2-D tensor, got ", grad.dim(), "-D");
  at::Tensor x = grad.to(at::kBFloat16);
  const bool tall = grad.size(0) > grad.size(1);
  if (tall) x = x.t();
  x.div_(at::linalg_vector_norm(x, 2).clamp_min(o.eps));
  for (int i = 0; i < o.ns_steps; ++i) {
    at::Tensor gram = at::mm(x, x.t());
    at::Tensor update = at::addmm(gram, gram, gram, /*beta=*/o.ns_b, /*alpha=*/o.ns_c);
    x = at::addmm(x, update, x, /*beta=*/o.ns_a);
  }
  if (tall) x = x.t();
  return x;
}

at::Tensor newton_schulz_batched(const at::Tensor& grad, const MuonOptions& o) {
  TORCH_CHECK(grad.dim() == 3, "muon: batched Newton–Schulz needs a 3-D tensor [n, out, in], got ", grad.dim(), "-D");
  at::Tensor x = grad.to(at::kBFloat16);
  const bool tall = grad.size(1) > grad.size(2);
  if (tall) x = x.transpose(1, 2);
  x.div_(at::linalg_vector_norm(x, 2, at::IntArrayRef{1, 2}, /*keepdim=*/true).clamp_min(o.eps));
  for (int i = 0; i < o.ns_steps; ++i) {
    at::Tensor gram = at::bmm(x, x.transpose(1, 2));
    at::Tensor update = at::baddbmm(gram, gram, gram, /*beta=*/o.ns_b, /*alpha=*/o.ns_c);
    x = at::baddbmm(x, update, x, /*beta=*/o.ns_a);
  }
  if (tall) x = x.transpose(1, 2);
  return x.contiguous();
}

double muon_adjusted_lr(double lr, MuonLrAdjustment adjustment, int64_t rows, int64_t cols) {
  const double a = static_cast<double>(rows), b = static_cast<double>(cols);
  switch (adjustment) {
    case MuonLrAdjustment::original: return lr * std::sqrt(std::max(1.0, a / b));
    case MuonLrAdjustment::match_rms_adamw: return lr * 0.2 * std::sqrt(std::max(a, b));
  }
  TORCH_INTERNAL_ASSERT(false, "unknown MuonLrAdjustment");
}

at::Tensor matrix_inverse_root(const at::Tensor& a, int root, double epsilon) {
  TORCH_CHECK(a.dim() == 2 && a.size(0) == a.size(1), "matrix_inverse_root: needs a square matrix, got ", a.sizes());
  TORCH_CHECK(root > 0, "matrix_inverse_root: root must be positive, got ", root);
  at::Tensor a64 = a.to(at::kDouble);
  a64 = (a64 + a64.t()) * 0.5;  // symmetric by construction, exactly
  a64 = a64 + at::eye(a.size(0), a64.options()) * epsilon;
  auto [values, vectors] = at::linalg_eigh(a64);
  at::Tensor scale = values.clamp_min(epsilon).pow(-1.0 / root);
  return at::mm(vectors * scale.unsqueeze(0), vectors.t()).to(a.scalar_type());
}

}  // namespace mfsdp
