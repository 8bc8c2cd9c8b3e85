// Properties of the runtime against the oracle over generated transformers (layers, widths,
// heads, MLP sizes, tied embeddings, experts with their top-k, widths and range counts), world sizes 1..8 and explicit owner assignments (including every matrix on
// one rank, so other ranks own nothing), plus a stateful model of one unit's lifecycle.
// Replay a failure with RC_PARAMS="seed=<printed seed>".
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include "core/plan/planner.h"
#include "core/dist/ranks.h"
#include "core/util/tensor_compare.h"
#include "core/runtime/unit.h"
#include "harness/trajectory.h"
#include "harness/placements.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <mutex>

namespace mfsdp {

// How RapidCheck prints a generated placement (found by argument-dependent lookup).
void showValue(Placement p, std::ostream& os) { os << to_string(p); }

namespace {

rc::Gen<TransformerConfig> small_transformer() {
  return rc::gen::exec([] {
    TransformerConfig c = preset_config("tiny");
    c.layers = *rc::gen::inRange<int64_t>(1, 3);
    c.heads = *rc::gen::element<int64_t>(1, 2, 4);
    c.kv_heads = *rc::gen::element<int64_t>(1, c.heads);
    c.hidden = c.heads * *rc::gen::element<int64_t>(2, 4, 6);
    c.intermediate = *rc::gen::inRange<int64_t>(1, 40);
    c.qkv_bias = *rc::gen::arbitrary<bool>();
    c.tie_embeddings = *rc::gen::arbitrary<bool>();
    if (*rc::gen::inRange(0, 3) == 0) {  // mixture of experts: routed (and shared) experts, some blocks dense
      c.experts = *rc::gen::inRange<int64_t>(1, 7);
      c.top_k = *rc::gen::inRange<int64_t>(1, c.experts + 1);
      c.moe_intermediate = *rc::gen::inRange<int64_t>(1, 25);
      c.shared_experts = *rc::gen::inRange<int64_t>(0, 2);
      c.first_dense = *rc::gen::inRange<int64_t>(0, c.layers + 1);
    }
    return c;
  });
}

// One training step of the runtime equals one step of the oracle, bit for bit, and unshard of the
// initial state reproduces it exactly, under either precision policy and on HSDP meshes.
RC_GTEST_PROP(RuntimeProperties, OneStepBitMatchesTheOracle, ()) {
  TrainConfig config;
  config.model = *small_transformer();
  config.steps = 1;
  config.batch = 1;
  config.seq = *rc::gen::inRange<int64_t>(1, 6);
  config.seed = *rc::gen::inRange<uint64_t>(0, 1000);
  set_optimizer(config, *rc::gen::element(OptimizerKind::muon, OptimizerKind::adamw, OptimizerKind::normuon,
                                          OptimizerKind::adamuon));
  config.runtime.muon.lr = 0.02;
  // Muon: any Newton–Schulz variant; one without a fixed table runs 1 to 6 steps.
  {
    MuonOptions& m = config.runtime.muon;
    m.ns_variant = ns_variants()[*rc::gen::inRange<size_t>(0, ns_variants().size())].id;
    const NsVariantInfo& v = ns_variant_info(m.ns_variant);
    m.ns_steps = v.fixed_steps > 0 ? v.fixed_steps : *rc::gen::inRange(1, 7);
  }
  const int W = *rc::gen::inRange(1, 9);
  // Sometimes an HSDP mesh: R replica groups of S = W / R ranks (the plan is made for S).
  std::vector<int> divisors;
  for (int r = 2; r <= W; ++r)
    if (W % r == 0 && W / r >= 1) divisors.push_back(r);
  const int R = !divisors.empty() && *rc::gen::inRange(0, 3) == 0 ? *rc::gen::elementOf(divisors) : 1;
  const int S = W / R;
  config.runtime.replicas = R;
  config.runtime.step_mode = *rc::gen::element(StepMode::replicated, StepMode::dedup);
  config.planner.planner = PlannerKind::explicit_assignment;
  config.planner.tail_policy = *rc::gen::element(TailPolicy::even, TailPolicy::owner);
  config.planner.expert_ranges = *rc::gen::inRange(0, 5);  // 0: one per rank while experts last
  const bool all_on_one = *rc::gen::arbitrary<bool>();
  const int one = *rc::gen::inRange(0, S);
  for (const PlanItem& item : plan_items(TransformerModel(config.model).spec(), config.planner))
    config.planner.explicit_owners[item.key] = all_on_one ? one : *rc::gen::inRange(0, S);
  // Mostly the owner plan; sometimes a baseline placement, and sometimes with prefetch. NorMuon and
  // AdaMuon need whole matrices: not the even-row baselines (reconstruct, alltoall).
  const OptimizerKind opt = config.runtime.optimizer;
  const bool whole_only = opt == OptimizerKind::normuon || opt == OptimizerKind::adamuon;
  const Placement placement =
      R > 1 ? (whole_only ? Placement::owner
                          : *rc::gen::weightedElement<Placement>({{6, Placement::owner}, {1, Placement::reconstruct}}))
            : whole_only ? *rc::gen::weightedElement<Placement>({{6, Placement::owner}, {1, Placement::zero1}})
                         : *rc::gen::weightedElement<Placement>({{6, Placement::owner}, {1, Placement::reconstruct},
                                                                 {1, Placement::alltoall}, {1, Placement::zero1}});
  if (placement == Placement::reconstruct) config.runtime.step_mode = StepMode::replicated;  // dedup steps whole matrices
  if (placement == Placement::reconstruct || placement == Placement::alltoall) {
    config.planner.planner = PlannerKind::balanced;  // every parameter even: no owners to assign
    config.planner.explicit_owners.clear();
  }
  apply_placement(placement, config);
  // The owner runtime's experts sometimes take one batched Newton–Schulz chain per expert tensor.
  config.runtime.muon.batched_ns = placement == Placement::owner && config.model.experts > 0 && *rc::gen::arbitrary<bool>();
  config.runtime.prefetch = *rc::gen::arbitrary<bool>();
  // Precision: float32, or bf16 compute copies of float32 masters reduced in float32 or bf16.
  if (*rc::gen::arbitrary<bool>()) {
    config.runtime.precision.param_dtype = c10::kBFloat16;
    config.runtime.precision.reduce_dtype = *rc::gen::element(c10::kFloat, c10::kBFloat16);
    if (*rc::gen::arbitrary<bool>()) config.runtime.precision.output_dtype = c10::kFloat;
  }
  // Sometimes gradient accumulation (K micro-batches of one sequence, either order) and sometimes
  // clipping at a threshold that may or may not bind.
  if (*rc::gen::inRange(0, 3) == 0) {
    config.grad_accum = *rc::gen::inRange(2, 5);
    config.runtime.grad_reduce = *rc::gen::element(GradReduce::per_microbatch, GradReduce::deferred);
  }
  if (*rc::gen::inRange(0, 3) == 0) config.runtime.max_norm = *rc::gen::element(1e-3, 0.1, 1.0, 1e3);
  // Sometimes activation checkpointing (the owner runtime's placements), and sometimes a schedule
  // whose warm-up, stable phase, decay and floor fall anywhere in the run.
  if (runs_on_owner_runtime(placement) && *rc::gen::inRange(0, 3) == 0) config.runtime.activation_checkpointing = true;
  if (*rc::gen::inRange(0, 3) == 0) {
    LrSchedule& s = config.lr_schedule;
    s.kind = *rc::gen::element(LrScheduleKind::constant, LrScheduleKind::warmup_cosine, LrScheduleKind::warmup_linear,
                               LrScheduleKind::wsd);
    s.warmup_steps = *rc::gen::inRange<int64_t>(0, 3);
    if (s.kind == LrScheduleKind::wsd) s.stable_steps = *rc::gen::inRange<int64_t>(0, 3);
    if (s.decays()) {
      if (*rc::gen::arbitrary<bool>()) s.decay_steps = *rc::gen::inRange<int64_t>(1, 4);  // else the run's default
      s.min_lr_ratio = *rc::gen::element(0.0, 0.1, 0.5);
    }
  }
  // The Muon family sometimes clips q and k (QK-clip) at a threshold that may or may not bind.
  if (uses_newton_schulz(config.runtime.optimizer) && *rc::gen::inRange(0, 3) == 0)
    config.qk_clip_tau = *rc::gen::element(1e-3, 0.01, 0.05, 1.0);
  // Sometimes the whole model's unshard and reduction one group each (the owner runtime's
  // placements, without prefetch or recompute).
  if (runs_on_owner_runtime(placement) && !config.runtime.prefetch && !config.runtime.activation_checkpointing &&
      *rc::gen::inRange(0, 3) == 0)
    config.runtime.comm_groups = CommGroups::model;
  // The drawn case in words (RapidCheck prints these with a failure; <???> alone says nothing).
  RC_LOG() << "W " << W << " = " << R << " x " << S << " " << to_string(config.runtime.step_mode) << ", "
           << to_string(config.placement) << ", " << describe_optimizer(config.runtime)
           << (config.runtime.muon.batched_ns ? " batched" : "") << ", tail "
           << to_string(config.planner.tail_policy) << ", expert_ranges " << config.planner.expert_ranges
           << (all_on_one ? ", every item on rank " + std::to_string(one) : std::string(", owners drawn"))
           << ", prefetch " << config.runtime.prefetch << ", groups " << name_in(kCommGroupsNames, config.runtime.comm_groups)
           << ", precision " << to_string(config.runtime.precision)
           << ", seq " << config.seq << ", seed " << config.seed << ", K " << config.grad_accum << " "
           << to_string(config.runtime.grad_reduce) << ", max norm " << config.runtime.max_norm << ", recompute "
           << config.runtime.activation_checkpointing << ", schedule " << describe(config.lr_schedule) << ", qk-clip tau " << config.qk_clip_tau << "; model: layers " << config.model.layers << ", heads "
           << config.model.heads << "/" << config.model.kv_heads << ", hidden " << config.model.hidden << ", intermediate "
           << config.model.intermediate << ", qkv_bias " << config.model.qkv_bias << ", tied " << config.model.tie_embeddings
           << ", experts " << config.model.experts << " top " << config.model.top_k << " width " << config.model.moe_intermediate
           << " shared " << config.model.shared_experts << " first_dense " << config.model.first_dense << "\n";
  RC_TAG(to_string(config.placement));
  RC_TAG(to_string(config.runtime.precision));
  if (R > 1) RC_TAG(std::string("HSDP ") + to_string(config.runtime.step_mode));
  if (config.model.tie_embeddings) RC_TAG("tied embeddings");
  if (config.grad_accum > 1) RC_TAG(std::string("accumulation ") + to_string(config.runtime.grad_reduce));
  if (config.runtime.max_norm > 0) RC_TAG("clipping");
  if (config.runtime.activation_checkpointing) RC_TAG("recompute");
  if (config.qk_clip_tau > 0) RC_TAG("qk-clip");
  if (scheduled(config.lr_schedule)) RC_TAG(std::string("schedule ") + to_string(config.lr_schedule.kind));
  if (config.model.experts > 0 && config.model.first_dense < config.model.layers) RC_TAG("experts");

  std::mutex m;
  std::vector<std::string> failures;
  RanksOptions ranks;
  ranks.world_size = W;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    const Comparison c = compare(run_oracle(ctx, config), run_recorded(ctx, config));
    if (!c.bitwise_equal) {
      std::lock_guard<std::mutex> lock(m);
      failures.push_back("rank " + std::to_string(ctx.rank) + ": " + c.first_bad + ": " + c.detail);
    }
  });
  for (const auto& f : failures) RC_FAIL(f);
}

// ---- Stateful model of a unit's lifecycle (one rank) ----

struct LifecycleModel {
  UnitState state = UnitState::sharded;
};

struct System {
  Unit* unit;
  int64_t capacity;
  const c10::StorageImpl* gathered_impl;
  const c10::StorageImpl* segment_impl;
  at::Tensor segment_snapshot;
  std::vector<at::Tensor> zero_grads;
};

bool legal(UnitState from, UnitState to) {
  switch (from) {
    case UnitState::sharded: return to == UnitState::unsharded;
    case UnitState::unsharded: return to == UnitState::pinned || to == UnitState::sharded || to == UnitState::reducing;
    case UnitState::pinned: return to == UnitState::revived || to == UnitState::sharded;
    case UnitState::revived: return to == UnitState::reducing;
    case UnitState::reducing: return to == UnitState::sharded;
  }
  return false;
}

// Checks the invariants every legal sequence keeps: gathered memory resident exactly in the
// unsharded/revived states, the same gathered StorageImpl forever, the segment never replaced.
void check_invariants(const LifecycleModel& model, System& sut) {
  RC_ASSERT(sut.unit->state() == model.state);
  const bool resident = model.state == UnitState::unsharded || model.state == UnitState::revived;
  RC_ASSERT(sut.unit->gathered_bytes() == (resident ? sut.capacity : 0));
  RC_ASSERT(sut.unit->gathered_storage_impl() == sut.gathered_impl);
  RC_ASSERT(sut.unit->segment().storage().unsafeGetStorageImpl() == sut.segment_impl);
  if (resident) {  // full views read the segment's values back exactly
    std::vector<at::Tensor> views = sut.unit->full_views();
    RC_ASSERT(!views.empty());
  }
}

// One command: the operation that moves to `target`, tried from whatever state the unit is in.
struct Move : rc::state::Command<LifecycleModel, System> {
  UnitState target = *rc::gen::element(UnitState::sharded, UnitState::unsharded, UnitState::pinned,
                                       UnitState::revived, UnitState::reducing);
  int how = *rc::gen::inRange(0, 2);  // for `sharded`: reshard (from unsharded) or release (from pinned)

  void apply(LifecycleModel& model) const override {
    if (legal(model.state, target)) model.state = target;
  }

  void run(const LifecycleModel& model, System& sut) const override {
    const bool ok = legal(model.state, target);
    try {
      switch (target) {
        case UnitState::unsharded: sut.unit->unshard(); break;
        case UnitState::pinned: sut.unit->reshard(/*keep_for_backward=*/true); break;
        case UnitState::revived: sut.unit->revive(); break;
        case UnitState::reducing: sut.unit->reduce_to_owner(sut.zero_grads, ReduceMode::deterministic); break;
        case UnitState::sharded:
          if (model.state == UnitState::reducing) sut.unit->finish_reduction(/*divisor=*/1);  // zero gradients: any divisor
          else if (model.state == UnitState::pinned) sut.unit->release();
          else sut.unit->reshard(/*keep_for_backward=*/false);
          break;
      }
      RC_ASSERT(ok);  // an illegal move must not succeed
    } catch (const c10::Error& e) {
      RC_ASSERT(!ok);
      RC_ASSERT(std::string(e.what_without_backtrace()).find("illegal lifecycle move") != std::string::npos);
    }
    LifecycleModel after = model;
    apply(after);
    check_invariants(after, sut);
    // Whatever happened, the owned values are untouched by lifecycle moves.
    RC_ASSERT(bitwise_equal(sut.unit->segment(), sut.segment_snapshot));
  }

  void show(std::ostream& os) const override {
    os << "move to " << to_string(target);
  }
};

RC_GTEST_PROP(RuntimeProperties, UnitLifecycleKeepsItsInvariantsAndRefusesIllegalMoves, ()) {
  TransformerConfig config = *small_transformer();
  const TransformerModel model(config);
  PlannerOptions popts;
  popts.tail_policy = *rc::gen::element(TailPolicy::even, TailPolicy::owner);
  const OwnershipPlan plan = make_plan(model.spec(), 1, popts);
  const int u = *rc::gen::inRange(0, static_cast<int>(plan.units().size()));
  PrecisionPolicy precision;
  if (*rc::gen::arbitrary<bool>()) precision.param_dtype = c10::kBFloat16;  // gathered holds the own segment too
  const auto commands = *rc::state::gen::commands(LifecycleModel{}, rc::state::gen::execOneOfWithArgs<Move>());
  RanksOptions ranks;
  ranks.world_size = 1;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    Communicator comm(ctx.backend);
    Unit unit(plan, u, comm, at::kCPU, UnshardStrategy::broadcast, precision);
    unit.segment().copy_(at::arange(unit.segment().numel(), unit.segment().options()));
    System sut{&unit, unit.gathered_capacity(), unit.gathered_storage_impl(),
               unit.segment().storage().unsafeGetStorageImpl(), unit.segment().clone(), {}};
    for (int s : unit.shards()) sut.zero_grads.push_back(at::zeros(plan.shards()[s].shape));
    LifecycleModel initial;
    rc::state::runAll(commands, initial, sut);
  });
}

}  // namespace
}  // namespace mfsdp
