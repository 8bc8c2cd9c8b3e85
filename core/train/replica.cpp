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
    grads.emplace(name, g);
  }
  return t1;
}

bool ReplicaAccumulation::keep(ParamMap& grads, const ParamMap& params, const MicroBatch& mb) {
  if (mode_ != GradReduce::deferred || mb.count == 1) return true;
  for (auto& [name, g] : grads) accumulate(local_sums_[name], g, mb.first(), accumulation_dtype(params.at(name).scalar_type()));
  if (!mb.last()) return false;
  grads = std::move(local_sums_);
  local_sums_.clear();
  return true;
}

at::Tensor ReplicaAccumulation::reduced(const std::string& name, const std::vector<at::Tensor>& parts, int replicas,
                                        c10::ScalarType dtype, const MicroBatch& mb) {
  const int64_t W = static_cast<int64_t>(parts.size());
  if (mode_ == GradReduce::deferred || mb.count == 1) return mean_in_mesh_order(parts, replicas, dtype, W * mb.count);
  accumulate(reduced_sums_[name], sum_in_mesh_order(parts, replicas, dtype), mb.first(), accumulation_dtype(dtype));
  if (!mb.last()) return at::Tensor();
  at::Tensor sum = std::move(reduced_sums_.at(name));
  reduced_sums_.erase(name);
  return divide_sum(std::move(sum), W * mb.count, dtype);
}

ParamMap cpu_copies(const ParamMap& params) {
  ParamMap out;
  for (const auto& [name, p] : params) out.emplace(name, p.detach().to(at::kCPU, false, /*copy=*/true));
  return out;
}

}  // namespace mfsdp
