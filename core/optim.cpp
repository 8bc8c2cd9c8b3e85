#include "core/optim.h"

#include <ATen/ops/addmm.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/mm.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

#include <cmath>

namespace mfsdp {

int64_t TensorOptimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& [_, t] : state()) n += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  return n;
}

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

double muon_adjusted_lr(double lr, const std::string& fn, int64_t rows, int64_t cols) {
  const double a = static_cast<double>(rows), b = static_cast<double>(cols);
  if (fn == "original") return lr * std::sqrt(std::max(1.0, a / b));
  if (fn == "match_rms_adamw") return lr * 0.2 * std::sqrt(std::max(a, b));
  TORCH_CHECK(false, "muon: unknown adjust_lr_fn '", fn, "' (expected original or match_rms_adamw)");
}

namespace {

class Muon final : public TensorOptimizer {
 public:
  Muon(MuonOptions o, std::vector<int64_t> full_shape) : o_(std::move(o)), full_shape_(std::move(full_shape)) {
    TORCH_CHECK(full_shape_.size() == 2, "muon: needs a 2-D parameter, got ", full_shape_.size(), "-D");
  }
  OptimizerKind kind() const override { return OptimizerKind::muon; }
  void step(at::Tensor& param, const at::Tensor& grad) override {
    TORCH_CHECK(grad.dim() == 2 && param.sizes() == grad.sizes(), "muon: parameter and gradient must be the same 2-D shape");
    if (!buf_.defined()) buf_ = at::zeros_like(grad);
    buf_.lerp_(grad, 1 - o_.momentum);
    at::Tensor update = o_.nesterov ? grad.lerp(buf_, o_.momentum) : buf_;
    update = newton_schulz(update, o_);
    const double adjusted = muon_adjusted_lr(o_.lr, o_.adjust_lr_fn, full_shape_[0], full_shape_[1]);
    param.mul_(1 - o_.lr * o_.weight_decay);
    param.add_(update, -adjusted);
  }
  std::map<std::string, at::Tensor> state() const override { return {{"momentum_buffer", buf_}}; }

 private:
  MuonOptions o_;
  std::vector<int64_t> full_shape_;
  at::Tensor buf_;
};

class AdamW final : public TensorOptimizer {
 public:
  explicit AdamW(AdamWOptions o) : o_(o) {}
  OptimizerKind kind() const override { return OptimizerKind::adamw; }
  void step(at::Tensor& param, const at::Tensor& grad) override {
    TORCH_CHECK(param.sizes() == grad.sizes(), "adamw: parameter and gradient shapes differ");
    if (!exp_avg_.defined()) {
      exp_avg_ = at::zeros_like(param);
      exp_avg_sq_ = at::zeros_like(param);
    }
    // torch keeps `step` as a float32 tensor and reads it back with item().
    step_ = static_cast<double>(static_cast<float>(step_ + 1));
    if (o_.weight_decay != 0) param.mul_(1 - o_.lr * o_.weight_decay);
    exp_avg_.lerp_(grad, 1 - o_.beta1);
    exp_avg_sq_.mul_(o_.beta2).addcmul_(grad, grad, 1 - o_.beta2);
    const double bias_correction1 = 1 - std::pow(o_.beta1, step_);
    const double bias_correction2 = 1 - std::pow(o_.beta2, step_);
    const double step_size = o_.lr / bias_correction1;
    const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
    at::Tensor denom = (exp_avg_sq_.sqrt() / bias_correction2_sqrt).add_(o_.eps);
    param.addcdiv_(exp_avg_, denom, -step_size);
  }
  std::map<std::string, at::Tensor> state() const override {
    return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
  }

 private:
  AdamWOptions o_;
  double step_ = 0;
  at::Tensor exp_avg_, exp_avg_sq_;
};

}  // namespace

std::unique_ptr<TensorOptimizer> make_muon(const MuonOptions& options, std::vector<int64_t> full_shape) {
  return std::make_unique<Muon>(options, std::move(full_shape));
}

std::unique_ptr<TensorOptimizer> make_adamw(const AdamWOptions& options) { return std::make_unique<AdamW>(options); }

}  // namespace mfsdp
