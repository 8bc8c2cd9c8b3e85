// An expert tensor [n, out, in] stepped as n matrices, each with its own optimizer; and the
// state size every optimizer reports.
#include "core/optim/optim.h"
#include "core/optim/optimizer_state.h"

#include <ATen/ops/stack.h>

namespace mfsdp {

using namespace optim_detail;

int64_t TensorOptimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& [_, t] : state()) n += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  return n;
}

namespace {

// A 3-D expert tensor [n, out, in] as n matrices: slice e steps with its own optimizer on the
// contiguous view param[e], exactly as a 2-D parameter of that shape would.
class PerSlice final : public TensorOptimizer {
 public:
  explicit PerSlice(std::vector<std::unique_ptr<TensorOptimizer>> slices) : slices_(std::move(slices)) {
    TORCH_CHECK(!slices_.empty(), "per-slice optimizer: no slices");
  }
  OptimizerKind kind() const override { return slices_[0]->kind(); }
  void set_lr_factor(double factor) override {
    for (auto& s : slices_) s->set_lr_factor(factor);
  }
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

std::unique_ptr<TensorOptimizer> make_per_slice(std::vector<std::unique_ptr<TensorOptimizer>> slices) {
  return std::make_unique<PerSlice>(std::move(slices));
}

}  // namespace mfsdp
