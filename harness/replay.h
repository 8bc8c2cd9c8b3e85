// One-step replay (teacher forcing): a candidate optimizer judged step by step against the
// reference's, each step started from the reference's own parameters, gradients and state, so a
// slip shows at the first step where it can change the update, not through chaotic divergence.
//
// The candidate is a replay dump (format 2 with a "replay" object; mfsdp_kit.replay writes it):
// its step k holds the candidate's parameters after one step from the reference's parameters
// after step k - 1, the reference's step-k gradients and its state after step k - 1. The reference
// is an oracle dump with gradients and state (mfsdp train --placement ddp --dump-grads
// --dump-state).
//
// Per step k and compared tensor (every parameter, and every optimizer state tensor the replay dump
// also holds under the reference's name), with X the value before the step (the parameter after
// step k - 1; the state after it, zeros at step 1), the reference update R = X_k - X and the
// candidate's C = C_k - X (in double):
//   rel_error      ||C - R|| / ||R||
//   one_minus_cos  1 - <C, R> / (||C|| ||R||)
//   norm_ratio     | ||C|| / ||R|| - 1 |          (the update's scale: an lr rule)
//   along_param    |<C - R, X>| / (||R|| ||X||)   (the part along the value: weight decay)
// The noise floor of each is measured, not assumed: mfsdp's own optimizer (the header's) is re-run
// from the reference's inputs with the gradients and state perturbed by -1, 0 or +1 unit in the
// last place, element by element (seeded), in the precision the update is computed in: the
// Newton–Schulz dtype (bf16 for torch's variant) for the Muon family's matrices, float32 otherwise.
// A floor is the largest statistic of a perturbed re-run against the unperturbed one. Runs double
// from min_runs until no floor grows by more than a quarter (at most max_runs). The unperturbed
// re-run must reproduce the reference's step bit for bit (else the header does not describe the
// reference, and replay refuses it). A tensor's verdict:
//   bitwise           C_k equals the reference's X_k bit for bit;
//   within the noise  every statistic at most `factor` times its floor;
//   systematic        some statistic beyond `factor` times its floor (named, with the floor);
//                     a counter (AdamW's step) that differs is systematic too.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

struct TrajectoryDump;

struct ReplayOptions {
  int min_runs = 8;
  int max_runs = 32;
  double factor = 3;
  uint64_t seed = 1;
};

constexpr int kReplayStats = 4;
inline const char* const kReplayStatNames[kReplayStats] = {"rel_error", "one_minus_cos", "norm_ratio", "along_param"};

struct ReplayTensor {
  int64_t step = 0;
  std::string name;
  std::string verdict;  // "bitwise", "within the noise", "systematic"
  double stat[kReplayStats] = {0, 0, 0, 0};
  double floor[kReplayStats] = {0, 0, 0, 0};
  std::string reason;  // for "systematic": the statistics beyond their floor
  std::string unit;    // the perturbation's unit: "bf16 ULP", "fp32 ULP"
};

struct ReplayStep {
  int64_t step = 0;
  int runs = 0;          // perturbed re-runs of the reference optimizer
  double seconds = 0;    // the whole step's replay: self-check, runs and statistics
  int systematic = 0, within = 0, bitwise = 0;
};

struct ReplayReport {
  std::vector<ReplayStep> steps;
  std::vector<ReplayTensor> tensors;  // step by step, in the model's order
  std::optional<int64_t> first_systematic_step;
  double factor = 3;
  bool clean() const { return !first_systematic_step; }
};

// Throws (bad input) naming what is wrong: not a replay dump, headers that disagree, a reference
// without gradients or state, a header replay cannot rebuild, a reference its own optimizer does
// not reproduce.
ReplayReport replay_conform(const TrajectoryDump& ref, const TrajectoryDump& cand, const ReplayOptions& options = {});

std::string replay_text(const ReplayReport& r);
nlohmann::json replay_json(const ReplayReport& r, const TrajectoryDump& ref, const TrajectoryDump& cand);

}  // namespace mfsdp
