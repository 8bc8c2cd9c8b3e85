#include "oracle/oracle.h"

#include "core/checkpoint.h"
#include "core/reduction.h"
#include "core/tensor_compare.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <cstring>

namespace mfsdp {

DdpOracle::DdpOracle(const TransformerModel& model, Communicator& comm, const RuntimeOptions& options,
                     const ParamMap& init)
    : model_(model), comm_(comm) {
  for (const ParamSpec& p : model.spec().params) {
    order_.push_back(p.name);
    params_.emplace(p.name, init.at(p.name).clone().set_requires_grad(true));
    optimizers_.emplace(p.name, make_optimizer(options, p.name, p.kind == ParamKind::hidden_matrix, p.shape));
  }
}

std::chrono::steady_clock::time_point replica_forward_backward(const TransformerModel& model, ParamMap& params,
                                                               const at::Tensor& tokens, const at::Tensor& targets,
                                                               const std::function<void()>& before_backward,
                                                               Stepper::Result& r) {
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

Stepper::Result DdpOracle::step(const at::Tensor& tokens, const at::Tensor& targets,
                                const std::function<void()>& before_backward) {
  Result r;
  auto t0 = replica_forward_backward(model_, params_, tokens, targets, before_backward, r);
  const int W = comm_.world_size();
  {
    PhaseScope phase(comm_, Phase::grad_reduce);
    for (const std::string& name : order_) {
      at::Tensor& p = params_.at(name);
      at::Tensor g = p.grad().defined() ? p.grad().contiguous() : at::zeros_like(p);
      at::Tensor all = at::empty({W * g.numel()}, g.options());
      at::Tensor flat = g.reshape({-1});
      comm_.allgather(all, flat)->wait();
      std::vector<at::Tensor> parts;
      for (int rank = 0; rank < W; ++rank) parts.push_back(all.narrow(0, rank * g.numel(), g.numel()).view(g.sizes()));
      grads_[name] = mean_in_rank_order(parts, g.scalar_type());
    }
  }
  r.backward_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
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

ParamMap DdpOracle::full_params() { return cpu_copies(params_); }

ResumeInfo DdpOracle::load_checkpoint(const std::string& checkpoint, const TrainConfig&) {
  FullState full = read_full_state(checkpoint);
  for (const std::string& name : order_) {
    auto it = full.params.find(name);
    TORCH_CHECK(it != full.params.end(), "checkpoint: '", checkpoint, "' was written for a different model: it has no parameter '",
                name, "'");
    at::Tensor p = params_.at(name).detach();
    TORCH_CHECK(it->second.sizes() == p.sizes() && it->second.scalar_type() == p.scalar_type(), "checkpoint: '", checkpoint,
                "' was written for a different model: parameter '", name, "' is ", it->second.sizes(), " ",
                it->second.scalar_type(), " there but ", p.sizes(), " ", p.scalar_type(), " here");
    p.copy_(it->second);
    TensorOptimizer& opt = *optimizers_.at(name);
    auto st = full.optimizers.find(name);
    if (st == full.optimizers.end()) {
      TORCH_CHECK(full.step == 0, "checkpoint: '", checkpoint, "' was written after step ", full.step,
                  " but holds no optimizer state for '", name, "'");
      continue;
    }
    TORCH_CHECK(st->second.kind == to_string(opt.kind()), "checkpoint: '", checkpoint, "' stepped '", name, "' with ",
                st->second.kind, "; this run steps it with ", to_string(opt.kind()), " (pass the same --optimizer)");
    for (auto& [_, t] : st->second.state) t = t.to(p.device());
    opt.load_state(st->second.state, st->second.scalars, p.sizes().vec());
  }
  TORCH_CHECK(full.params.size() == order_.size(), "checkpoint: '", checkpoint,
              "' was written for a different model: it has parameters this model lacks");
  ResumeInfo info;
  info.checkpoint = checkpoint;
  info.step = full.step;
  info.written_world_size = full.layout.world_size();
  info.bytes_read = info.bytes_total = 0;
  for (const FileManifest& m : full.layout.manifest) info.bytes_read += m.bytes, info.bytes_total += m.bytes;
  const int rank = comm_.rank();
  info.sampler = full.layout.ranks[rank < full.layout.world_size() ? rank : 0].sampler.dump();
  return info;
}

int64_t DdpOracle::resident_bytes() const {
  int64_t n = 0;
  for (const auto& [name, p] : params_) n += 2 * static_cast<int64_t>(p.nbytes());  // parameter and gradient
  for (const auto& [name, o] : optimizers_) n += o->state_bytes();
  return n;
}

Trajectory to_trajectory(TrainResult result) {
  Trajectory t;
  for (const auto& m : result.steps) t.local_losses.push_back(m.local_loss);
  if (!result.steps.empty()) t.last_step_bytes = result.steps.back().bytes;
  t.params = std::move(result.params_per_step);
  return t;
}

TrainResult train_ddp(RankContext& ctx, const TrainConfig& config, const std::function<void(const StepMetrics&)>& on_step) {
  return train_loop(
      ctx, config,
      [&](const TransformerModel& model, Communicator& comm, const ParamMap& init) {
        return std::make_unique<DdpOracle>(model, comm, config.runtime, init);
      },
      on_step);
}

Trajectory run_oracle(RankContext& ctx, const TrainConfig& config) {
  TrainConfig c = config;
  c.record_params = true;
  return to_trajectory(train_ddp(ctx, c));
}

Trajectory run_owner_recorded(RankContext& ctx, const TrainConfig& config) {
  TrainConfig c = config;
  c.record_params = true;
  return to_trajectory(train_owner(ctx, c));
}

Comparison compare(const Trajectory& control, const Trajectory& experiment) {
  Comparison c;
  auto fail = [&](int step, const std::string& what, const std::string& detail) {
    if (c.first_bad_step < 0) {
      c.first_bad_step = step;
      c.first_bad = what;
      c.detail = detail;
    }
    c.bitwise_equal = false;
  };
  if (control.local_losses.size() != experiment.local_losses.size() || control.params.size() != experiment.params.size()) {
    fail(0, "steps", "different numbers of steps");
    return c;
  }
  for (size_t s = 0; s < control.params.size(); ++s) {
    const double a = control.local_losses[s], b = experiment.local_losses[s];
    if (std::memcmp(&a, &b, sizeof(double)) != 0) {
      c.max_abs_diff = std::max(c.max_abs_diff, std::fabs(a - b));
      fail(static_cast<int>(s) + 1, "loss", "loss " + std::to_string(a) + " vs " + std::to_string(b));
    }
    for (const auto& [name, want] : control.params[s]) {
      auto it = experiment.params[s].find(name);
      if (it == experiment.params[s].end()) {
        fail(static_cast<int>(s) + 1, name, "missing");
        continue;
      }
      TensorDiff d = diff(it->second, want);
      if (d.bitwise_equal) continue;
      c.max_abs_diff = std::max(c.max_abs_diff, d.max_abs_diff);
      c.max_ulp = std::max(c.max_ulp, d.max_ulp);
      fail(static_cast<int>(s) + 1, name, describe(d, it->second, want));
    }
  }
  return c;
}

}  // namespace mfsdp
