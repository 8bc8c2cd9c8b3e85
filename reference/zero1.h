// The ZeRO-1 owner baseline: every rank keeps the full parameters and computes full gradients;
// each parameter's gradient is reduced to its owner only (the runtime's deterministic rank-order
// routine), the owner alone keeps optimizer state and updates it, then broadcasts the updated
// parameter to everyone. Optimizer-state memory like the owner plan, parameter memory like DDP.
#pragma once

#include "core/train/trainer.h"

#include <memory>

namespace mfsdp {

// The plan ZeRO-1 places whole tensors by: every tensor (embedding and head included) whole on
// one owner, from the caller's planner (an explicit assignment becomes balanced).
PlannerOptions zero1_planner_options(PlannerOptions planner);

// Owners: hidden matrices as the planner places them; embedding, head and each unit's tail are
// owned whole too (the planner balances them as items; they keep AdamW).
std::unique_ptr<PlacementRunner> make_zero1_runner(const TransformerModel& model, Communicator& comm,
                                                   const TrainConfig& config, const ParamMap& init);

}  // namespace mfsdp
