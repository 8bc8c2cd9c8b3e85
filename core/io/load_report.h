// What loading a checkpoint found, for the loader (core/io/checkpoint.h) and for a run that resumed
// from it (TrainResult::resumed): one record, filled by whichever placement loaded it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp {

struct LoadReport {
  std::string checkpoint;  // the step directory read; empty: the run started at step 0
  int64_t step = 0;
  int written_world_size = 0;
  bool same_layout = false;  // same plan and mesh: each rank read (and fully verified) its own file
  int64_t bytes_read = 0;    // by this rank
  int64_t bytes_total = 0;   // all rank files
  int64_t bytes_verified = 0;  // by this rank: its share of verifying every file once
  // The sampler state (JSON text) the writing rank of the same index recorded (rank 0's if none),
  // and the sampler settings of this run that differ from it (set by the training loop).
  std::string sampler;
  // Set by the training loop: the learning rates the run continues with (its schedule at t, and
  // that this run's base rates are used).
  std::string lr_schedule;
  std::vector<std::string> warnings;
};

}  // namespace mfsdp
