// NorMuon and AdaMuon on a matrix, op for op as pytorch-optimizer 4.1.0's NorMuon and AdaMuon
// (their per-parameter path; regression/optim_parity/check_muon_family.py runs them and compares bit
// for bit), orthogonalising with MuonOptions' Newton–Schulz variant. Expert tensors are stepped per
// slice (make_per_slice), each expert its own matrix, where pytorch-optimizer flattens a 3-D tensor
// into one [E, out * in] matrix.
#include "core/optim/optim.h"
#include "core/optim/optimizer_state.h"

#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/TensorOperators.h>

#include <algorithm>
#include <cmath>

namespace mfsdp {

using namespace optim_detail;

namespace {

// pytorch-optimizer's get_adjusted_lr: lr * ratio, the ratio 0.2 sqrt(max(rows, cols)) (Moonlight)
// or pow(max(1, rows / cols), 0.5) (Keller Jordan), evaluated as its Python does.
double pyopt_adjusted_lr(double lr, MuonLrAdjustment a, int64_t rows, int64_t cols) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  const double ratio = a == MuonLrAdjustment::match_rms_adamw ? 0.2 * std::sqrt(std::max(r, c)) : std::pow(std::max(1.0, r / c), 0.5);
  return lr * ratio;
}

// pytorch-optimizer's apply_weight_decay (decoupled): skipped at 0, else p *= 1 - wd * lr.
void decay(at::Tensor& param, double weight_decay, double lr) {
  if (weight_decay != 0.0) param.mul_(1.0 - weight_decay * lr);
}

// What NorMuon and AdaMuon share: their options (whose lr a schedule scales), the Newton–Schulz
// variant, the matrix shape they were made for, and the start of loading a checkpoint's state.
template <class Options>
class MuonFamily : public TensorOptimizer {
 public:
  void set_lr_factor(double factor) override { o_.lr = base_lr_ * factor; }

 protected:
  MuonFamily(const char* name, Options o, MuonOptions ns, std::vector<int64_t> shape)
      : name_(name), o_(o), ns_(std::move(ns)), shape_(std::move(shape)) {
    TORCH_CHECK(shape_.size() == 2, name_, ": needs a 2-D parameter, got ", shape_.size(), "-D");
    validate(o_), validate(ns_);
  }
  StateLoader loader(const std::map<std::string, at::Tensor>& state, const std::map<std::string, double>& scalars,
                     const std::vector<int64_t>& param_shape) const {
    check_param_shape(name_, shape_, param_shape);
    return StateLoader(name_, state, scalars);
  }

  const char* name_;
  Options o_;
  MuonOptions ns_;
  double base_lr_ = o_.lr;
  std::vector<int64_t> shape_;
};

class NorMuon final : public MuonFamily<NorMuonOptions> {
 public:
  NorMuon(NorMuonOptions o, MuonOptions ns, std::vector<int64_t> shape) : MuonFamily("normuon", o, std::move(ns), std::move(shape)) {}
  OptimizerKind kind() const override { return OptimizerKind::normuon; }
  void step(at::Tensor& param, const at::Tensor& grad) override {
    check_matrix_step("normuon", param, grad);
    if (!buf_.defined()) buf_ = at::zeros_like(grad), v_ = at::zeros({shape_[0], 1}, grad.options());
    decay(param, o_.weight_decay, o_.lr);
    buf_.lerp_(grad, 1.0 - o_.momentum);
    const at::Tensor nesterov = o_.nesterov ? grad.lerp(buf_, o_.momentum) : buf_;
    at::Tensor u = orthogonalize(nesterov, ns_).to(grad.scalar_type());
    const at::Tensor original_norm = at::linalg_vector_norm(u, 2);
    v_.lerp_(at::mean(u.square(), {-1}, /*keepdim=*/true), 1.0 - o_.beta2);
    u.div_(v_.sqrt().add_(o_.eps));
    double lr = o_.lr;
    if (o_.update_scale == NorMuonScale::preserve_norm) {
      u.mul_(original_norm / at::linalg_vector_norm(u, 2).add_(o_.eps));
      lr = pyopt_adjusted_lr(o_.lr, o_.adjust_lr, shape_[0], shape_[1]);
    } else {  // 0.2 * sqrt(numel) / norm: a float over a tensor, as Python's reciprocal() * float
      u.mul_(at::linalg_vector_norm(u, 2).add_(o_.eps).reciprocal() * (0.2 * std::sqrt(static_cast<double>(u.numel()))));
    }
    param.add_(u, -lr);
  }
  std::map<std::string, at::Tensor> state() const override {
    return {{"momentum_buffer", buf_}, {"second_momentum_buffer", v_}};
  }
  void load_state(const std::map<std::string, at::Tensor>& state, const std::map<std::string, double>& scalars,
                  const std::vector<int64_t>& param_shape) override {
    StateLoader in = loader(state, scalars, param_shape);
    at::Tensor buf, v;
    if (!in.empty()) buf = in.take("momentum_buffer", shape_), v = in.take("second_momentum_buffer", {shape_[0], 1});
    in.done();
    buf_ = buf, v_ = v;
  }

 private:
  at::Tensor buf_, v_;
};

class AdaMuon final : public MuonFamily<AdaMuonOptions> {
 public:
  AdaMuon(AdaMuonOptions o, MuonOptions ns, std::vector<int64_t> shape) : MuonFamily("adamuon", o, std::move(ns), std::move(shape)) {}
  OptimizerKind kind() const override { return OptimizerKind::adamuon; }
  void step(at::Tensor& param, const at::Tensor& grad) override {
    check_matrix_step("adamuon", param, grad);
    if (!m_.defined()) m_ = at::zeros_like(grad), v_ = at::zeros_like(grad);
    ++t_;
    decay(param, o_.weight_decay, o_.lr);
    m_.lerp_(grad, 1.0 - o_.beta1);
    // The orthogonalised update stays in Newton–Schulz's dtype from here on, as there; contiguous in
    // the logical order, as its reshape to v's flat shape makes it.
    at::Tensor u = orthogonalize(m_, ns_).contiguous();
    v_.mul_(o_.beta2).addcmul_(u, u, 1.0 - o_.beta2);
    const double bias_correction2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
    u.div_((v_ / bias_correction2).sqrt_().add_(o_.eps));
    const double scale = std::sqrt(static_cast<double>(std::min(shape_[0], shape_[1])));
    u.mul_(at::linalg_vector_norm(u, 2).add_(o_.eps).reciprocal() * scale);  // scale / (||U|| + eps), as Python
    param.add_(u, -pyopt_adjusted_lr(o_.lr, o_.adjust_lr, shape_[0], shape_[1]));
  }
  std::map<std::string, at::Tensor> state() const override { return {{"m", m_}, {"v", v_}}; }
  std::map<std::string, double> scalars() const override { return {{"step", static_cast<double>(t_)}}; }
  void load_state(const std::map<std::string, at::Tensor>& state, const std::map<std::string, double>& scalars,
                  const std::vector<int64_t>& param_shape) override {
    StateLoader in = loader(state, scalars, param_shape);
    at::Tensor m, v;
    if (!in.empty()) m = in.take("m", shape_), v = in.take("v", shape_);
    const int64_t t = scalars.empty() ? 0 : in.counter("step");
    TORCH_CHECK(m.defined() == (t > 0), "adamuon: loaded state has step ", t, m.defined() ? " with" : " without", " moments");
    in.done();
    m_ = m, v_ = v, t_ = t;
  }

 private:
  at::Tensor m_, v_;
  int64_t t_ = 0;
};

}  // namespace

std::unique_ptr<TensorOptimizer> make_normuon(const NorMuonOptions& options, const MuonOptions& ns, std::vector<int64_t> shape) {
  return std::make_unique<NorMuon>(options, ns, std::move(shape));
}

std::unique_ptr<TensorOptimizer> make_adamuon(const AdaMuonOptions& options, const MuonOptions& ns, std::vector<int64_t> shape) {
  return std::make_unique<AdaMuon>(options, ns, std::move(shape));
}

void validate(const NorMuonOptions& o) {
  check_nonnegative("normuon", "lr", o.lr);
  check_nonnegative("normuon", "weight_decay", o.weight_decay);
  check_unit("normuon", "momentum", o.momentum, false);
  check_unit("normuon", "beta2", o.beta2, false);
  check_nonnegative("normuon", "eps", o.eps);
}

void validate(const AdaMuonOptions& o) {
  check_nonnegative("adamuon", "lr", o.lr);
  check_nonnegative("adamuon", "weight_decay", o.weight_decay);
  check_unit("adamuon", "beta1", o.beta1, false);
  check_unit("adamuon", "beta2", o.beta2, false);
  check_nonnegative("adamuon", "eps", o.eps);
}

}  // namespace mfsdp
