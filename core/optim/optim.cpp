#include "core/optim/optim.h"

#include <ATen/ops/addmm.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_eigh.h>
#include <ATen/ops/linalg_qr.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/stack.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

#include <algorithm>
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

namespace {

void check_matrix_step(const char* name, const at::Tensor& param, const at::Tensor& grad) {
  TORCH_CHECK(grad.dim() == 2 && param.sizes() == grad.sizes(), name, ": parameter and gradient must be the same 2-D shape, got ",
              param.sizes(), " and ", grad.sizes());
  TORCH_CHECK(at::isFloatingType(grad.scalar_type()) && !at::isComplexType(grad.scalar_type()), name,
              ": needs a real floating-point tensor, got ", grad.scalar_type());
}

// Takes entries out of a loaded state, checking each; done() checks nothing was left over.
class StateLoader {
 public:
  StateLoader(const char* optimizer, const std::map<std::string, at::Tensor>& state,
              const std::map<std::string, double>& scalars)
      : optimizer_(optimizer), state_(state), scalars_(scalars) {}
  bool empty() const { return state_.empty(); }
  bool has(const std::string& name) const { return state_.count(name) > 0; }
  at::Tensor take(const std::string& name, const std::vector<int64_t>& shape) {
    auto it = state_.find(name);
    TORCH_CHECK(it != state_.end(), optimizer_, ": loaded state lacks '", name, "'");
    const at::Tensor& t = it->second;
    TORCH_CHECK(t.defined() && t.sizes() == at::IntArrayRef(shape), optimizer_, ": loaded state '", name, "' has shape ",
                t.defined() ? t.sizes() : at::IntArrayRef{}, ", expected ", at::IntArrayRef(shape));
    TORCH_CHECK(at::isFloatingType(t.scalar_type()), optimizer_, ": loaded state '", name, "' has dtype ",
                t.scalar_type(), ", expected a floating-point type");
    taken_.push_back(name);
    return t;
  }
  // A counter: a non-negative integer (AdamW's step is an integer-valued float, as in torch).
  int64_t counter(const std::string& name, int64_t max = int64_t{1} << 52) {
    auto it = scalars_.find(name);
    TORCH_CHECK(it != scalars_.end(), optimizer_, ": loaded state lacks the scalar '", name, "'");
    const double v = it->second;
    TORCH_CHECK(std::isfinite(v) && v >= 0 && v <= static_cast<double>(max) && v == std::floor(v), optimizer_,
                ": loaded scalar '", name, "' must be an integer in [0, ", max, "], got ", v);
    taken_scalars_.push_back(name);
    return static_cast<int64_t>(v);
  }
  void done() const {
    for (const auto& [name, _] : state_)
      TORCH_CHECK(std::find(taken_.begin(), taken_.end(), name) != taken_.end(), optimizer_,
                  ": loaded state has an unknown entry '", name, "'");
    for (const auto& [name, _] : scalars_)
      TORCH_CHECK(std::find(taken_scalars_.begin(), taken_scalars_.end(), name) != taken_scalars_.end(), optimizer_,
                  ": loaded state has an unknown scalar '", name, "'");
  }

 private:
  const char* optimizer_;
  const std::map<std::string, at::Tensor>& state_;
  const std::map<std::string, double>& scalars_;
  std::vector<std::string> taken_, taken_scalars_;
};

void check_param_shape(const char* optimizer, const std::vector<int64_t>& mine, const std::vector<int64_t>& given) {
  TORCH_CHECK(mine == given, optimizer, ": state loaded for a parameter of shape ", at::IntArrayRef(given),
              ", but this optimizer steps shape ", at::IntArrayRef(mine));
}

}  // namespace

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
  std::vector<int64_t> shape_;
  bool batched_;
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
  double step_ = 0;
  at::Tensor exp_avg_, exp_avg_sq_;
};


// ---- Shampoo -----------------------------------------------------------------------------------

class Shampoo final : public TensorOptimizer {
 public:
  Shampoo(ShampooOptions o, std::vector<int64_t> shape) : o_(o), shape_(std::move(shape)) {
    TORCH_CHECK(shape_.size() == 2, "shampoo: needs a 2-D parameter, got ", shape_.size(), "-D");
    validate(o_);
    if (o_.start_preconditioning_step < 0) o_.start_preconditioning_step = o_.precondition_frequency;
  }
  OptimizerKind kind() const override { return OptimizerKind::shampoo; }

  void step(at::Tensor& param, const at::Tensor& grad) override {
    check_matrix_step("shampoo", param, grad);
    ++t_;
    const int64_t D = o_.max_preconditioner_dim;
    std::vector<at::Tensor> g_blocks = blocks_of(grad, D);
    if (blocks_.empty()) {
      for (const at::Tensor& g : g_blocks) {
        Block b;
        b.left = at::zeros({g.size(0), g.size(0)}, g.options());
        b.right = at::zeros({g.size(1), g.size(1)}, g.options());
        b.left_root = at::zeros_like(b.left);
        b.right_root = at::zeros_like(b.right);
        b.momentum = at::zeros_like(g);
        if (o_.adam_grafting) b.graft_v = at::zeros_like(g);
        blocks_.push_back(std::move(b));
      }
    }
    const bool recompute = t_ % o_.precondition_frequency == 0 || !roots_ready_;
    const bool precondition = t_ >= o_.start_preconditioning_step;
    const double bc1 = o_.use_bias_correction ? 1 - std::pow(o_.beta1, t_) : 1.0;
    const double bc2g = o_.use_bias_correction ? 1 - std::pow(o_.grafting_beta2, t_) : 1.0;
    if (o_.weight_decay != 0) param.mul_(1 - o_.lr * o_.weight_decay);
    std::vector<at::Tensor> p_blocks = blocks_of(param, D);
    for (size_t k = 0; k < blocks_.size(); ++k) {
      Block& b = blocks_[k];
      const at::Tensor& g = g_blocks[k];
      // Factor statistics from the raw gradient.
      if (o_.beta2 == 1.0) {
        b.left.addmm_(g, g.t());
        b.right.addmm_(g.t(), g);
      } else {
        b.left.mul_(o_.beta2).addmm_(g, g.t(), 1.0, 1 - o_.beta2);
        b.right.mul_(o_.beta2).addmm_(g.t(), g, 1.0, 1 - o_.beta2);
      }
      b.momentum.lerp_(g, 1 - o_.beta1);
      at::Tensor m_hat = b.momentum / bc1;
      at::Tensor graft;
      if (o_.adam_grafting) {
        b.graft_v.mul_(o_.grafting_beta2).addcmul_(g, g, 1 - o_.grafting_beta2);
        graft = m_hat / (b.graft_v / bc2g).sqrt_().add_(o_.grafting_epsilon);
      } else {
        graft = m_hat;
      }
      at::Tensor direction = graft;
      if (precondition) {
        if (recompute) {
          b.left_root = matrix_inverse_root(b.left, 4, o_.epsilon);
          b.right_root = matrix_inverse_root(b.right, 4, o_.epsilon);
        }
        direction = at::mm(at::mm(b.left_root, m_hat), b.right_root);
        if (o_.adam_grafting && !direction.is_meta()) {  // meta: a traced step (sim/trace.h)
          const double shampoo_norm = at::linalg_vector_norm(direction, 2).item<double>();
          const double graft_norm = at::linalg_vector_norm(graft, 2).item<double>();
          if (shampoo_norm > 0) direction = direction * (graft_norm / shampoo_norm);
        }
      }
      p_blocks[k].add_(direction, -o_.lr);
    }
    if (precondition && recompute) roots_ready_ = true;
  }

  std::map<std::string, at::Tensor> state() const override {
    std::map<std::string, at::Tensor> out;
    for (size_t k = 0; k < blocks_.size(); ++k) {
      const std::string pre = "block_" + std::to_string(k) + ".";
      const Block& b = blocks_[k];
      out[pre + "factor_left"] = b.left;
      out[pre + "factor_right"] = b.right;
      out[pre + "inv_root_left"] = b.left_root;
      out[pre + "inv_root_right"] = b.right_root;
      out[pre + "momentum"] = b.momentum;
      if (b.graft_v.defined()) out[pre + "grafting_exp_avg_sq"] = b.graft_v;
    }
    return out;
  }
  std::map<std::string, double> scalars() const override {
    return {{"step", static_cast<double>(t_)}, {"roots_ready", roots_ready_ ? 1.0 : 0.0}};
  }
  void load_state(const std::map<std::string, at::Tensor>& state, const std::map<std::string, double>& scalars,
                  const std::vector<int64_t>& param_shape) override {
    check_param_shape("shampoo", shape_, param_shape);
    StateLoader in("shampoo", state, scalars);
    const int64_t t = in.counter("step");
    const bool ready = in.counter("roots_ready", 1) == 1;
    std::vector<Block> blocks;
    if (!in.empty()) {
      // The block shapes follow from the parameter's shape and max_preconditioner_dim.
      const at::Tensor probe = at::empty(shape_, at::TensorOptions().device(at::kMeta));
      const std::vector<at::Tensor> shapes = blocks_of(probe, o_.max_preconditioner_dim);
      for (size_t k = 0; k < shapes.size(); ++k) {
        const std::string pre = "block_" + std::to_string(k) + ".";
        const int64_t m = shapes[k].size(0), n = shapes[k].size(1);
        Block b;
        b.left = in.take(pre + "factor_left", {m, m});
        b.right = in.take(pre + "factor_right", {n, n});
        b.left_root = in.take(pre + "inv_root_left", {m, m});
        b.right_root = in.take(pre + "inv_root_right", {n, n});
        b.momentum = in.take(pre + "momentum", {m, n});
        if (o_.adam_grafting) b.graft_v = in.take(pre + "grafting_exp_avg_sq", {m, n});
        blocks.push_back(std::move(b));
      }
    }
    TORCH_CHECK(blocks.empty() == (t == 0), "shampoo: loaded step ", t, blocks.empty() ? " without" : " with", " block state");
    in.done();
    blocks_ = std::move(blocks), t_ = t, roots_ready_ = ready;
  }

 private:
  struct Block {
    at::Tensor left, right, left_root, right_root, momentum, graft_v;
  };
  // Views of `t` cut into blocks of at most D x D, row-block major.
  static std::vector<at::Tensor> blocks_of(const at::Tensor& t, int64_t D) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& rows : t.split(D, 0))
      for (const at::Tensor& b : rows.split(D, 1)) out.push_back(b);
    return out;
  }
  ShampooOptions o_;
  std::vector<int64_t> shape_;
  std::vector<Block> blocks_;
  int64_t t_ = 0;
  bool roots_ready_ = false;
};

// ---- SOAP --------------------------------------------------------------------------------------

class Soap final : public TensorOptimizer {
 public:
  Soap(SoapOptions o, std::vector<int64_t> shape) : o_(o), shape_(std::move(shape)) {
    TORCH_CHECK(shape_.size() == 2, "soap: needs a 2-D parameter, got ", shape_.size(), "-D");
    validate(o_);
    if (o_.shampoo_beta < 0) o_.shampoo_beta = o_.beta2;
  }
  OptimizerKind kind() const override { return OptimizerKind::soap; }

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
  std::vector<int64_t> shape_;
  int64_t t_ = 0;
  at::Tensor exp_avg_, exp_avg_sq_, gg_left_, gg_right_, q_left_, q_right_;
};

}  // namespace

namespace {

// A 3-D expert tensor [n, out, in] as n matrices: slice e steps with its own optimizer on the
// contiguous view param[e], exactly as a 2-D parameter of that shape would.
class PerSlice final : public TensorOptimizer {
 public:
  explicit PerSlice(std::vector<std::unique_ptr<TensorOptimizer>> slices) : slices_(std::move(slices)) {
    TORCH_CHECK(!slices_.empty(), "per-slice optimizer: no slices");
  }
  OptimizerKind kind() const override { return slices_[0]->kind(); }
  void step(at::Tensor& param, const at::Tensor& grad) override {
    TORCH_CHECK(param.dim() == 3 && param.size(0) == static_cast<int64_t>(slices_.size()) && param.sizes() == grad.sizes(),
                to_string(kind()), ": per-slice step of ", slices_.size(), " experts got a parameter of shape ",
                param.sizes(), " and a gradient of shape ", grad.sizes());
    for (size_t e = 0; e < slices_.size(); ++e) {
      at::Tensor p = param.select(0, static_cast<int64_t>(e));
      slices_[e]->step(p, grad.select(0, static_cast<int64_t>(e)));
    }
  }
  // Every entry stacked over the slices (leading dimension n): rows of the state are experts, as
  // rows of the parameter are, so checkpoints cut and join them like element-wise state.
  std::map<std::string, at::Tensor> state() const override {
    std::map<std::string, at::Tensor> out;
    for (const auto& [key, first] : slices_[0]->state()) {
      if (!first.defined()) {
        out[key] = at::Tensor();
        continue;
      }
      std::vector<at::Tensor> parts;
      for (const auto& s : slices_) parts.push_back(s->state().at(key));
      out[key] = at::stack(parts);
    }
    return out;
  }
  std::map<std::string, double> scalars() const override { return slices_[0]->scalars(); }  // equal on every slice
  void load_state(const std::map<std::string, at::Tensor>& state, const std::map<std::string, double>& scalars,
                  const std::vector<int64_t>& param_shape) override {
    const int64_t n = static_cast<int64_t>(slices_.size());
    TORCH_CHECK(param_shape.size() == 3 && param_shape[0] == n, to_string(kind()), ": per-slice state of ", n,
                " experts loaded for a parameter of shape ", at::IntArrayRef(param_shape));
    const std::vector<int64_t> slice_shape(param_shape.begin() + 1, param_shape.end());
    for (const auto& [key, t] : state) {
      TORCH_CHECK(!t.defined() || (t.dim() >= 1 && t.size(0) == n), to_string(kind()), ": state '", key, "' of ", n,
                  " experts has shape ", t.defined() ? t.sizes() : at::IntArrayRef{});
    }
    for (int64_t e = 0; e < n; ++e) {
      std::map<std::string, at::Tensor> mine;
      for (const auto& [key, t] : state) mine[key] = t.defined() ? t.select(0, e).clone() : at::Tensor();
      slices_[e]->load_state(mine, scalars, slice_shape);
    }
  }

 private:
  std::vector<std::unique_ptr<TensorOptimizer>> slices_;
};

}  // namespace

std::unique_ptr<TensorOptimizer> make_batched_muon(const MuonOptions& options, std::vector<int64_t> shape) {
  return std::make_unique<Muon>(options, std::move(shape), /*batched=*/true);
}

std::unique_ptr<TensorOptimizer> make_per_slice(std::vector<std::unique_ptr<TensorOptimizer>> slices) {
  return std::make_unique<PerSlice>(std::move(slices));
}

std::unique_ptr<TensorOptimizer> make_muon(const MuonOptions& options, std::vector<int64_t> full_shape) {
  return std::make_unique<Muon>(options, std::move(full_shape), /*batched=*/false);
}

std::unique_ptr<TensorOptimizer> make_adamw(const AdamWOptions& options) {
  validate(options);
  return std::make_unique<AdamW>(options);
}

std::unique_ptr<TensorOptimizer> make_shampoo(const ShampooOptions& options, std::vector<int64_t> shape) {
  return std::make_unique<Shampoo>(options, std::move(shape));
}

std::unique_ptr<TensorOptimizer> make_soap(const SoapOptions& options, std::vector<int64_t> shape) {
  return std::make_unique<Soap>(options, std::move(shape));
}

namespace {
void check_finite(const char* optimizer, const char* field, double v) {
  TORCH_CHECK(std::isfinite(v), optimizer, ": ", field, " must be finite, got ", v);
}
void check_unit(const char* optimizer, const char* field, double v, bool one_allowed) {
  check_finite(optimizer, field, v);
  TORCH_CHECK(v >= 0 && (one_allowed ? v <= 1 : v < 1), optimizer, ": ", field, " must be in [0, ", one_allowed ? "1]" : "1)",
              ", got ", v);
}
void check_nonnegative(const char* optimizer, const char* field, double v) {
  check_finite(optimizer, field, v);
  TORCH_CHECK(v >= 0, optimizer, ": ", field, " must be >= 0, got ", v);
}
}  // namespace

void validate(const MuonOptions& o) {
  check_nonnegative("muon", "lr", o.lr);
  check_nonnegative("muon", "weight_decay", o.weight_decay);
  check_unit("muon", "momentum", o.momentum, false);
  check_finite("muon", "ns_a", o.ns_a), check_finite("muon", "ns_b", o.ns_b), check_finite("muon", "ns_c", o.ns_c);
  check_nonnegative("muon", "eps", o.eps);
  TORCH_CHECK(o.ns_steps >= 0, "muon: ns_steps must be >= 0, got ", o.ns_steps);
}

void validate(const AdamWOptions& o) {
  check_nonnegative("adamw", "lr", o.lr);
  check_unit("adamw", "beta1", o.beta1, false);
  check_unit("adamw", "beta2", o.beta2, false);
  check_nonnegative("adamw", "eps", o.eps);
  check_nonnegative("adamw", "weight_decay", o.weight_decay);
}

void validate(const ShampooOptions& o) {
  check_nonnegative("shampoo", "lr", o.lr);
  check_unit("shampoo", "beta1", o.beta1, false);
  check_unit("shampoo", "beta2", o.beta2, true);
  TORCH_CHECK(o.beta2 > 0, "shampoo: beta2 must be > 0, got ", o.beta2);
  check_nonnegative("shampoo", "epsilon", o.epsilon);
  TORCH_CHECK(o.epsilon > 0, "shampoo: epsilon must be > 0 (it regularises the root inverse)");
  check_nonnegative("shampoo", "weight_decay", o.weight_decay);
  TORCH_CHECK(o.max_preconditioner_dim > 0, "shampoo: max_preconditioner_dim must be > 0, got ", o.max_preconditioner_dim);
  TORCH_CHECK(o.precondition_frequency > 0, "shampoo: precondition_frequency must be > 0, got ", o.precondition_frequency);
  check_unit("shampoo", "grafting_beta2", o.grafting_beta2, false);
  check_nonnegative("shampoo", "grafting_epsilon", o.grafting_epsilon);
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
