// Every placement of `mfsdp train --placement` behind one call: the owner runtime's placements
// (owner, reconstruct, alltoall), the ZeRO-1 owner baseline and the DDP oracle. All of them go
// through the same counting communicator, so bytes and calls per phase compare directly.
#pragma once

#include "oracle/oracle.h"

namespace mfsdp {

// Runs config.placement (set with apply_placement) for config.steps steps on this rank.
TrainResult train_placement(RankContext& ctx, const TrainConfig& config,
                            const std::function<void(const StepMetrics&)>& on_step = {});

// The same run recorded as a trajectory (full parameters after every step) for comparisons.
Trajectory run_placement_recorded(RankContext& ctx, const TrainConfig& config);

}  // namespace mfsdp
