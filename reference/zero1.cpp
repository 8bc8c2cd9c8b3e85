#include "reference/zero1.h"

#include "core/optim/optimizer_routing.h"
#include "core/plan/planner.h"
#include "core/runtime/clipping.h"
#include "core/runtime/reduction.h"
#include "core/train/replica.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <optional>

namespace mfsdp {

PlannerOptions zero1_planner_options(PlannerOptions planner) {
  planner.tail_policy = TailPolicy::owner;
  planner.rules = {{"embed.weight", Role::owned_matrix}, {"head.weight", Role::owned_matrix}};
  if (planner.planner == PlannerKind::explicit_assignment) planner.planner = PlannerKind::balanced;
  planner.expert_ranges = 1;  // every tensor whole on one owner: an expert tensor is one range
  return planner;
}

namespace {

class Zero1Runner final : public PlacementRunner {
 public:
  Zero1Runner(const TransformerModel& model, Communicator& comm, const TrainConfig& config, const ParamMap& init)
      : model_(model), comm_(comm), plan_(make_plan(model.spec(), comm.world_size(), zero1_planner_options(config.planner))),
        precision_(config.runtime.precision), accumulation_(config.runtime.grad_reduce), max_norm_(config.runtime.max_norm) {
    {
      PhaseScope phase(comm_, Phase::other);
      comm_.check_same_plan(plan_.hash());
    }
    for (const ParamSpec& p : model.spec().params) {
      params_.emplace(p.name, init.at(p.name).clone().set_requires_grad(true));
      if (owner_of(p.name) != comm_.rank()) continue;
      optimizers_.emplace(p.name, make_optimizer(config.runtime, p.name, matrix_kind(p.kind), p.shape));
    }
  }

  int owner_of(const std::string& name) const {
    const MatrixShard& s = plan_.shard(name);
    return s.role == Role::expert_range ? s.slices.at(0).rank : s.owner;
  }

  Gradients forward_backward(const at::Tensor& tokens, const at::Tensor& targets,
                             const std::function<void()>& before_backward, const MicroBatch& micro_batch) override {
    const int W = comm_.world_size(), me = comm_.rank();
    Gradients r;
    ParamMap local;
    auto t0 = replica_forward_backward(model_, params_, precision_, tokens, targets, before_backward, local, r);
    if (micro_batch.last()) owned_grads_.clear();
    if (accumulation_.keep(local, params_, micro_batch)) {
      // Reduce to owner: one uneven all-to-all per parameter, only the owner receives.
      PhaseScope phase(comm_, Phase::grad_reduce);
      for (const ParamSpec& p : model_.spec().params) {
        const int owner = owner_of(p.name);
        at::Tensor& param = params_.at(p.name);
        at::Tensor g = local.at(p.name).to(precision_.reduce_dtype).reshape({-1});  // the wire dtype
        const int64_t n = g.numel();
        std::vector<int64_t> in_splits(W, 0), out_splits(W, me == owner ? n : 0);
        in_splits[owner] = n;
        at::Tensor received = at::empty({me == owner ? W * n : 0}, g.options());
        if (W > 1) comm_.alltoall(received, g, out_splits, in_splits)->wait();
        else received.copy_(g);
        if (me != owner) continue;
        std::vector<at::Tensor> parts;
        for (int rank = 0; rank < W; ++rank) parts.push_back(received.narrow(0, rank * n, n).view(param.sizes()));
        at::Tensor mean = accumulation_.reduced(p.name, parts, /*replicas=*/1, p.dtype, micro_batch);
        if (mean.defined()) owned_grads_.emplace(p.name, std::move(mean));
      }
      if (micro_batch.last() && max_norm_ > 0) clip();
    }
    r.backward_s = seconds_since(t0);
    return r;
  }

  // Clipping (core/runtime/clipping.h): each owner puts its parameters' norms into the P-vector
  // (model order, zeros elsewhere), one all-reduce(SUM) in phase grad_norm, then every owner scales
  // the mean gradients it holds.
  void clip() {
    PhaseScope phase(comm_, Phase::grad_norm);
    const auto& params = model_.spec().params;
    at::Tensor vector = at::zeros({static_cast<int64_t>(params.size())}, at::kFloat);
    for (size_t i = 0; i < params.size(); ++i)
      if (owner_of(params[i].name) == comm_.rank()) vector.select(0, static_cast<int64_t>(i)).copy_(parameter_norm(owned_grads_.at(params[i].name)));
    if (comm_.world_size() > 1) comm_.allreduce_sum(vector)->wait();
    const at::Tensor total = total_norm(vector);
    const at::Tensor coef = clip_coefficient(total, max_norm_);
    for (auto& [name, g] : owned_grads_) g.mul_(coef);
    grad_norm_ = total.item<double>();
  }

  void set_lr_factor(double factor) override {
    for (auto& [name, o] : optimizers_) o->set_lr_factor(factor);
  }
  Update update() override {
    const int W = comm_.world_size(), me = comm_.rank();
    Update r;
    r.grad_norm = grad_norm_;
    if (grad_norm_ && !std::isfinite(*grad_norm_)) {  // the runtime's rule: such a step is not taken
      r.skipped = r.non_finite_norm = true;
      return r;
    }
    const auto t0 = std::chrono::steady_clock::now();
    {
      // Owners update; everyone receives the updated parameter.
      PhaseScope phase(comm_, Phase::optimizer_step);
      at::NoGradGuard no_grad;
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (const ParamSpec& p : model_.spec().params) {
        at::Tensor data = params_.at(p.name).detach();
        const int owner = owner_of(p.name);
        if (owner == me) optimizers_.at(p.name)->step(data, owned_grads_.at(p.name));
        if (W > 1) works.push_back(comm_.broadcast(data, owner));
      }
      for (auto& w : works) w->wait();
    }
    r.optimizer_s = seconds_since(t0);
    return r;
  }

  ParamMap full_params() override { return cpu_copies(params_); }
  void scale_rows(const std::string& name, const at::Tensor& row_scale) override {
    scale_held_rows(params_.at(name), row_scale, 0);  // every rank holds it in full, updated by the broadcast
  }

  int64_t resident_bytes() const override {
    int64_t n = 0;
    for (const auto& [name, p] : params_) n += 2 * static_cast<int64_t>(p.nbytes());  // full parameter and gradient
    for (const auto& [name, o] : optimizers_) n += o->state_bytes();                 // owned state only
    return n;
  }
  uint64_t plan_hash() const override { return plan_.hash(); }

 private:
  const TransformerModel& model_;
  Communicator& comm_;
  OwnershipPlan plan_;
  PrecisionPolicy precision_;
  ReplicaAccumulation accumulation_;
  double max_norm_ = 0;               // clipping; 0: none
  std::optional<double> grad_norm_;   // the last step's total norm before clipping
  ParamMap params_;
  std::unordered_map<std::string, std::unique_ptr<TensorOptimizer>> optimizers_;  // owned here only
  std::unordered_map<std::string, at::Tensor> owned_grads_;  // the mean gradients this rank owns, this step
};

}  // namespace

std::unique_ptr<PlacementRunner> make_zero1_runner(const TransformerModel& model, Communicator& comm,
                                                   const TrainConfig& config, const ParamMap& init) {
  return std::make_unique<Zero1Runner>(model, comm, config, init);
}

}  // namespace mfsdp
