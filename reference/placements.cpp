#include "reference/placements.h"

#include "reference/zero1.h"

namespace mfsdp {

TrainResult train_placement(RankContext& ctx, const TrainConfig& config,
                            const std::function<void(const StepMetrics&)>& on_step) {
  switch (config.placement) {
    case Placement::owner:
    case Placement::reconstruct:
    case Placement::alltoall: return train_owner(ctx, config, on_step);
    case Placement::zero1: return train_zero1(ctx, config, on_step);
    case Placement::ddp: return train_ddp(ctx, config, on_step);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown Placement");
}

Trajectory run_placement_recorded(RankContext& ctx, const TrainConfig& config) {
  TrainConfig c = config;
  c.record_params = true;
  return to_trajectory(train_placement(ctx, c));
}

}  // namespace mfsdp
