// The matrix functions the optimizers share: the inverse root, Muon's learning-rate adjustment
// (Newton–Schulz: newton_schulz.cpp).
#include "core/optim/optim.h"
#include "core/optim/optimizer_state.h"

#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_eigh.h>
#include <ATen/ops/mm.h>
#include <ATen/TensorOperators.h>

namespace mfsdp {

using namespace optim_detail;

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
