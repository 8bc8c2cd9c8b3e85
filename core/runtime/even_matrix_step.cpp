#include "core/runtime/even_matrix_step.h"

#include "core/optim/optimizer_routing.h"

#include <ATen/ops/zeros_like.h>

namespace mfsdp {

int64_t EvenMatrixStep::state_bytes() const {
  int64_t n = 0;
  for (const auto& [_, b] : momentum_)
    if (b.defined()) n += static_cast<int64_t>(b.nbytes());
  return n;
}

at::Tensor EvenMatrixStep::update_input(const EvenMatrixView& rt, int i) {
  at::Tensor grad = rt.local_grad(i);
  if (!grad.defined()) return grad;
  const MuonOptions& o = rt.options().muon;
  at::Tensor& buf = momentum_[i];
  if (!buf.defined()) buf = at::zeros_like(grad);
  buf.lerp_(grad, 1 - o.momentum);
  return o.nesterov ? grad.lerp(buf, o.momentum) : buf.clone();
}

const MuonOptions& EvenMatrixStep::muon_for(const EvenMatrixView& rt, int i) {
  auto it = muon_.find(i);
  if (it == muon_.end()) {
    const MuonOptions base = options_for(rt.options(), rt.plan().shards()[i].name).muon;
    it = muon_.emplace(i, std::make_pair(base, base)).first;
  }
  auto& [base, scaled] = it->second;
  scaled.lr = base.lr * lr_factor_;  // the schedule's lr, as TensorOptimizer::set_lr_factor
  return scaled;
}

}  // namespace mfsdp
