// SOAP: Adam in the eigenbasis of Shampoo's factors, refreshed by power iteration and QR.
#include "core/optim/optim.h"
#include "core/optim/optimizer_state.h"

#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_eigh.h>
#include <ATen/ops/linalg_qr.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/TensorOperators.h>

namespace mfsdp {

using namespace optim_detail;

namespace {

class Soap final : public TensorOptimizer {
 public:
  Soap(SoapOptions o, std::vector<int64_t> shape) : o_(o), shape_(std::move(shape)) {
    TORCH_CHECK(shape_.size() == 2, "soap: needs a 2-D parameter, got ", shape_.size(), "-D");
    validate(o_);
    if (o_.shampoo_beta < 0) o_.shampoo_beta = o_.beta2;
  }
  OptimizerKind kind() const override { return OptimizerKind::soap; }

  void set_lr_factor(double factor) override { o_.lr = base_lr_ * factor; }
  void step(at::Tensor& param, const at::Tensor& grad) override {
    check_matrix_step("soap", param, grad);
    const bool rotate_left = grad.size(0) <= o_.max_precond_dim, rotate_right = grad.size(1) <= o_.max_precond_dim;
    if (!exp_avg_.defined()) {
      // First call: build the preconditioner, no update.
      exp_avg_ = at::zeros_like(grad);
      exp_avg_sq_ = at::zeros_like(grad);
      if (rotate_left) gg_left_ = at::zeros({grad.size(0), grad.size(0)}, grad.options());
      if (rotate_right) gg_right_ = at::zeros({grad.size(1), grad.size(1)}, grad.options());
      update_factors(grad);
      if (gg_left_.defined()) q_left_ = eigenbasis(gg_left_);
      if (gg_right_.defined()) q_right_ = eigenbasis(gg_right_);
      return;
    }
    ++t_;
    at::Tensor g = project(grad);
    exp_avg_.mul_(o_.beta1).add_(g, 1 - o_.beta1);
    exp_avg_sq_.mul_(o_.beta2).add_(g.square(), 1 - o_.beta2);
    at::Tensor denom = exp_avg_sq_.sqrt().add_(o_.eps);
    double step_size = o_.lr;
    if (o_.correct_bias) {
      const double bc1 = 1 - std::pow(o_.beta1, t_), bc2 = 1 - std::pow(o_.beta2, t_);
      step_size = step_size * std::sqrt(bc2) / bc1;
    }
    param.add_(project_back(exp_avg_ / denom), -step_size);
    if (o_.weight_decay > 0) param.add_(param, -o_.lr * o_.weight_decay);
    update_factors(grad);
    if (t_ % o_.precondition_frequency == 0) refresh_basis();
  }

  std::map<std::string, at::Tensor> state() const override {
    std::map<std::string, at::Tensor> out{{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
    if (gg_left_.defined()) out["GG_left"] = gg_left_, out["Q_left"] = q_left_;
    if (gg_right_.defined()) out["GG_right"] = gg_right_, out["Q_right"] = q_right_;
    return out;
  }
  std::map<std::string, double> scalars() const override { return {{"step", static_cast<double>(t_)}}; }
  void load_state(const std::map<std::string, at::Tensor>& state, const std::map<std::string, double>& scalars,
                  const std::vector<int64_t>& param_shape) override {
    check_param_shape("soap", shape_, param_shape);
    StateLoader in("soap", state, scalars);
    const int64_t t = in.counter("step");
    const int64_t m = shape_[0], n = shape_[1];
    at::Tensor exp_avg, exp_avg_sq, gg_left, gg_right, q_left, q_right;
    if (!in.empty()) {  // built on the first call, whose step count is still 0
      exp_avg = in.take("exp_avg", shape_), exp_avg_sq = in.take("exp_avg_sq", shape_);
      if (m <= o_.max_precond_dim) gg_left = in.take("GG_left", {m, m}), q_left = in.take("Q_left", {m, m});
      if (n <= o_.max_precond_dim) gg_right = in.take("GG_right", {n, n}), q_right = in.take("Q_right", {n, n});
    }
    TORCH_CHECK(!in.empty() || t == 0, "soap: loaded step ", t, " without state");
    in.done();
    exp_avg_ = exp_avg, exp_avg_sq_ = exp_avg_sq, gg_left_ = gg_left, gg_right_ = gg_right, q_left_ = q_left, q_right_ = q_right;
    t_ = t;
  }

 private:
  void update_factors(const at::Tensor& g) {
    if (gg_left_.defined()) gg_left_.lerp_(at::mm(g, g.t()), 1 - o_.shampoo_beta);
    if (gg_right_.defined()) gg_right_.lerp_(at::mm(g.t(), g), 1 - o_.shampoo_beta);
  }
  at::Tensor project(const at::Tensor& x) const {
    at::Tensor y = x;
    if (q_left_.defined()) y = at::mm(q_left_.t(), y);
    if (q_right_.defined()) y = at::mm(y, q_right_);
    return y;
  }
  at::Tensor project_back(const at::Tensor& x) const {
    at::Tensor y = x;
    if (q_left_.defined()) y = at::mm(q_left_, y);
    if (q_right_.defined()) y = at::mm(y, q_right_.t());
    return y;
  }
  // Eigenvectors of a factor, by descending eigenvalue: float32 eigendecomposition of
  // GG + 1e-30 I, falling back to float64 where it fails.
  static at::Tensor eigenbasis(const at::Tensor& gg) {
    const auto n = gg.size(0);
    at::Tensor eye = at::eye(n, gg.options().dtype(at::kFloat));
    at::Tensor vectors;
    try {
      vectors = std::get<1>(at::linalg_eigh(gg.to(at::kFloat) + eye * 1e-30));
    } catch (const c10::Error&) {
      vectors = std::get<1>(at::linalg_eigh(gg.to(at::kDouble) + eye.to(at::kDouble) * 1e-30)).to(at::kFloat);
    }
    return vectors.flip({1}).to(gg.scalar_type()).contiguous();
  }
  // One power iteration + QR per side, columns ordered by the estimated eigenvalue (descending),
  // the second moment permuted to the new order and the first moment re-projected.
  void refresh_basis() {
    at::Tensor m_full = project_back(exp_avg_);
    auto refresh = [&](at::Tensor& q, const at::Tensor& gg, int dim) {
      at::Tensor estimated = at::mm(at::mm(q.t(), gg), q).diagonal();
      at::Tensor order = estimated.argsort(/*stable=*/true, /*dim=*/0, /*descending=*/true);
      exp_avg_sq_ = exp_avg_sq_.index_select(dim, order);
      at::Tensor ordered = q.index_select(1, order);
      q = std::get<0>(at::linalg_qr(at::mm(gg, ordered))).contiguous();
    };
    if (q_left_.defined()) refresh(q_left_, gg_left_, 0);
    if (q_right_.defined()) refresh(q_right_, gg_right_, 1);
    exp_avg_ = project(m_full).contiguous();
  }

  SoapOptions o_;
  double base_lr_ = o_.lr;  // set_lr_factor's base (declared after o_)
  std::vector<int64_t> shape_;
  int64_t t_ = 0;
  at::Tensor exp_avg_, exp_avg_sq_, gg_left_, gg_right_, q_left_, q_right_;
};

}  // namespace

std::unique_ptr<TensorOptimizer> make_soap(const SoapOptions& options, std::vector<int64_t> shape) {
  return std::make_unique<Soap>(options, std::move(shape));
}

void validate(const SoapOptions& o) {
  check_nonnegative("soap", "lr", o.lr);
  check_unit("soap", "beta1", o.beta1, false);
  check_unit("soap", "beta2", o.beta2, false);
  if (o.shampoo_beta != -1) check_unit("soap", "shampoo_beta", o.shampoo_beta, false);
  check_nonnegative("soap", "eps", o.eps);
  check_nonnegative("soap", "weight_decay", o.weight_decay);
  TORCH_CHECK(o.precondition_frequency > 0, "soap: precondition_frequency must be > 0, got ", o.precondition_frequency);
  TORCH_CHECK(o.max_precond_dim > 0, "soap: max_precond_dim must be > 0, got ", o.max_precond_dim);
}

}  // namespace mfsdp
