// A checkpoint directory belongs to one run at a time (docs/checkpoints.md, "Ownership"):
//  - CheckpointDirLock: rank 0 holds an flock(2) on the directory D itself while it trains (no file
//    written or replaced inside D can take it away); D/lock names the holder (pid, host, start
//    time, command line) for the error another run gets. The kernel drops the lock with its
//    process, so a crashed run's lock is free at once: the record left in D/lock is replaced by
//    the next holder (stale-lock recovery). Before every commit the holder checks that D is still
//    the directory it locked (check_held).
//  - committed_steps / latest_step: what the directory holds.
//  - compare_settings: what differs between the settings a checkpoint was written with and a run
//    that resumes it (a different model is refused; a different learning rate is allowed, said).
#pragma once

#include "core/io/checkpoint_format.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

class CheckpointDirLock {
 public:
  // Creates `dir` if needed, checks that it is a writable directory and takes the lock; throws
  // naming the directory and, when another run holds it, that run.
  explicit CheckpointDirLock(const std::string& dir);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  // Throws when the path no longer names the directory this lock holds (moved, replaced).
  void check_held() const;

 private:
  std::string dir_;
  int fd_ = -1;
  uint64_t dev_ = 0, ino_ = 0;
};

// "step_00000012" for 12.
std::string step_dir_name(int64_t step);

// The steps of `dir` that are committed checkpoints (step_N/ with a layout.json), ascending.
std::vector<int64_t> committed_steps(const std::string& dir);

// The step `dir/latest` names; nullopt when there is no `latest`. Throws when it cannot be read or
// names no step directory.
std::optional<int64_t> latest_step(const std::string& dir);

// Settings that differ between checkpoint `layout` and a run resuming it with model configuration
// `model` and optimizer settings `optimizers` (optimizers_to_json). `refused`: the model, an
// optimizer kind or a hyperparameter that changes the results; `allowed`: learning rates
// (documented as allowed: a schedule may change them), each "what: was X, is Y".
struct SettingsDiff {
  std::vector<std::string> refused, allowed;
};
// A changed precision policy is allowed (said): the checkpoint holds float32 masters and float32
// state whatever the policy, so they resume exactly; only the steps from there compute differently.
SettingsDiff compare_settings(const CheckpointLayout& layout, const nlohmann::json& model, const nlohmann::json& optimizers,
                              const nlohmann::json& precision);

}  // namespace mfsdp
