#include "core/train/replica.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>

namespace mfsdp {

std::chrono::steady_clock::time_point replica_forward_backward(const TransformerModel& model, ParamMap& params,
                                                               const PrecisionPolicy& precision,
                                                               const at::Tensor& tokens, const at::Tensor& targets,
                                                               const std::function<void()>& before_backward,
                                                               ParamMap& grads, PlacementRunner::Gradients& r) {
  const auto t0 = std::chrono::steady_clock::now();
  ParamMap compute;
  for (auto& [name, p] : params) {
    p.mutable_grad() = at::Tensor();
    if (precision.casts(p.scalar_type())) {
      compute.emplace(name, p.detach().to(precision.param_dtype).set_requires_grad(true));
    } else {
      compute.emplace(name, p);
    }
  }
  at::Tensor loss = model.loss(tokens, targets, compute);
  r.loss = loss.is_meta() ? 0.0 : loss.item<double>();  // meta: a traced step (sim/trace.h)
  r.forward_s = seconds_since(t0);
  before_backward();
  const auto t1 = std::chrono::steady_clock::now();
  loss.backward();
  grads.clear();
  for (auto& [name, c] : compute) {
    at::Tensor g = c.grad().defined() ? c.grad().contiguous() : at::zeros_like(c, at::MemoryFormat::Contiguous);
    grads.emplace(name, g.to(precision.reduce_dtype));
  }
  return t1;
}

ParamMap cpu_copies(const ParamMap& params) {
  ParamMap out;
  for (const auto& [name, p] : params) out.emplace(name, p.detach().to(at::kCPU, false, /*copy=*/true));
  return out;
}

}  // namespace mfsdp
