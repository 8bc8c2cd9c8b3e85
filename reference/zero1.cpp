#include "reference/zero1.h"

#include "core/reduction.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

namespace mfsdp {

Trajectory run_zero1(RankContext& ctx, const TrainConfig& config) {
  TransformerModel model(config.model);
  const ByteCorpus corpus = ByteCorpus::load(config.data);
  Communicator comm(ctx.backend);
  const int W = ctx.world_size, me = ctx.rank;

  PlannerOptions planner = config.planner;
  planner.tail_policy = TailPolicy::owner;
  planner.rules = {{"embed.weight", Role::owned_matrix}, {"head.weight", Role::owned_matrix}};
  if (planner.planner == PlannerKind::explicit_assignment) planner.planner = PlannerKind::balanced;
  const OwnershipPlan plan = make_plan(model.spec(), W, planner);
  {
    PhaseScope phase(comm, Phase::other);
    comm.check_same_plan(plan.hash());
  }

  ParamMap params;
  std::unordered_map<std::string, std::unique_ptr<TensorOptimizer>> optimizers;  // owned here only
  const at::Device device = config.runtime.device;
  const ParamMap init = model.init(config.seed, device);
  for (const ParamSpec& p : model.spec().params) {
    params.emplace(p.name, init.at(p.name).clone().set_requires_grad(true));
    if (plan.shard(p.name).owner != me) continue;
    if (p.kind == ParamKind::hidden_matrix && config.runtime.optimizer == OptimizerKind::muon) {
      optimizers.emplace(p.name, make_muon(config.runtime.muon, p.shape));
    } else {
      TORCH_CHECK(p.kind != ParamKind::hidden_matrix || config.runtime.optimizer == OptimizerKind::adamw,
                  "zero1: optimizer ", to_string(config.runtime.optimizer), " is not available yet");
      optimizers.emplace(p.name, make_adamw(config.runtime.adamw));
    }
  }

  Trajectory t;
  for (int step = 0; step < config.steps; ++step) {
    auto [tokens, targets] = corpus.batch(config.seed, step, me, config.batch, config.seq);
    if (!device.is_cpu()) tokens = tokens.to(device), targets = targets.to(device);
    comm.reset_counters();
    for (auto& [_, p] : params) p.mutable_grad() = at::Tensor();
    at::Tensor loss = model.loss(tokens, targets, params);
    loss.backward();
    std::unordered_map<std::string, at::Tensor> owned_grads;
    {
      // Reduce to owner: one uneven all-to-all per parameter, only the owner receives.
      PhaseScope phase(comm, Phase::grad_reduce);
      for (const ParamSpec& p : model.spec().params) {
        const int owner = plan.shard(p.name).owner;
        at::Tensor& param = params.at(p.name);
        at::Tensor g = param.grad().defined() ? param.grad().contiguous().reshape({-1}) : at::zeros_like(param).reshape({-1});
        const int64_t n = g.numel();
        std::vector<int64_t> in_splits(W, 0), out_splits(W, me == owner ? n : 0);
        in_splits[owner] = n;
        at::Tensor received = at::empty({me == owner ? W * n : 0}, g.options());
        comm.alltoall(received, g, out_splits, in_splits)->wait();
        if (me != owner) continue;
        std::vector<at::Tensor> parts;
        for (int r = 0; r < W; ++r) parts.push_back(received.narrow(0, r * n, n).view(param.sizes()));
        owned_grads.emplace(p.name, mean_in_rank_order(parts, p.dtype));
      }
    }
    {
      // Owners update; everyone receives the updated parameter.
      PhaseScope phase(comm, Phase::optimizer_step);
      at::NoGradGuard no_grad;
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (const ParamSpec& p : model.spec().params) {
        at::Tensor data = params.at(p.name).detach();
        const int owner = plan.shard(p.name).owner;
        if (owner == me) optimizers.at(p.name)->step(data, owned_grads.at(p.name));
        if (W > 1) works.push_back(comm.broadcast(data, owner));
      }
      for (auto& w : works) w->wait();
    }
    for (int p = 0; p < kNumPhases; ++p) t.last_step_bytes[p] = comm.counters(static_cast<Phase>(p));
    t.local_losses.push_back(loss.item<double>());
    ParamMap snapshot;
    for (const auto& [name, p] : params) snapshot.emplace(name, p.detach().to(at::kCPU, false, /*copy=*/true));
    t.params.push_back(std::move(snapshot));
  }
  return t;
}

}  // namespace mfsdp
