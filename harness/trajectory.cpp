#include "harness/trajectory.h"

#include "core/util/tensor_compare.h"
#include "harness/placements.h"

#include <cmath>
#include <cstring>

namespace mfsdp {

Trajectory to_trajectory(TrainResult result) {
  Trajectory t;
  for (const auto& m : result.steps) t.local_losses.push_back(m.local_loss);
  if (!result.steps.empty()) t.last_step_bytes = result.steps.back().bytes;
  t.params = std::move(result.params_per_step);
  return t;
}

Trajectory run_recorded(RankContext& ctx, const TrainConfig& config) {
  TrainConfig c = config;
  c.record_params = true;
  return to_trajectory(train_placement(ctx, c));
}

Trajectory run_oracle(RankContext& ctx, const TrainConfig& config) {
  TrainConfig c = config;
  c.placement = Placement::ddp;
  return run_recorded(ctx, c);
}

Comparison compare(const Trajectory& control, const Trajectory& experiment) {
  Comparison c;
  auto fail = [&](int step, const std::string& what, const std::string& detail) {
    if (c.first_bad_step < 0) {
      c.first_bad_step = step;
      c.first_bad = what;
      c.detail = detail;
    }
    c.bitwise_equal = false;
  };
  if (control.local_losses.size() != experiment.local_losses.size() || control.params.size() != experiment.params.size()) {
    fail(0, "steps", "different numbers of steps");
    return c;
  }
  for (size_t s = 0; s < control.params.size(); ++s) {
    const double a = control.local_losses[s], b = experiment.local_losses[s];
    if (std::memcmp(&a, &b, sizeof(double)) != 0) {
      c.max_abs_diff = std::max(c.max_abs_diff, std::fabs(a - b));
      fail(static_cast<int>(s) + 1, "loss", "loss " + std::to_string(a) + " vs " + std::to_string(b));
    }
    for (const auto& [name, want] : control.params[s]) {
      auto it = experiment.params[s].find(name);
      if (it == experiment.params[s].end()) {
        fail(static_cast<int>(s) + 1, name, "missing");
        continue;
      }
      TensorDiff d = diff(it->second, want);
      if (d.bitwise_equal) continue;
      c.max_abs_diff = std::max(c.max_abs_diff, d.max_abs_diff);
      c.max_ulp = std::max(c.max_ulp, d.max_ulp);
      fail(static_cast<int>(s) + 1, name, describe(d, it->second, want));
    }
  }
  return c;
}

}  // namespace mfsdp
