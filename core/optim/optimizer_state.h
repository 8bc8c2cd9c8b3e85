// The pieces every optimizer of core/optim shares: checks of a step's inputs, the loader that
// takes a saved state apart entry by entry, and the hyperparameter checks behind validate().
// Internal to core/optim (callers include optim.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace mfsdp::optim_detail {

inline void check_matrix_step(const char* name, const at::Tensor& param, const at::Tensor& grad) {
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

inline void check_param_shape(const char* optimizer, const std::vector<int64_t>& mine, const std::vector<int64_t>& given) {
  TORCH_CHECK(mine == given, optimizer, ": state loaded for a parameter of shape ", at::IntArrayRef(given),
              ", but this optimizer steps shape ", at::IntArrayRef(mine));
}

// Hyperparameter checks, naming the optimizer and the field.
inline void check_finite(const char* optimizer, const char* field, double v) {
  TORCH_CHECK(std::isfinite(v), optimizer, ": ", field, " must be finite, got ", v);
}
inline void check_unit(const char* optimizer, const char* field, double v, bool one_allowed) {
  check_finite(optimizer, field, v);
  TORCH_CHECK(v >= 0 && (one_allowed ? v <= 1 : v < 1), optimizer, ": ", field, " must be in [0, ", one_allowed ? "1]" : "1)",
              ", got ", v);
}
inline void check_nonnegative(const char* optimizer, const char* field, double v) {
  check_finite(optimizer, field, v);
  TORCH_CHECK(v >= 0, optimizer, ": ", field, " must be >= 0, got ", v);
}

}  // namespace mfsdp::optim_detail
