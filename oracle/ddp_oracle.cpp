#include "oracle/ddp_oracle.h"

#include "core/runtime/clipping.h"
#include "core/runtime/reduction.h"
#include "core/train/replica.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <cstring>

namespace mfsdp {

DdpOracle::DdpOracle(const TransformerModel& model, Communicator& comm, const OptimizerOptions& options,
                     const ParamMap& init, OracleStep step)
    : model_(model), comm_(comm), step_(step), accumulation_(step.grad_reduce) {
  const int replicas = step.replicas;
  if (step.max_norm != 0) check_max_norm(step.max_norm, "oracle");
  TORCH_CHECK(replicas >= 1 && comm.world_size() % replicas == 0, "oracle: ", replicas,
              " replicas do not divide the world size ", comm.world_size());
  for (const ParamSpec& p : model.spec().params) {
    order_.push_back(p.name);
    params_.emplace(p.name, init.at(p.name).clone().set_requires_grad(true));
    optimizers_.emplace(p.name, make_optimizer(options, p.name, matrix_kind(p.kind), p.shape));
  }
}

PlacementRunner::Gradients DdpOracle::forward_backward(const at::Tensor& tokens, const at::Tensor& targets,
                                                        const std::function<void()>& before_backward,
                                                        const MicroBatch& micro_batch) {
  Gradients r;
  ParamMap local;
  auto t0 = replica_forward_backward(model_, params_, step_.precision, tokens, targets, before_backward, local, r);
  if (accumulation_.keep(local, params_, micro_batch)) {
    const int W = comm_.world_size();
    PhaseScope phase(comm_, Phase::grad_reduce);
    for (const std::string& name : order_) {
      const at::Tensor g = local.at(name).to(step_.precision.reduce_dtype);  // the wire dtype
      at::Tensor all = at::empty({W * g.numel()}, g.options());
      at::Tensor flat = g.reshape({-1});
      comm_.allgather(all, flat)->wait();
      std::vector<at::Tensor> parts;
      for (int rank = 0; rank < W; ++rank) parts.push_back(all.narrow(0, rank * g.numel(), g.numel()).view(g.sizes()));
      // a master gradient, at the last micro-batch
      grads_[name] = accumulation_.reduced(name, parts, step_.replicas, params_.at(name).scalar_type(), micro_batch);
    }
    if (micro_batch.last() && step_.max_norm > 0) {
      std::vector<at::Tensor> grads;
      for (const std::string& name : order_) grads.push_back(grads_.at(name));
      grad_norm_ = clip_full_gradients(grads, step_.max_norm).item<double>();
    }
  }
  r.backward_s = seconds_since(t0);
  return r;
}

PlacementRunner::Update DdpOracle::update() {
  Update r;
  r.grad_norm = grad_norm_;
  if (grad_norm_ && !std::isfinite(*grad_norm_)) {  // the runtime's rule: such a step is not taken
    r.skipped = r.non_finite_norm = true;
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  {
    PhaseScope phase(comm_, Phase::optimizer_step);
    at::NoGradGuard no_grad;
    for (const std::string& name : order_) {
      at::Tensor data = params_.at(name).detach();  // shares storage: updates the parameter in place
      optimizers_.at(name)->step(data, grads_.at(name));
    }
  }
  r.optimizer_s = seconds_since(t0);
  return r;
}

void DdpOracle::set_lr_factor(double factor) {
  for (auto& [name, o] : optimizers_) o->set_lr_factor(factor);
}

void DdpOracle::scale_rows(const std::string& name, const at::Tensor& row_scale) {
  scale_held_rows(params_.at(name), row_scale, 0);
}

ParamMap DdpOracle::full_params() { return cpu_copies(params_); }

ParamMap DdpOracle::full_grads() { return cpu_copies(grads_); }

ParamMap DdpOracle::full_state() {
  ParamMap out;
  for (const std::string& name : order_) add_full_state(out, name, *optimizers_.at(name));
  return out;
}

int64_t DdpOracle::resident_bytes() const {
  int64_t n = 0;
  for (const auto& [name, p] : params_) n += 2 * static_cast<int64_t>(p.nbytes());  // parameter and gradient
  for (const auto& [name, o] : optimizers_) n += o->state_bytes();
  return n;
}

}  // namespace mfsdp
