#include "core/runtime/replica_sync.h"

#include "core/runtime/reduction.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

namespace mfsdp {
namespace {
// The replicas' partial sums added in replica order: divided once by `divisor`, or (0) not.
at::Tensor combined(const std::vector<at::Tensor>& partials, int64_t divisor, c10::ScalarType dtype) {
  if (divisor > 0) return mean_of_partial_sums(partials, divisor, dtype);
  return sum_in_rank_order(partials, accumulation_dtype(dtype));
}
}  // namespace

ReplicaSync::ReplicaSync(const OwnershipPlan& plan, Communicator* replicate, StepMode step_mode, OptimizerKind optimizer,
                         ReduceMode reduce)
    : plan_(plan),
      replicate_(replicate),
      mode_(!replicate ? ReplicaSyncMode::none
                       : step_mode == StepMode::dedup ? ReplicaSyncMode::dedup : ReplicaSyncMode::replicated),
      reduce_(reduce) {
  if (mode_ == ReplicaSyncMode::dedup)
    step_replica_ = dedup_step_replicas(plan_, replicate_->world_size(), optimizer, OptimizerCostConfig{});
}

void ReplicaSync::combine(std::vector<std::unique_ptr<Unit>>& units, Communicator& shard_comm, int64_t divisor) {
  if (mode_ == ReplicaSyncMode::none) return;
  PhaseScope phase(shard_comm, Phase::grad_reduce);
  PhaseScope rphase(*replicate_, Phase::grad_reduce);
  const int R = replicate_->world_size();
  const bool fast = reduce_ == ReduceMode::fast;
  // Deterministic dedup: only the stepping replica needs a shard's mean, so one all-to-all per unit
  // sends each replica's partial sums of a shard to its stepper alone ((R-1)/R of the segment sent
  // per rank, against R-1 segments for an all-gather). The other replicas keep their partial
  // sums there; the update broadcast overwrites those shards after the step.
  const bool to_stepper = !fast && !step_replica_.empty();
  const int me = replica();
  // The shards of unit u this rank stores stepped by replica q, in the unit's order (the same on
  // every replica: one plan).
  auto stepped_by = [&](size_t u, int q) {
    std::vector<int> out;
    for (int i : units[u]->shards())
      if (step_replica_[i] == q && units[u]->local_grad(i).defined()) out.push_back(i);
    return out;
  };
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<at::Tensor> received(units.size()), sent(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    at::Tensor& g = units[u]->segment_grad();
    if (g.numel() == 0) continue;  // the same on every replica: one plan
    UnitScope tag(*replicate_, static_cast<int>(u));
    if (fast) {
      works.push_back(replicate_->allreduce_sum(g));
    } else if (to_stepper) {
      std::vector<at::Tensor> parts;
      std::vector<int64_t> send_splits(R, 0);
      for (int q = 0; q < R; ++q)
        for (int i : stepped_by(u, q)) {
          parts.push_back(units[u]->local_grad(i).reshape({-1}));
          send_splits[q] += parts.back().numel();
        }
      // A rank whose segment of u holds only padding rows sends nothing.
      sent[u] = parts.empty() ? at::empty({0}, g.options()) : at::cat(parts);
      received[u] = at::empty({R * send_splits[me]}, g.options());
      works.push_back(replicate_->alltoall(received[u], sent[u], std::vector<int64_t>(R, send_splits[me]), send_splits));
    } else {
      received[u] = at::empty({R * g.numel()}, g.options());
      works.push_back(replicate_->allgather(received[u], g));
    }
  }
  for (auto& w : works) w->wait();
  for (size_t u = 0; u < units.size(); ++u) {
    at::Tensor& g = units[u]->segment_grad();
    if (g.numel() == 0) continue;
    if (fast) {
      if (divisor > 0) g.div_(static_cast<double>(divisor));
      continue;
    }
    if (to_stepper) {
      const int64_t n_mine = received[u].numel() / R;
      int64_t offset = 0;
      for (int i : stepped_by(u, me)) {
        at::Tensor grad = units[u]->local_grad(i);
        const int64_t n = grad.numel();
        std::vector<at::Tensor> partials;
        for (int r = 0; r < R; ++r) partials.push_back(received[u].narrow(0, r * n_mine + offset, n));
        grad.view({-1}).copy_(combined(partials, divisor, grad.scalar_type()));
        offset += n;
      }
      continue;
    }
    std::vector<at::Tensor> partials;
    for (int r = 0; r < R; ++r) partials.push_back(received[u].narrow(0, r * g.numel(), g.numel()));
    g.copy_(combined(partials, divisor, g.scalar_type()));
  }
}

void ReplicaSync::sum_over_replicas(at::Tensor& flags, Phase phase) {
  if (!replicate_) return;
  PhaseScope rphase(*replicate_, phase);
  replicate_->allreduce_sum(flags)->wait();
}

void ReplicaSync::broadcast_updates(std::vector<std::unique_ptr<Unit>>& units) {
  if (mode_ != ReplicaSyncMode::dedup) return;
  // dedup: each stepped fp32 master goes from its stepping replica to the others.
  PhaseScope rphase(*replicate_, Phase::update_broadcast);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<at::Tensor> sent;
  for (size_t i = 0; i < plan_.shards().size(); ++i) {
    at::Tensor param = units[plan_.shards()[i].unit]->local_param(static_cast<int>(i));
    if (!param.defined()) continue;  // this shard rank stores none of it (in every replica)
    sent.push_back(param);
    UnitScope tag(*replicate_, plan_.shards()[i].unit);
    works.push_back(replicate_->broadcast(sent.back(), step_replica_[i]));
  }
  for (auto& w : works) w->wait();
}

}  // namespace mfsdp
