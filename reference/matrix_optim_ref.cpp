#include "reference/matrix_optim_ref.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/argsort.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/diag.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_eigh.h>
#include <ATen/ops/linalg_qr.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <cmath>

namespace mfsdp::reference {
namespace {

at::Tensor f64(const at::Tensor& t) { return t.to(at::kDouble); }

// (A + eps I)^(-1/4) with eigenvalues floored at eps.
at::Tensor inverse_fourth_root(const at::Tensor& a, double eps) {
  const int64_t n = a.size(0);
  at::Tensor s = (a + a.transpose(0, 1)) / 2 + at::eye(n, a.options()) * eps;
  auto [w, q] = at::linalg_eigh(s);
  return at::matmul(at::matmul(q, at::diag(w.clamp_min(eps).pow(-0.25))), q.transpose(0, 1));
}

// Row and column boundaries of blocks of at most D.
std::vector<std::pair<int64_t, int64_t>> cuts(int64_t n, int64_t D) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t b = 0; b < n; b += D) out.push_back({b, std::min(D, n - b)});
  return out;
}

}  // namespace

ShampooRef::ShampooRef(ShampooOptions o, std::vector<int64_t> shape) : o_(o) {
  if (o_.start_preconditioning_step < 0) o_.start_preconditioning_step = o_.precondition_frequency;
  for (auto [r0, rn] : cuts(shape[0], o_.max_preconditioner_dim)) {
    for (auto [c0, cn] : cuts(shape[1], o_.max_preconditioner_dim)) {
      auto opts = at::TensorOptions().dtype(at::kDouble);
      L_.push_back(at::zeros({rn, rn}, opts));
      R_.push_back(at::zeros({cn, cn}, opts));
      Lroot_.push_back(at::Tensor());
      Rroot_.push_back(at::Tensor());
      M_.push_back(at::zeros({rn, cn}, opts));
      V_.push_back(at::zeros({rn, cn}, opts));
    }
  }
}

at::Tensor ShampooRef::step(const at::Tensor& param, const at::Tensor& grad) {
  t_ += 1;
  const double t = static_cast<double>(t_);
  at::Tensor p = f64(param) * (1 - o_.lr * o_.weight_decay);
  const at::Tensor g_all = f64(grad);
  const bool precondition = t_ >= o_.start_preconditioning_step;
  const bool recompute = precondition && (t_ % o_.precondition_frequency == 0 || !have_roots_);
  const double bc1 = o_.use_bias_correction ? 1 - std::pow(o_.beta1, t) : 1;
  const double bc2 = o_.use_bias_correction ? 1 - std::pow(o_.grafting_beta2, t) : 1;
  std::vector<at::Tensor> rows_out;
  size_t k = 0;
  for (auto [r0, rn] : cuts(g_all.size(0), o_.max_preconditioner_dim)) {
    std::vector<at::Tensor> row_blocks;
    for (auto [c0, cn] : cuts(g_all.size(1), o_.max_preconditioner_dim)) {
      const at::Tensor g = g_all.narrow(0, r0, rn).narrow(1, c0, cn);
      const at::Tensor ggT = at::matmul(g, g.transpose(0, 1)), gTg = at::matmul(g.transpose(0, 1), g);
      L_[k] = o_.beta2 == 1 ? L_[k] + ggT : L_[k] * o_.beta2 + ggT * (1 - o_.beta2);
      R_[k] = o_.beta2 == 1 ? R_[k] + gTg : R_[k] * o_.beta2 + gTg * (1 - o_.beta2);
      M_[k] = M_[k] * o_.beta1 + g * (1 - o_.beta1);
      const at::Tensor m_hat = M_[k] / bc1;
      at::Tensor graft = m_hat;
      if (o_.adam_grafting) {
        V_[k] = V_[k] * o_.grafting_beta2 + g * g * (1 - o_.grafting_beta2);
        graft = m_hat / (at::sqrt(V_[k] / bc2) + o_.grafting_epsilon);
      }
      at::Tensor d = graft;
      if (precondition) {
        if (recompute) {
          Lroot_[k] = inverse_fourth_root(L_[k], o_.epsilon);
          Rroot_[k] = inverse_fourth_root(R_[k], o_.epsilon);
        }
        d = at::matmul(at::matmul(Lroot_[k], m_hat), Rroot_[k]);
        if (o_.adam_grafting) {
          const double dn = d.norm().item<double>();
          if (dn > 0) d = d * (graft.norm().item<double>() / dn);
        }
      }
      row_blocks.push_back(p.narrow(0, r0, rn).narrow(1, c0, cn) - d * o_.lr);
      ++k;
    }
    rows_out.push_back(at::cat(row_blocks, 1));
  }
  if (recompute) have_roots_ = true;
  return at::cat(rows_out, 0);
}

SoapRef::SoapRef(SoapOptions o, std::vector<int64_t> /*shape*/) : o_(o) {
  if (o_.shampoo_beta < 0) o_.shampoo_beta = o_.beta2;
}

at::Tensor SoapRef::step(const at::Tensor& param, const at::Tensor& grad) {
  const at::Tensor g = f64(grad);
  const bool left = g.size(0) <= o_.max_precond_dim, right = g.size(1) <= o_.max_precond_dim;
  auto project = [&](const at::Tensor& x) {
    at::Tensor y = left ? at::matmul(QL_.transpose(0, 1), x) : x;
    return right ? at::matmul(y, QR_) : y;
  };
  auto project_back = [&](const at::Tensor& x) {
    at::Tensor y = left ? at::matmul(QL_, x) : x;
    return right ? at::matmul(y, QR_.transpose(0, 1)) : y;
  };
  auto accumulate = [&] {
    const double b = o_.shampoo_beta;
    if (left) GL_ = GL_ * b + at::matmul(g, g.transpose(0, 1)) * (1 - b);
    if (right) GR_ = GR_ * b + at::matmul(g.transpose(0, 1), g) * (1 - b);
  };
  if (!started_) {
    started_ = true;
    m_ = at::zeros_like(g);
    v_ = at::zeros_like(g);
    if (left) GL_ = at::zeros({g.size(0), g.size(0)}, g.options());
    if (right) GR_ = at::zeros({g.size(1), g.size(1)}, g.options());
    accumulate();
    if (left) QL_ = std::get<1>(at::linalg_eigh(GL_)).flip({1});
    if (right) QR_ = std::get<1>(at::linalg_eigh(GR_)).flip({1});
    return f64(param);
  }
  t_ += 1;
  const double t = static_cast<double>(t_);
  const at::Tensor gp = project(g);
  m_ = m_ * o_.beta1 + gp * (1 - o_.beta1);
  v_ = v_ * o_.beta2 + gp * gp * (1 - o_.beta2);
  double step_size = o_.lr;
  if (o_.correct_bias) step_size *= std::sqrt(1 - std::pow(o_.beta2, t)) / (1 - std::pow(o_.beta1, t));
  at::Tensor p = f64(param) - project_back(m_ / (at::sqrt(v_) + o_.eps)) * step_size;
  if (o_.weight_decay > 0) p = p - p * (o_.lr * o_.weight_decay);
  accumulate();
  if (t_ % o_.precondition_frequency == 0) {
    const at::Tensor m_full = project_back(m_);
    auto refresh = [&](at::Tensor& q, const at::Tensor& gg, int dim) {
      const at::Tensor est = at::diag(at::matmul(at::matmul(q.transpose(0, 1), gg), q));
      const at::Tensor order = at::argsort(est, /*stable=*/true, 0, /*descending=*/true);
      v_ = v_.index_select(dim, order);
      q = std::get<0>(at::linalg_qr(at::matmul(gg, q.index_select(1, order))));
    };
    if (left) refresh(QL_, GL_, 0);
    if (right) refresh(QR_, GR_, 1);
    m_ = project(m_full);
  }
  return p;
}

}  // namespace mfsdp::reference
