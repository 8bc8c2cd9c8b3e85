// The ZeRO-1 owner baseline: every rank keeps the full parameters and computes full gradients;
// each parameter's gradient is reduced to its owner only (the runtime's deterministic rank-order
// routine), the owner alone keeps optimizer state and updates it, then broadcasts the updated
// parameter to everyone. Optimizer-state memory like the owner plan, parameter memory like DDP.
#pragma once

#include "oracle/oracle.h"

namespace mfsdp {

// Owners: hidden matrices as the planner places them; embedding, head and each unit's tail are
// owned whole too (the planner balances them as items; they keep AdamW).
TrainResult train_zero1(RankContext& ctx, const TrainConfig& config,
                        const std::function<void(const StepMetrics&)>& on_step = {});
Trajectory run_zero1(RankContext& ctx, const TrainConfig& config);

}  // namespace mfsdp
