#include "core/runtime/owner_runtime.h"

#include "core/plan/planner.h"
#include "core/runtime/clipping.h"
#include "core/runtime/reduction.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mfsdp {

// The one door from the autograd functions below into the runtime's private steps.
struct OwnerRuntimeAutogradHooks {
  static void reduce(OwnerRuntime& rt, int unit, const std::vector<at::Tensor>& grads) {
    rt.queue_final_callback();
    rt.reduce_unit(unit, grads);
  }
  static void revive(OwnerRuntime& rt, int unit) {
    rt.queue_final_callback();
    rt.revive_unit(unit);
  }
  static at::Tensor forward_recomputed(OwnerRuntime& rt, int unit, const at::Tensor& input) {
    return rt.recompute_fns_.at(unit)(rt.unshard(unit), input);
  }
  static at::Tensor recompute_backward(OwnerRuntime& rt, int unit, const at::Tensor& input, const at::Tensor& grad_output) {
    rt.queue_final_callback();  // on the outer backward: the nested one below must not finish the step
    return rt.recompute_backward(unit, input, grad_output);
  }
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

OwnerRuntime* runtime_of(AutogradContext* ctx) {
  return reinterpret_cast<OwnerRuntime*>(ctx->saved_data["runtime"].toInt());
}

// Forward: the unit's full parameters (the unit is already unsharded). Backward: every
// parameter's gradient exists, so the unit's reduction to owners starts here.
struct UnitGather : public torch::autograd::Function<UnitGather> {
  static variable_list forward(AutogradContext* ctx, at::Tensor anchor, int64_t runtime, int64_t unit) {
    ctx->saved_data["runtime"] = runtime;
    ctx->saved_data["unit"] = unit;
    return reinterpret_cast<OwnerRuntime*>(runtime)->unit(static_cast<int>(unit)).full_views();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    OwnerRuntimeAutogradHooks::reduce(*runtime_of(ctx), static_cast<int>(ctx->saved_data["unit"].toInt()), grads);
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Identity on a unit's output; in backward it revives the unit before the unit's own backward.
struct PreBackward : public torch::autograd::Function<PreBackward> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, int64_t runtime, int64_t unit) {
    ctx->saved_data["runtime"] = runtime;
    ctx->saved_data["unit"] = unit;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    OwnerRuntimeAutogradHooks::revive(*runtime_of(ctx), static_cast<int>(ctx->saved_data["unit"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

// Activation checkpointing of one unit: forward runs the unit (gathering it) with autograd off and
// saves only its input (and the unit's anchor, so the output needs a gradient whenever the unit's
// parameters do); backward re-runs the unit's forward on the revived buffer and its backward.
struct Recompute : public torch::autograd::Function<Recompute> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::Tensor anchor, int64_t runtime, int64_t unit) {
    ctx->saved_data["runtime"] = runtime;
    ctx->saved_data["unit"] = unit;
    ctx->save_for_backward({x});
    return OwnerRuntimeAutogradHooks::forward_recomputed(*reinterpret_cast<OwnerRuntime*>(runtime), static_cast<int>(unit), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables().at(0);
    at::Tensor dx = OwnerRuntimeAutogradHooks::recompute_backward(*runtime_of(ctx), static_cast<int>(ctx->saved_data["unit"].toInt()),
                                                                  x, grads.at(0));
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace


OwnerRuntime::OwnerRuntime(const OwnershipPlan& plan, Communicator& comm, RuntimeOptions options,
                           const ParamMap& full_init, Communicator* replicate)
    : plan_(plan),
      comm_(comm),
      options_(std::move(options)),
      replicas_(plan_, replicate, options_.step_mode, options_.optimizer, options_.reduce) {
  TORCH_CHECK((options_.replicas > 1) == (replicate != nullptr) && (!replicate || replicate->world_size() == options_.replicas),
              "runtime: rank ", comm_.rank(), ": ", options_.replicas, " replicas need a replicate group of that size");
  // Bad input first, before any collective: names, shapes and dtypes must match the plan.
  for (const MatrixShard& s : plan_.shards()) {
    auto it = full_init.find(s.name);
    TORCH_CHECK(it != full_init.end(), "runtime: rank ", comm_.rank(), ": the plan's parameter '", s.name,
                "' has no initial value");
    TORCH_CHECK(it->second.sizes() == at::IntArrayRef(s.shape) && it->second.scalar_type() == s.dtype, "runtime: rank ",
                comm_.rank(), ": initial value of '", s.name, "' is ", it->second.sizes(), " ", it->second.scalar_type(),
                " but the plan has ", at::IntArrayRef(s.shape), " ", c10::toString(s.dtype));
  }
  TORCH_CHECK(full_init.size() == plan_.shards().size(), "runtime: rank ", comm_.rank(), ": ", full_init.size(),
              " initial parameters for a plan of ", plan_.shards().size(), " (a parameter in no unit?)");
  if (options_.comm_groups == CommGroups::model) {
    // One group a direction for the whole model: nothing is left to overlap or to recompute on a
    // revived buffer, and per-segment collectives are what a group replaces.
    const char* clash = options_.prefetch                                   ? "prefetch (there is one group to overlap)"
                        : options_.activation_checkpointing                 ? "activation checkpointing (it recomputes on a revived buffer, and nothing is resharded)"
                        : options_.unshard == UnshardStrategy::per_segment ? "the per_segment unshard (each segment a collective of its own)"
                                                                            : nullptr;
    TORCH_CHECK(!clash, "runtime: rank ", comm_.rank(), ": model-wide groups (--comm-groups model) exclude ", clash);
    options_.reshard_after_forward = false;
  }
  {
    std::vector<std::string> names;
    for (const MatrixShard& s : plan_.shards()) names.push_back(s.name);
    check_groups(options_, names);
  }
  {
    PhaseScope phase(comm_, Phase::other);
    comm_.check_same_plan(plan_.hash());
  }
  TORCH_CHECK(replicas_.mode() != ReplicaSyncMode::dedup || !options_.even_matrix_step, "runtime: rank ", comm_.rank(),
              ": the dedup step mode steps whole owned matrices; the reconstruct and alltoall placements run replicated");
  for (int u = 0; u < static_cast<int>(plan_.units().size()); ++u) {
    units_.push_back(std::make_unique<Unit>(plan_, u, comm_, options_.device, options_.unshard, options_.precision));
    anchors_.push_back(at::zeros({}, at::TensorOptions().dtype(at::kFloat)).set_requires_grad(true));
  }
  local_sums_.resize(plan_.units().size());
  held_grads_.resize(plan_.units().size());
  reduced_sums_.resize(plan_.units().size());
  last_borrower_.assign(plan_.units().size(), -1);
  recompute_fns_.resize(plan_.units().size());
  lent_views_.resize(plan_.shards().size());
  for (int u = 0; u < static_cast<int>(plan_.units().size()); ++u)
    for (int b : plan_.units()[u].borrowed) last_borrower_[plan_.shards()[b].unit] = std::max(last_borrower_[plan_.shards()[b].unit], u);
  optimizers_.resize(plan_.shards().size());
  even_matrix_.assign(plan_.shards().size(), false);
  for (size_t i = 0; i < plan_.shards().size(); ++i) {
    const MatrixShard& s = plan_.shards()[i];
    // A hidden matrix kept in even row shards under Muon: a baseline's even-matrix step.
    even_matrix_[i] = s.kind == ParamKind::hidden_matrix && s.role == Role::even_shard &&
                      options_.optimizer == OptimizerKind::muon;
    if (even_matrix_[i] && !even_step_ && options_.even_matrix_step) even_step_ = options_.even_matrix_step();
    Unit& unit = *units_[s.unit];
    at::Tensor local = unit.local_param(static_cast<int>(i));
    if (!local.defined()) continue;
    const ShardSlice* mine = s.slice_on(comm_.rank());
    local.copy_(full_init.at(s.name).narrow(0, mine->row_begin, mine->rows));
    if (even_matrix_[i]) continue;  // stepped by the even-matrix step
    if (!replicas_.steps(static_cast<int>(i))) continue;  // dedup: another replica steps it
    const bool hidden = s.kind == ParamKind::hidden_matrix;
    TORCH_CHECK(!hidden || s.role == Role::owned_matrix || options_.optimizer == OptimizerKind::adamw, "runtime: rank ",
                comm_.rank(), ": ", to_string(options_.optimizer), " needs hidden matrix '", s.name,
                "' whole on one rank, but the plan keeps it in even shards (reconstruct and alltoall placements run Muon "
                "or AdamW only)");
    // Experts: every rank storing some of an expert tensor stores whole experts and steps them.
    const bool experts = s.kind == ParamKind::expert_matrix;
    optimizers_[i] = make_optimizer(options_, s.name, (hidden && s.role == Role::owned_matrix) || experts,
                                    experts ? local.sizes().vec() : s.shape);
  }
}

OwnerRuntime::~OwnerRuntime() = default;

void OwnerRuntime::track_peak() { peak_gathered_ = std::max(peak_gathered_, gathered_bytes()); }

ParamMap OwnerRuntime::unshard(int u) {
  step_open_ = true;
  Unit& unit = *units_.at(u);
  if (options_.comm_groups == CommGroups::model && unit.state() == UnitState::sharded && comm_.world_size() > 1) {
    // The step's first unshard: every sharded unit's segments as one group (W = 1 moves nothing).
    std::vector<int> issued;
    c10::intrusive_ptr<c10d::Work> work = comm_.group([&] {
      for (int v = 0; v < num_units(); ++v) {
        if (units_[v]->state() != UnitState::sharded) continue;
        units_[v]->unshard_async();
        issued.push_back(v);
      }
    });
    for (int v : issued) units_[v]->adopt_group_work(work);
    track_peak();
  }
  if (unit.state() == UnitState::sharded) unit.unshard_async();  // else prefetched
  track_peak();
  unit.wait_fill();
  if (options_.prefetch && u + 1 < num_units() && units_[u + 1]->state() == UnitState::sharded) {
    units_[u + 1]->unshard_async();  // moves while unit u computes
    track_peak();
  }
  variable_list full = UnitGather::apply(anchors_[u], reinterpret_cast<int64_t>(this), static_cast<int64_t>(u));
  ParamMap params;
  for (size_t k = 0; k < unit.shards().size(); ++k) params.emplace(plan_.shards()[unit.shards()[k]].name, full[k]);
  if (last_borrower_[u] >= 0)
    for (size_t k = 0; k < unit.shards().size(); ++k) lent_views_[unit.shards()[k]] = full[k];
  for (int b : plan_.units()[u].borrowed) {
    const Unit& lender = *units_[plan_.shards()[b].unit];
    TORCH_CHECK(lender.state() == UnitState::unsharded && lent_views_[b].defined(), "runtime: rank ", comm_.rank(), ": unit '",
                unit.name(), "' uses the tied parameter '", plan_.shards()[b].name, "' of unit '", lender.name(),
                "', which is ", to_string(lender.state()), " (run that unit's forward first, in this step)");
    params.emplace(plan_.shards()[b].name, lent_views_[b]);
  }
  comm_.mark("forward", u);  // the caller computes unit u's forward from here
  return params;
}

ParamMap OwnerRuntime::unit_params(int u, const std::vector<at::Tensor>& views) const {
  const Unit& unit = *units_.at(u);
  ParamMap params;
  for (size_t k = 0; k < unit.shards().size(); ++k) params.emplace(plan_.shards()[unit.shards()[k]].name, views[k]);
  return params;
}

at::Tensor OwnerRuntime::recomputed_forward(int u, const at::Tensor& input, UnitFn fn) {
  TORCH_CHECK(u >= 0 && u < num_units(), "runtime: rank ", comm_.rank(), ": no unit ", u);
  TORCH_CHECK(last_borrower_[u] < 0 && plan_.units()[u].borrowed.empty(), "runtime: rank ", comm_.rank(), ": unit '",
              units_[u]->name(), "' lends or borrows tied parameters and cannot be recomputed (recompute is per block)");
  TORCH_CHECK(options_.reshard_after_forward, "runtime: rank ", comm_.rank(),
              ": activation checkpointing recomputes on the revived buffer, so it needs reshard_after_forward");
  recompute_fns_.at(u) = std::move(fn);
  return Recompute::apply(input, anchors_[u], reinterpret_cast<int64_t>(this), static_cast<int64_t>(u));
}

at::Tensor OwnerRuntime::recompute_backward(int u, const at::Tensor& input, const at::Tensor& grad_output) {
  // PreBackward revived the unit (and waited for its fill) before this node ran: the views below
  // are the revived buffer, the storage the forward read.
  Unit& unit = *units_.at(u);
  TORCH_CHECK(unit.state() == UnitState::revived || unit.state() == UnitState::unsharded, "runtime: rank ", comm_.rank(),
              ": unit '", unit.name(), "' is ", to_string(unit.state()), " when its recompute runs");
  std::vector<at::Tensor> leaves = unit.full_views();
  std::vector<at::Tensor> inputs;
  for (at::Tensor& v : leaves) inputs.push_back(v.requires_grad_(true));
  at::Tensor x = input.detach();
  const bool needs_dx = input.requires_grad();
  if (needs_dx) inputs.push_back(x.requires_grad_(true));
  at::Tensor out;
  {
    at::AutoGradMode on(true);
    out = recompute_fns_.at(u)(unit_params(u, leaves), x);
  }
  std::vector<at::Tensor> grads =
      torch::autograd::grad({out}, inputs, {grad_output}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
  recompute_fns_.at(u) = nullptr;
  at::Tensor dx = needs_dx ? grads.back() : at::Tensor();
  grads.resize(leaves.size());
  reduce_unit(u, grads);
  return dx;
}

at::Tensor OwnerRuntime::after_forward(int u, const at::Tensor& output) {
  comm_.mark("forward_done", u);
  Unit& unit = *units_.at(u);
  const bool backward_will_come = at::GradMode::is_enabled() && output.requires_grad();
  at::Tensor out = output;
  if (backward_will_come) out = PreBackward::apply(output, reinterpret_cast<int64_t>(this), static_cast<int64_t>(u));
  // A unit lending tied parameters stays gathered: its borrowers read the same views, and its
  // backward (the last use's gradient summed with the others) comes after theirs.
  const bool lends = last_borrower_[u] >= 0;
  if (!backward_will_come && !lends) unit.reshard(/*keep_for_backward=*/false);
  else if (backward_will_come && options_.reshard_after_forward && !lends) unit.reshard(/*keep_for_backward=*/true);
  if (!backward_will_come) {
    for (int l = 0; l < u; ++l)  // no backward comes: a lender is released after its last borrower
      if (last_borrower_[l] == u && units_[l]->state() == UnitState::unsharded) {
        units_[l]->reshard(/*keep_for_backward=*/false);
        for (int k : units_[l]->shards()) lent_views_[k] = at::Tensor();
      }
  }
  if (backward_will_come) forward_order_.push_back(u);
  return out;
}

void OwnerRuntime::revive_unit(int u) {
  Unit& unit = *units_.at(u);
  if (unit.state() == UnitState::pinned) {
    unit.revive_async();
    track_peak();
  }
  unit.wait_fill();  // a prefetched revive completes here
  if (options_.prefetch) {
    // Backward visits units in reverse forward order: start reviving the one before u.
    for (size_t k = 1; k < forward_order_.size(); ++k) {
      if (forward_order_[k] != u) continue;
      Unit& previous = *units_[forward_order_[k - 1]];
      if (previous.state() == UnitState::pinned) {
        previous.revive_async();
        track_peak();
      }
      break;
    }
  }
  comm_.mark("backward", u);  // autograd computes unit u's backward from here
}

void OwnerRuntime::begin_micro_batch(const MicroBatch& mb) {
  TORCH_CHECK(mb.count >= 1 && mb.index >= 0 && mb.index < mb.count, "runtime: rank ", comm_.rank(), ": micro-batch ",
              mb.index, " of ", mb.count, " does not exist");
  const bool in_order = mb.first() ? (micro_.last() || !micro_finished_)
                                   : (mb.count == micro_.count && mb.index == micro_.index + 1 && micro_finished_);
  TORCH_CHECK(in_order, "runtime: rank ", comm_.rank(), ": micro-batch ", mb.index, " of ", mb.count, " after micro-batch ",
              micro_.index, " of ", micro_.count, micro_finished_ ? "" : " whose backward has not finished",
              " (micro-batches run in order, each forward after the previous backward)");
  TORCH_CHECK(mb.first() || reduced_sums_.size() == units_.size(), "runtime: internal: sums lost");
  if (mb.count > 1) {
    for (const MatrixShard& s : plan_.shards())
      TORCH_CHECK(accumulation_dtype(s.dtype) == s.dtype, "runtime: rank ", comm_.rank(), ": gradient accumulation needs ",
                  "float32 masters, but '", s.name, "' is ", c10::toString(s.dtype),
                  " (a bf16 compute policy over float32 masters accumulates: --param-dtype bf16)");
  }
  for (auto& unit : units_)
    TORCH_CHECK(unit->state() == UnitState::sharded, "runtime: rank ", comm_.rank(), ": micro-batch ", mb.index,
                " begins while unit '", unit->name(), "' is ", to_string(unit->state()));
  micro_ = mb;
  micro_finished_ = false;
}

void OwnerRuntime::reduce_unit(int u, const std::vector<at::Tensor>& full_grads) {
  Unit& unit = *units_.at(u);
  reduce_order_.push_back(u);
  if (!deferred()) {
    issue_reduction(u, full_grads);
    return;
  }
  // Deferred accumulation: this rank's gradients, each upcast to the accumulation dtype, added to
  // its own sums; the sums are reduced once, after the last micro-batch.
  std::vector<at::Tensor>& sums = local_sums_.at(u);
  sums.resize(full_grads.size());
  for (size_t k = 0; k < full_grads.size(); ++k) {
    const MatrixShard& s = plan_.shards()[unit.shards()[k]];
    const c10::ScalarType acc = accumulation_dtype(s.dtype);
    const at::Tensor g = full_grads[k].defined()  // undefined: the parameter took no part
                             ? full_grads[k]
                             : at::zeros(s.shape, at::TensorOptions().dtype(acc).device(options_.device));
    accumulate(sums[k], g, micro_.first(), acc);
  }
  track_accumulation();
  if (!micro_.last()) {
    unit.keep_gradients_local();
    return;
  }
  std::vector<at::Tensor> totals = std::move(sums);
  sums.clear();
  issue_reduction(u, std::move(totals));
}

void OwnerRuntime::issue_reduction(int u, std::vector<at::Tensor> full_grads) {
  if (options_.comm_groups == CommGroups::model) {
    held_grads_.at(u) = std::move(full_grads);  // issued with every other unit's when backward ends
    return;
  }
  units_.at(u)->reduce_to_owner(full_grads, options_.reduce);
}

void OwnerRuntime::issue_held_reductions() {
  std::vector<int> issued;
  c10::intrusive_ptr<c10d::Work> work = comm_.group([&] {
    for (int u : reduce_order_) {
      if (!held_grads_[u]) continue;  // kept local (deferred accumulation before the last micro-batch)
      units_[u]->reduce_to_owner(*held_grads_[u], options_.reduce);
      issued.push_back(u);
    }
  });
  for (int u : issued) {
    units_[u]->adopt_group_work(work);
    held_grads_[u].reset();
  }
}

void OwnerRuntime::queue_final_callback() {
  if (callback_queued_) return;
  callback_queued_ = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
}

void OwnerRuntime::finish_backward() {
  finish_reductions();
  micro_finished_ = true;
  if (!micro_.last()) return;
  check_finite_gradients();
  if (options_.max_norm > 0) clip_gradients();
}

void OwnerRuntime::finish_reductions() {
  // Once per backward, by the engine's final callback: a second call would combine HSDP's partial
  // sums again (R times the mean, or partial sums taken for means) and step on wrong gradients.
  TORCH_CHECK(!reduce_order_.empty(), "runtime: rank ", comm_.rank(),
              ": finish_backward with no backward pass to finish (autograd's final callback already ran it for the "
              "last backward; it must not run twice)");
  callback_queued_ = false;
  if (options_.comm_groups == CommGroups::model) issue_held_reductions();
  for (at::Tensor& v : lent_views_) v = at::Tensor();  // the graph that held them is done
  // The divisor of the step's mean: the mesh's W, times K under accumulation. Per micro-batch the
  // sums are added first and divided after the last one; deferred, nothing was reduced before it.
  const int64_t divisor = static_cast<int64_t>(comm_.world_size()) * replicas_.replicas() * micro_.count;
  const bool per_micro_batch = micro_.count > 1 && options_.grad_reduce == GradReduce::per_microbatch;
  if (deferred() && !micro_.last()) {
    for (int u : reduce_order_) units_[u]->finish_reduction(0);  // kept local: nothing in flight
  } else {
    const int64_t step_divisor = per_micro_batch ? 0 : divisor;
    for (int u : reduce_order_) units_[u]->finish_reduction(replicas_.shard_group_divides() ? step_divisor : 0);
    replicas_.combine(units_, comm_, step_divisor);
  }
  if (per_micro_batch) {
    for (size_t u = 0; u < units_.size(); ++u) {
      at::Tensor& g = units_[u]->segment_grad();
      accumulate(reduced_sums_[u], g, micro_.first(), accumulation_dtype(g.scalar_type()));
      track_accumulation();
      if (micro_.last()) {
        g.copy_(divide_sum(std::move(reduced_sums_[u]), divisor, g.scalar_type()));
        reduced_sums_[u] = at::Tensor();
      }
    }
  }
  reduce_order_.clear();
  forward_order_.clear();
  for (auto& unit : units_) {
    TORCH_CHECK(unit->state() == UnitState::sharded, "runtime: rank ", comm_.rank(), ": unit '", unit->name(),
                "' is ", to_string(unit->state()), " at the end of backward (did the loss depend on it?)");
  }
}

void OwnerRuntime::check_finite_gradients() {
  // Non-finite gradients: each rank checks what it stores; one all-reduce tells every rank the
  // first offending parameter of every rank, so all ranks fail or skip together.
  int64_t first_bad = 0;
  for (size_t i = 0; i < plan_.shards().size() && first_bad == 0; ++i) {
    at::Tensor g = units_[plan_.shards()[i].unit]->local_grad(static_cast<int>(i));
    if (g.defined() && !g.is_meta() && !at::isfinite(g).all().item<bool>()) first_bad = static_cast<int64_t>(i) + 1;
  }
  // HSDP: one flag per rank of the whole mesh (replica-major), summed over the shard group and then
  // over the replicate group, so every replica decides alike (under dedup each sees only the
  // gradients it steps).
  const int replicas = replicas_.replicas();
  at::Tensor flags = at::zeros({replicas * comm_.world_size()}, at::TensorOptions().dtype(at::kLong));
  flags[replica() * comm_.world_size() + comm_.rank()] = first_bad;
  {
    PhaseScope phase(comm_, Phase::grad_reduce);
    at::Tensor on_device = flags.to(comm_.control_device());
    comm_.allreduce_sum(on_device)->wait();
    replicas_.sum_over_replicas(on_device);
    flags = on_device.cpu();
  }
  pending_report_ = StepReport{};
  for (int r = 0; r < flags.numel(); ++r) {
    const int64_t bad = flags[r].item<int64_t>();
    if (bad > 0) {
      pending_report_.non_finite_parameter = plan_.shards()[bad - 1].name;
      break;
    }
  }
}

void OwnerRuntime::track_accumulation() {
  int64_t n = 0;
  for (const auto& sums : local_sums_)
    for (const at::Tensor& t : sums)
      if (t.defined()) n += static_cast<int64_t>(t.nbytes());
  for (const at::Tensor& t : reduced_sums_)
    if (t.defined()) n += static_cast<int64_t>(t.nbytes());
  peak_accumulation_ = std::max(peak_accumulation_, n);
}

void OwnerRuntime::clip_gradients() {
  // Each parameter's norm on the one rank of the mesh that holds its mean gradient whole: an owned
  // parameter on its owner; a split one (even shards, expert ranges) on a root of the shard group,
  // assembled there from every rank's rows (below). HSDP: only the replica that counts a shard (ReplicaSync::counts)
  // contributes it. The P-vector is all-reduced by SUM, exact since each entry is non-zero on one
  // rank only; every rank then takes the same total and scales every gradient it holds.
  PhaseScope phase(comm_, Phase::grad_norm);
  const std::vector<MatrixShard>& shards = plan_.shards();
  const int P = static_cast<int>(shards.size()), me = comm_.rank();
  const c10::ScalarType dtype = shards.at(0).dtype;
  for (const MatrixShard& s : shards)
    TORCH_CHECK(s.dtype == dtype, "runtime: clipping needs every master in one dtype, but '", s.name, "' is ",
                c10::toString(s.dtype), " and '", shards[0].name, "' ", c10::toString(dtype));
  std::vector<at::Tensor> norms(P);
  std::vector<int> split;
  for (int i = 0; i < P; ++i) {
    if (!replicas_.counts(i)) continue;
    const MatrixShard& s = shards[i];
    if (s.owned()) {
      if (s.owner == me) norms[i] = parameter_norm(local_grad(s.name));
      continue;
    }
    split.push_back(i);
  }
  if (!split.empty()) {
    // Each split parameter is assembled whole on one root of the shard group, the roots balanced
    // by size (each in plan order to the least loaded rank), by one uneven all-to-all: every rank
    // sends each root its own rows of that root's parameters, no more (the volume of one
    // all-gather's sends, not of a reduction).
    const int W = comm_.world_size();
    std::vector<int> root(split.size());
    std::vector<int64_t> load(W, 0);
    for (size_t k = 0; k < split.size(); ++k) {
      root[k] = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[root[k]] += shards[split[k]].numel();
    }
    auto rows_on = [&](const MatrixShard& s, int rank) {
      const ShardSlice* sl = s.slice_on(rank);
      return sl ? sl->rows * s.row_numel() : int64_t{0};
    };
    std::vector<int64_t> in_splits(W, 0), out_splits(W, 0);
    for (size_t k = 0; k < split.size(); ++k) {
      const MatrixShard& s = shards[split[k]];
      in_splits[root[k]] += rows_on(s, me);
      if (root[k] == me)
        for (int r = 0; r < W; ++r) out_splits[r] += rows_on(s, r);
    }
    const at::TensorOptions opts = at::TensorOptions().dtype(dtype).device(options_.device);
    at::Tensor send = at::empty({std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0})}, opts);
    at::Tensor recv = at::empty({std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0})}, opts);
    int64_t at = 0;
    for (int d = 0; d < W; ++d)  // grouped by destination, plan order within
      for (size_t k = 0; k < split.size(); ++k) {
        const MatrixShard& s = shards[split[k]];
        const int64_t n = root[k] == d ? rows_on(s, me) : 0;
        if (n == 0) continue;
        send.narrow(0, at, n).copy_(local_grad(s.name).reshape({-1}));
        at += n;
      }
    if (W > 1) comm_.alltoall(recv, send, out_splits, in_splits)->wait();
    else recv.copy_(send);
    // Received grouped by source rank, plan order within: each of this rank's parameters whole.
    std::vector<int64_t> from(W, 0);
    for (int r = 1; r < W; ++r) from[r] = from[r - 1] + out_splits[r - 1];
    for (size_t k = 0; k < split.size(); ++k) {
      if (root[k] != me) continue;
      const MatrixShard& s = shards[split[k]];
      at::Tensor whole = at::zeros(s.shape, opts);
      at::Tensor flat = whole.view({-1});
      for (int r = 0; r < W; ++r) {
        const ShardSlice* sl = s.slice_on(r);
        const int64_t n = rows_on(s, r);
        if (n == 0) continue;
        flat.narrow(0, sl->row_begin * s.row_numel(), n).copy_(recv.narrow(0, from[r], n));
        from[r] += n;
      }
      norms[split[k]] = parameter_norm(whole);
    }
  }
  at::Tensor vector = at::zeros({P}, at::TensorOptions().dtype(dtype).device(options_.device));
  for (int i = 0; i < P; ++i)
    if (norms[i].defined()) vector.select(0, i).copy_(norms[i]);
  at::Tensor on_control = vector.is_meta() ? vector : vector.to(comm_.control_device());  // meta: a traced step
  comm_.allreduce_sum(on_control)->wait();
  replicas_.sum_over_replicas(on_control, Phase::grad_norm);
  const at::Tensor total = total_norm(on_control.to(options_.device));
  const at::Tensor coef = clip_coefficient(total, options_.max_norm);
  for (auto& unit : units_) unit->segment_grad().mul_(coef);
  if (total.is_meta()) return;  // a traced step (sim/trace.h): no values
  pending_report_.grad_norm = total.item<double>();
  pending_report_.non_finite_norm = !std::isfinite(*pending_report_.grad_norm);
}

StepReport OwnerRuntime::step() {
  PhaseScope phase(comm_, Phase::optimizer_step);
  for (auto& unit : units_) {
    TORCH_CHECK(unit->state() == UnitState::sharded, "runtime: rank ", comm_.rank(), ": step() while unit '",
                unit->name(), "' is ", to_string(unit->state()), " (run backward to completion first)");
  }
  TORCH_CHECK(micro_.last() && (micro_finished_ || micro_.count == 1), "runtime: rank ", comm_.rank(), ": step() after micro-batch ", micro_.index,
              " of ", micro_.count, micro_finished_ ? "" : " whose backward has not finished",
              " (the optimizer runs once per step, after the last micro-batch's backward)");
  StepReport report = pending_report_;
  step_open_ = false;
  if (!report.non_finite_parameter.empty()) {
    TORCH_CHECK(options_.non_finite == NonFinitePolicy::skip, "runtime: rank ", comm_.rank(),
                ": non-finite gradient in parameter '", report.non_finite_parameter,
                "'; the step was not taken (use the skip policy to skip such steps)");
    report.skipped = true;
    return report;
  }
  if (report.non_finite_norm) {
    TORCH_CHECK(options_.non_finite == NonFinitePolicy::skip, "runtime: rank ", comm_.rank(), ": the global gradient norm is ",
                *report.grad_norm, " though every gradient is finite (their squares overflowed); the step was not taken "
                "(use the skip policy to skip such steps)");
    report.skipped = true;
    return report;
  }
  step_optimizers();
  replicas_.broadcast_updates(units_);  // HSDP dedup: the stepping replica's masters to the others
  return report;
}

void OwnerRuntime::step_optimizers() {
  std::vector<int> even_matrices;
  for (size_t i = 0; i < plan_.shards().size(); ++i) {
    if (even_matrix_[i]) {
      even_matrices.push_back(static_cast<int>(i));
      continue;
    }
    if (!optimizers_[i]) continue;
    Unit& unit = *units_[plan_.shards()[i].unit];
    at::Tensor param = unit.local_param(static_cast<int>(i));
    optimizers_[i]->step(param, unit.local_grad(static_cast<int>(i)));
    const MatrixShard& s = plan_.shards()[i];
    if (s.kind == ParamKind::hidden_matrix && s.role == Role::owned_matrix) ++matrix_steps_;
    if (s.kind == ParamKind::expert_matrix && options_.optimizer != OptimizerKind::adamw) matrix_steps_ += param.size(0);
  }
  if (!even_matrices.empty()) {
    even_matrix_step().step(EvenMatrixView(plan_, comm_, options_, units_), even_matrices);
  }
}

void OwnerRuntime::set_lr_factor(double factor) {
  for (auto& o : optimizers_)
    if (o) o->set_lr_factor(factor);
  if (even_step_) even_step_->set_lr_factor(factor);
}

EvenMatrixStep& OwnerRuntime::even_matrix_step() {
  TORCH_CHECK(even_step_, "runtime: rank ", comm_.rank(), ": the plan keeps hidden matrices in even shards under Muon, but no "
              "even-matrix step was given (the reconstruct and alltoall placements give one)");
  return *even_step_;
}

at::Tensor OwnerRuntime::local_param(const std::string& name) {
  const MatrixShard& s = plan_.shard(name);
  const int i = static_cast<int>(&s - plan_.shards().data());
  return units_[s.unit]->local_param(i);
}

at::Tensor OwnerRuntime::local_grad(const std::string& name) {
  const MatrixShard& s = plan_.shard(name);
  const int i = static_cast<int>(&s - plan_.shards().data());
  return units_[s.unit]->local_grad(i);
}

ParamMap OwnerRuntime::gather_full(std::vector<at::Tensor> (Unit::*gather)()) {
  PhaseScope phase(comm_, Phase::other);
  ParamMap out;
  for (auto& unit : units_) {
    std::vector<at::Tensor> full = ((*unit).*gather)();
    for (size_t k = 0; k < full.size(); ++k) out.emplace(plan_.shards()[unit->shards()[k]].name, std::move(full[k]));
  }
  return out;
}

ParamMap OwnerRuntime::gather_full_params() { return gather_full(&Unit::gather_masters); }

ParamMap OwnerRuntime::gather_full_grads() {
  TORCH_CHECK(step_replicas().empty(),
              "gradients: under HSDP --step-mode dedup no rank group holds every reduced gradient; use --step-mode replicated");
  return gather_full(&Unit::gather_grads);
}

int64_t OwnerRuntime::optimizer_state_bytes() const {
  int64_t n = 0;
  if (even_step_) n += even_step_->state_bytes();
  for (const auto& o : optimizers_)
    if (o) n += o->state_bytes();
  return n;
}

int64_t OwnerRuntime::resident_bytes() const {
  int64_t n = optimizer_state_bytes();
  for (const auto& u : units_) n += 2 * u->segment_bytes();
  return n;
}

int64_t OwnerRuntime::gathered_bytes() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u->gathered_bytes();
  return n;
}

}  // namespace mfsdp
