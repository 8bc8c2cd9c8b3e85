// Shampoo: blocked Kronecker-factor preconditioning with inverse 4th roots and Adam grafting.
#include "core/optim/optim.h"
#include "core/optim/optimizer_state.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/TensorOperators.h>

namespace mfsdp {

using namespace optim_detail;

namespace {

class Shampoo final : public TensorOptimizer {
 public:
  Shampoo(ShampooOptions o, std::vector<int64_t> shape) : o_(o), shape_(std::move(shape)) {
    TORCH_CHECK(shape_.size() == 2, "shampoo: needs a 2-D parameter, got ", shape_.size(), "-D");
    validate(o_);
    if (o_.start_preconditioning_step < 0) o_.start_preconditioning_step = o_.precondition_frequency;
  }
  OptimizerKind kind() const override { return OptimizerKind::shampoo; }

  void set_lr_factor(double factor) override { o_.lr = base_lr_ * factor; }
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
  double base_lr_ = o_.lr;  // set_lr_factor's base (declared after o_)
  std::vector<int64_t> shape_;
  std::vector<Block> blocks_;
  int64_t t_ = 0;
  bool roots_ready_ = false;
};

}  // namespace

std::unique_ptr<TensorOptimizer> make_shampoo(const ShampooOptions& options, std::vector<int64_t> shape) {
  return std::make_unique<Shampoo>(options, std::move(shape));
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

}  // namespace mfsdp
