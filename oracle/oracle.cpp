#include "oracle/oracle.h"

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
    if (p.kind == ParamKind::hidden_matrix && options.optimizer == OptimizerKind::muon) {
      optimizers_.emplace(p.name, make_muon(options.muon, p.shape));
    } else {
      TORCH_CHECK(p.kind != ParamKind::hidden_matrix || options.optimizer == OptimizerKind::adamw,
                  "oracle: optimizer ", to_string(options.optimizer), " is not available yet");
      optimizers_.emplace(p.name, make_adamw(options.adamw));
    }
  }
}

double DdpOracle::step(const at::Tensor& tokens, const at::Tensor& targets) {
  for (auto& [_, p] : params_) p.mutable_grad() = at::Tensor();
  at::Tensor loss = model_.loss(tokens, targets, params_);
  loss.backward();
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
      for (int r = 0; r < W; ++r) parts.push_back(all.narrow(0, r * g.numel(), g.numel()).view(g.sizes()));
      grads_[name] = mean_in_rank_order(parts, g.scalar_type());
    }
  }
  {
    PhaseScope phase(comm_, Phase::optimizer_step);
    at::NoGradGuard no_grad;
    for (const std::string& name : order_) {
      at::Tensor data = params_.at(name).detach();  // shares storage: updates the parameter in place
      optimizers_.at(name)->step(data, grads_.at(name));
    }
  }
  return loss.item<double>();
}

Trajectory run_oracle(RankContext& ctx, const TrainConfig& config) {
  TransformerModel model(config.model);
  const ByteCorpus corpus = ByteCorpus::load(config.data);
  Communicator comm(ctx.backend);
  const at::Device device = config.runtime.device;
  DdpOracle oracle(model, comm, config.runtime, model.init(config.seed, device));
  Trajectory t;
  for (int step = 0; step < config.steps; ++step) {
    auto [tokens, targets] = corpus.batch(config.seed, step, ctx.rank, config.batch, config.seq);
    if (!device.is_cpu()) tokens = tokens.to(device), targets = targets.to(device);
    comm.reset_counters();
    t.local_losses.push_back(oracle.step(tokens, targets));
    for (int p = 0; p < kNumPhases; ++p) t.last_step_bytes[p] = comm.counters(static_cast<Phase>(p));
    ParamMap snapshot;
    for (const auto& [name, p] : oracle.params()) snapshot.emplace(name, p.detach().to(at::kCPU, false, /*copy=*/true));
    t.params.push_back(std::move(snapshot));
  }
  return t;
}

Trajectory run_owner_recorded(RankContext& ctx, const TrainConfig& config) {
  TrainConfig c = config;
  c.record_params = true;
  TrainResult r = train_owner(ctx, c);
  Trajectory t;
  for (const auto& m : r.steps) t.local_losses.push_back(m.local_loss);
  if (!r.steps.empty()) t.last_step_bytes = r.steps.back().bytes;
  t.params = std::move(r.params_per_step);
  return t;
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
