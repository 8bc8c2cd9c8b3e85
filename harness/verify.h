// `mfsdp verify`'s verdict: a placement and the DDP full-matrix oracle run side by side on this
// rank, compared after every step, and the ranks agree on one verdict through the Communicator
// (phase `other`), so every rank reports the same thing.
#pragma once

#include "core/dist/ranks.h"
#include "core/train/trainer.h"
#include "harness/trajectory.h"

#include <array>
#include <string>
#include <vector>

namespace mfsdp {

struct VerifyVerdict {
  // Over every rank: every parameter after every step and every loss memcmp-equal, and the worst
  // differences seen.
  bool bitwise_equal = true;
  double max_abs_diff = 0, max_ulp = 0;
  // The fast mode's deviation over its tolerance model's steps (kFastToleranceSteps), the worst
  // over ranks, and the bounds for this run's optimizer and reduce dtype.
  FastDeviation fast;
  FastTolerance tolerance{};
  bool within_tolerance() const { return fast.within(tolerance); }
  // The mean loss over ranks per step, of the placement and of the oracle.
  std::vector<double> loss_runtime, loss_oracle;
  // Clipping: the total gradient norm before clipping per step (this rank's; every rank's is the
  // same, and compared bit for bit with the rest), of the placement and of the oracle.
  std::vector<double> grad_norm_runtime, grad_norm_oracle;
  // QK-clip: per step the largest attention logit and the query heads rescaled (every rank's are
  // the same), of the placement and of the oracle.
  std::vector<double> qk_max_logit_runtime, qk_max_logit_oracle;
  std::vector<int64_t> qk_clipped_runtime, qk_clipped_oracle;
  // This rank's bytes per phase in the last step.
  std::array<PhaseCounters, kNumPhases> runtime_bytes{}, oracle_bytes{};
  // This rank's first difference (empty when it saw none).
  Comparison mine;
};

// Runs `config` under the oracle and under config.placement on this rank and agrees the verdict
// with every other rank. Collective.
VerifyVerdict verify_against_oracle(RankContext& ctx, const TrainConfig& config);

}  // namespace mfsdp
