// The owner runtime behind the common loop: placements owner, reconstruct and alltoall (the last
// two with config.runtime.even_matrix_step set, harness/placements.h). Writes and resumes
// checkpoints (core/io/checkpoint.h).
#pragma once

#include "core/train/trainer.h"

#include <memory>

namespace mfsdp {

// With config.runtime.replicas > 1 (HSDP), `ctx` forms the mesh (core/dist/mesh.h); the plan is
// made for its shard groups.
std::unique_ptr<PlacementRunner> make_owner_runner(const TransformerModel& model, Communicator& comm,
                                                   const TrainConfig& config, const ParamMap& init,
                                                   RankContext* ctx = nullptr);

}  // namespace mfsdp
