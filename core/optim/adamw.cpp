// AdamW (torch.optim.AdamW, single-tensor path, of the pinned torch, op for op).
#include "core/optim/optim.h"
#include "core/optim/optimizer_state.h"

#include <ATen/ops/zeros_like.h>
#include <ATen/TensorOperators.h>

namespace mfsdp {

using namespace optim_detail;

namespace {

class AdamW final : public TensorOptimizer {
 public:
  explicit AdamW(AdamWOptions o) : o_(o) {}
  OptimizerKind kind() const override { return OptimizerKind::adamw; }
  void set_lr_factor(double factor) override { o_.lr = base_lr_ * factor; }
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
  std::map<std::string, double> scalars() const override { return {{"step", step_}}; }
  void load_state(const std::map<std::string, at::Tensor>& state, const std::map<std::string, double>& scalars,
                  const std::vector<int64_t>& param_shape) override {
    StateLoader in("adamw", state, scalars);
    const int64_t step = in.counter("step", int64_t{1} << 24);  // exact in torch's float32 step
    at::Tensor m, v;
    if (!in.empty()) m = in.take("exp_avg", param_shape), v = in.take("exp_avg_sq", param_shape);
    TORCH_CHECK(in.empty() == (step == 0), "adamw: loaded step ", step, in.empty() ? " without" : " with",
                " moment estimates");
    in.done();
    exp_avg_ = m, exp_avg_sq_ = v, step_ = static_cast<double>(step);
  }

 private:
  AdamWOptions o_;
  double base_lr_ = o_.lr;  // set_lr_factor's base (declared after o_)
  double step_ = 0;
  at::Tensor exp_avg_, exp_avg_sq_;
};


}  // namespace

std::unique_ptr<TensorOptimizer> make_adamw(const AdamWOptions& options) {
  validate(options);
  return std::make_unique<AdamW>(options);
}

void validate(const AdamWOptions& o) {
  check_nonnegative("adamw", "lr", o.lr);
  check_unit("adamw", "beta1", o.beta1, false);
  check_unit("adamw", "beta2", o.beta2, false);
  check_nonnegative("adamw", "eps", o.eps);
  check_nonnegative("adamw", "weight_decay", o.weight_decay);
}

}  // namespace mfsdp
