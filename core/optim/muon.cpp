// Muon (torch.optim.Muon of the pinned torch, op for op), on a matrix or batched on an expert tensor.
#include "core/optim/optim.h"
#include "core/optim/optimizer_state.h"

#include <ATen/ops/zeros_like.h>

namespace mfsdp {

using namespace optim_detail;

namespace {

// Muon on a 2-D matrix or, batched (MuonOptions::batched_ns), on an expert tensor [n, out, in] with
// one batched Newton–Schulz chain; everything else element-wise, the lr adjusted from the last two
// dimensions (the per-slice Muon's, whose stacked state the batched one keeps).
class Muon final : public TensorOptimizer {
 public:
  Muon(MuonOptions o, std::vector<int64_t> shape, bool batched)
      : o_(std::move(o)), shape_(std::move(shape)), batched_(batched) {
    TORCH_CHECK(shape_.size() == (batched_ ? 3u : 2u), "muon: ",
                batched_ ? "batched Newton–Schulz needs a 3-D expert tensor" : "needs a 2-D parameter", ", got ",
                shape_.size(), "-D");
    validate(o_);
  }
  OptimizerKind kind() const override { return OptimizerKind::muon; }
  void set_lr_factor(double factor) override { o_.lr = base_lr_ * factor; }
  void step(at::Tensor& param, const at::Tensor& grad) override {
    if (batched_) {
      TORCH_CHECK(param.sizes() == grad.sizes() && param.sizes() == at::IntArrayRef(shape_), "muon: batched step of shape ",
                  at::IntArrayRef(shape_), " got a parameter of shape ", param.sizes(), " and a gradient of shape ", grad.sizes());
    } else {
      check_matrix_step("muon", param, grad);
    }
    if (!buf_.defined()) buf_ = at::zeros_like(grad);
    buf_.lerp_(grad, 1 - o_.momentum);
    at::Tensor update = o_.nesterov ? grad.lerp(buf_, o_.momentum) : buf_;
    update = batched_ ? newton_schulz_batched(update, o_) : newton_schulz(update, o_);
    const size_t d = shape_.size();
    const double adjusted = muon_adjusted_lr(o_.lr, o_.adjust_lr, shape_[d - 2], shape_[d - 1]);
    param.mul_(1 - o_.lr * o_.weight_decay);
    param.add_(update, -adjusted);
  }
  std::map<std::string, at::Tensor> state() const override { return {{"momentum_buffer", buf_}}; }
  void load_state(const std::map<std::string, at::Tensor>& state, const std::map<std::string, double>& scalars,
                  const std::vector<int64_t>& param_shape) override {
    check_param_shape("muon", shape_, param_shape);
    StateLoader in("muon", state, scalars);
    at::Tensor buf = in.empty() ? at::Tensor() : in.take("momentum_buffer", shape_);
    in.done();
    buf_ = buf;
  }

 private:
  MuonOptions o_;
  double base_lr_ = o_.lr;  // set_lr_factor's base (declared after o_)
  std::vector<int64_t> shape_;
  bool batched_;
  at::Tensor buf_;
};

}  // namespace

std::unique_ptr<TensorOptimizer> make_batched_muon(const MuonOptions& options, std::vector<int64_t> shape) {
  return std::make_unique<Muon>(options, std::move(shape), /*batched=*/true);
}

std::unique_ptr<TensorOptimizer> make_muon(const MuonOptions& options, std::vector<int64_t> full_shape) {
  return std::make_unique<Muon>(options, std::move(full_shape), /*batched=*/false);
}

void validate(const MuonOptions& o) {
  check_nonnegative("muon", "lr", o.lr);
  check_nonnegative("muon", "weight_decay", o.weight_decay);
  check_unit("muon", "momentum", o.momentum, false);
  check_finite("muon", "ns_a", o.ns_a), check_finite("muon", "ns_b", o.ns_b), check_finite("muon", "ns_c", o.ns_c);
  check_nonnegative("muon", "eps", o.eps);
  TORCH_CHECK(o.ns_steps >= 0, "muon: ns_steps must be >= 0, got ", o.ns_steps);
  const NsVariantInfo& v = ns_variant_info(o.ns_variant);
  TORCH_CHECK(v.fixed_steps == 0 || o.ns_steps == v.fixed_steps, "muon: the Newton-Schulz variant ", v.name, " pins ",
              v.fixed_steps, " steps (its table), got ns_steps ", o.ns_steps);
}

}  // namespace mfsdp
