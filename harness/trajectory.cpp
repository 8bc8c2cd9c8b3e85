#include "harness/trajectory.h"

#include "core/dist/ranks.h"
#include "core/util/tensor_compare.h"
#include "harness/placements.h"

#include <ATen/TensorOperators.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <mutex>

namespace mfsdp {

Trajectory to_trajectory(TrainResult result) {
  Trajectory t;
  for (const auto& m : result.steps) {
    t.local_losses.push_back(m.local_loss);
    if (m.grad_norm) t.grad_norms.push_back(*m.grad_norm);
    if (m.qk_max_logit) t.qk_max_logits.push_back(*m.qk_max_logit), t.qk_clipped_heads.push_back(m.qk_clipped_heads);
  }
  if (!result.steps.empty()) t.last_step_bytes = result.steps.back().bytes;
  t.params = std::move(result.params_per_step);
  t.initial_params = std::move(result.initial_params);
  return t;
}

namespace {
template <class T>
void append_vector(std::vector<T>& to, const std::vector<T>& tail) {
  to.insert(to.end(), tail.begin(), tail.end());
}
template <class T>
void drop_front(std::vector<T>& v, size_t n) {
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size())));
}
}  // namespace

void append(Trajectory& to, const Trajectory& tail) {
  append_vector(to.local_losses, tail.local_losses);
  append_vector(to.grad_norms, tail.grad_norms);
  append_vector(to.qk_max_logits, tail.qk_max_logits);
  append_vector(to.qk_clipped_heads, tail.qk_clipped_heads);
  append_vector(to.params, tail.params);
  to.last_step_bytes = tail.last_step_bytes;
}

Trajectory drop_steps(Trajectory t, size_t n) {
  drop_front(t.local_losses, n);
  drop_front(t.grad_norms, n);
  drop_front(t.qk_max_logits, n);
  drop_front(t.qk_clipped_heads, n);
  t.initial_params = n == 0 ? std::move(t.initial_params) : n <= t.params.size() ? t.params[n - 1] : ParamMap{};
  drop_front(t.params, n);
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

std::vector<std::string> oracle_differences(
    const TrainConfig& config, int world_size,
    const std::function<std::string(int rank, const TrainResult& oracle, const TrainResult& mine)>& also) {
  std::mutex mutex;
  std::vector<std::string> out;
  RanksOptions ranks;
  ranks.world_size = world_size;
  ranks.timeout = std::chrono::seconds(120);
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    TrainConfig oracle = config, mine = config;
    oracle.placement = Placement::ddp;
    oracle.record_params = mine.record_params = true;
    const TrainResult a = train_placement(ctx, oracle), b = train_placement(ctx, mine);
    const Comparison cmp = compare(to_trajectory(a), to_trajectory(b));
    const std::string extra = also ? also(ctx.rank, a, b) : std::string();
    std::lock_guard<std::mutex> lock(mutex);
    if (!cmp.bitwise_equal)
      out.push_back("rank " + std::to_string(ctx.rank) + ": step " + std::to_string(cmp.first_bad_step) + ", " + cmp.first_bad +
                    " (" + cmp.detail + ")" + (cmp.step_report.empty() ? "" : "; at that step: " + cmp.step_report));
    if (!extra.empty()) out.push_back("rank " + std::to_string(ctx.rank) + ": " + extra);
  });
  return out;
}

namespace {
// ", update ratio [lo, hi]": the experiment's update of `name` over the control's, elementwise where
// the control's is non-zero, when both started the step from bitwise-equal parameters ("" otherwise).
std::string update_ratio(const ParamMap& before_c, const ParamMap& before_e, const std::string& name, const at::Tensor& after_c,
                         const at::Tensor& after_e) {
  const auto bc = before_c.find(name), be = before_e.find(name);
  if (bc == before_c.end() || be == before_e.end() || !diff(bc->second, be->second).bitwise_equal) return "";
  const at::Tensor uc = after_c.to(at::kDouble) - bc->second.to(at::kDouble);
  const at::Tensor ue = after_e.to(at::kDouble) - bc->second.to(at::kDouble);
  const at::Tensor moved = uc.ne(0);
  if (!moved.any().item<bool>()) return "";
  const at::Tensor ratio = ue.masked_select(moved) / uc.masked_select(moved);
  std::ostringstream out;
  out << ", update ratio [" << std::setprecision(6) << ratio.min().item<double>() << ", " << ratio.max().item<double>() << "]";
  return out.str();
}
}  // namespace

Comparison compare(const Trajectory& control, const Trajectory& experiment) {
  Comparison c;
  int report_step = -1;  // the first step at which a parameter differs: every differing one reported
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
  if (control.grad_norms.size() != experiment.grad_norms.size()) {
    fail(0, "grad norm", "clipping norms of " + std::to_string(control.grad_norms.size()) + " vs " +
                             std::to_string(experiment.grad_norms.size()) + " steps");
    return c;
  }
  if (control.qk_max_logits.size() != experiment.qk_max_logits.size()) {
    fail(0, "qk-clip", "QK-clip statistics of " + std::to_string(control.qk_max_logits.size()) + " vs " +
                           std::to_string(experiment.qk_max_logits.size()) + " steps");
    return c;
  }
  for (size_t s = 0; s < control.params.size(); ++s) {
    const double a = control.local_losses[s], b = experiment.local_losses[s];
    if (std::memcmp(&a, &b, sizeof(double)) != 0) {
      c.max_abs_diff = std::max(c.max_abs_diff, std::fabs(a - b));
      fail(static_cast<int>(s) + 1, "loss", "loss " + std::to_string(a) + " vs " + std::to_string(b));
    }
    if (s < control.grad_norms.size() && std::memcmp(&control.grad_norms[s], &experiment.grad_norms[s], sizeof(double)) != 0)
      fail(static_cast<int>(s) + 1, "grad norm",
           "grad norm " + std::to_string(control.grad_norms[s]) + " vs " + std::to_string(experiment.grad_norms[s]));
    if (s < control.qk_max_logits.size() &&
        (std::memcmp(&control.qk_max_logits[s], &experiment.qk_max_logits[s], sizeof(double)) != 0 ||
         control.qk_clipped_heads[s] != experiment.qk_clipped_heads[s]))
      fail(static_cast<int>(s) + 1, "qk-clip",
           "largest logit " + std::to_string(control.qk_max_logits[s]) + " vs " + std::to_string(experiment.qk_max_logits[s]) +
               ", clipped heads " + std::to_string(control.qk_clipped_heads[s]) + " vs " +
               std::to_string(experiment.qk_clipped_heads[s]));
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
      if (report_step < 0) report_step = static_cast<int>(s);
      if (report_step != static_cast<int>(s)) continue;
      const ParamMap& before_c = s == 0 ? control.initial_params : control.params[s - 1];
      const ParamMap& before_e = s == 0 ? experiment.initial_params : experiment.params[s - 1];
      c.step_report += (c.step_report.empty() ? "" : "; ") + name + ": " + std::to_string(d.mismatches) + " of " +
                       std::to_string(want.numel()) + " differ, max |a-b| " + std::to_string(d.max_abs_diff) +
                       update_ratio(before_c, before_e, name, want, it->second);
    }
  }
  return c;
}

// The tolerance model of fast mode.
//   AdamW: the summation order changes each averaged gradient by a few ULPs; AdamW's update is a
//          smooth function of the gradient away from v = 0, so weights drift by few-ULP amounts
//          (observed max 2e-6 after 10 steps at W = 3..5): bound 1e-4 on any weight, 1e-5
//          relative on the loss.
//   Muon:  bf16 Newton–Schulz turns few-ULP gradient differences into flipped bf16 roundings of
//          the orthogonalised update; each flip moves a weight by about lr * 2^-8 * O(1)
//          (observed max 0.014 after 10 steps at lr 0.02): bound 0.05 on any weight and 2e-3
//          relative on the loss (observed 9e-5).
//   Shampoo: float32 factor statistics and float64 roots of them every 10 steps; a few-ULP
//          gradient difference moves the factors by as much, and Adam grafting renormalises the
//          preconditioned direction per block, so weights drift like AdamW's (observed max 5.3e-7,
//          loss 2.1e-7 at W = 3 and 5): bound 1e-5 on any weight and 5e-6 relative on the loss.
//   SOAP:  not smooth in the gradient. With few steps of a small batch the factors G Gᵀ are rank
//          deficient, so the eigenbasis of their null space is whatever the rounding makes it, and
//          Adam's normalisation in that basis turns rounding-sized m and v into O(1) steps: an
//          update can differ in a weight by up to about one whole step, lr per step (observed max
//          0.021 on a weight and 1.7e-2 on the loss after 10 steps at lr 3e-3): bound 2·lr·steps
//          = 0.06 on any weight and 5e-2 relative on the loss.
FastTolerance fast_tolerance(OptimizerKind matrix_optimizer, c10::ScalarType reduce_dtype) {
  if (reduce_dtype == c10::kBFloat16) return {5e-2, matrix_optimizer == OptimizerKind::soap ? 5e-2 : 2e-3};
  switch (matrix_optimizer) {
    case OptimizerKind::adamw: return {1e-4, 1e-5};
    case OptimizerKind::muon:
    case OptimizerKind::normuon:
    case OptimizerKind::adamuon: return {5e-2, 2e-3};
    case OptimizerKind::shampoo: return {1e-5, 5e-6};
    case OptimizerKind::soap: return {6e-2, 5e-2};
  }
  return {0, 0};
}

FastDeviation fast_deviation(const Trajectory& control, const Trajectory& experiment, int max_steps) {
  FastDeviation d;
  const size_t steps = std::min({control.params.size(), experiment.params.size(), static_cast<size_t>(std::max(max_steps, 0))});
  for (size_t s = 0; s < steps; ++s) {
    d.max_loss_rel = std::max(d.max_loss_rel, std::fabs(experiment.local_losses[s] - control.local_losses[s]) /
                                                  std::fabs(control.local_losses[s]));
    for (const auto& [name, want] : control.params[s])
      d.max_param_abs = std::max(d.max_param_abs, (experiment.params[s].at(name) - want).abs().max().item<double>());
  }
  return d;
}

}  // namespace mfsdp
