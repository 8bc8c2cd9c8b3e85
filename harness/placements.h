// Every placement by name (core/train/placement.h): the owner runtime's (owner, reconstruct,
// alltoall), the ZeRO-1 owner baseline and the DDP oracle, all behind the one loop and the same
// counting communicator, so bytes and calls per phase compare directly. The composition root
// (library mfsdp_placements): the one place that knows every placement's runner and options.
#pragma once

#include "core/train/trainer.h"

#include <functional>
#include <memory>

namespace mfsdp {

// Sets config.placement and what it implies: reconstruct and alltoall keep every parameter in
// even shards and step hidden matrices with their even-matrix step (reference/).
void apply_placement(Placement placement, TrainConfig& config);

// The planner options a placement's plan is made with from the run's: zero1 places every tensor
// whole (reference/zero1.h); the others use them as given.
PlannerOptions planner_options_for(Placement placement, const PlannerOptions& planner);

// The runner of config.placement on this rank.
// `ctx`: this rank's context, which HSDP (config.runtime.replicas > 1) forms its mesh from.
std::unique_ptr<PlacementRunner> make_runner(const TransformerModel& model, Communicator& comm, const TrainConfig& config,
                                             const ParamMap& init, RankContext* ctx = nullptr);

// Runs config.placement for config.steps steps on this rank; `on_step` as in train_loop.
TrainResult train_placement(RankContext& ctx, const TrainConfig& config,
                            const std::function<void(const StepMetrics&)>& on_step = {});

// bench/bench_step's cases, shared with the simulator's check against them (sim/tests): the
// model ("tiny", or "small": hidden 128, 4 layers, intermediate 512) and the `mfsdp train`
// defaults with 4 x 32 tokens per rank, for a placement name of bench_step's (owner, reconstruct,
// alltoall, zero1, ddp, hsdp2_owner_replicated, hsdp2_owner_dedup, hsdp2_reconstruct).
TransformerConfig bench_model_config(const std::string& name);
TrainConfig bench_train_config(const std::string& placement, const std::string& model);

}  // namespace mfsdp
