#include "core/train/replica.h"

#include <ATen/ops/empty.h>

namespace mfsdp {

std::chrono::steady_clock::time_point replica_forward_backward(const TransformerModel& model, ParamMap& params,
                                                               const at::Tensor& tokens, const at::Tensor& targets,
                                                               const std::function<void()>& before_backward,
                                                               PlacementRunner::Result& r) {
  for (auto& [_, p] : params) p.mutable_grad() = at::Tensor();
  const auto t0 = std::chrono::steady_clock::now();
  at::Tensor loss = model.loss(tokens, targets, params);
  r.loss = loss.item<double>();
  r.forward_s = seconds_since(t0);
  before_backward();
  const auto t1 = std::chrono::steady_clock::now();
  loss.backward();
  return t1;
}

ParamMap cpu_copies(const ParamMap& params) {
  ParamMap out;
  for (const auto& [name, p] : params) out.emplace(name, p.detach().to(at::kCPU, false, /*copy=*/true));
  return out;
}

}  // namespace mfsdp
