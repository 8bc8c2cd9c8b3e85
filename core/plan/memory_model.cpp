#include "core/plan/memory_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace mfsdp {
namespace {

int64_t elem(c10::ScalarType dtype) { return static_cast<int64_t>(c10::elementSize(dtype)); }

template <typename T, typename F>
std::pair<double, double> max_mean(const std::vector<T>& xs, F f) {
  double mx = 0, sum = 0;
  for (const auto& x : xs) {
    mx = std::max(mx, static_cast<double>(f(x)));
    sum += static_cast<double>(f(x));
  }
  return {mx, xs.empty() ? 0 : sum / xs.size()};
}

}  // namespace

PlanUsage plan_usage(const OwnershipPlan& plan, const MemoryModelOptions& o) {
  const int W = plan.world_size();  // S under HSDP
  const int R = std::max(o.replicas, 1);
  PlanUsage usage;
  usage.ranks.resize(static_cast<size_t>(R) * W);
  for (int g = 0; g < R * W; ++g) usage.ranks[g].rank = g;
  std::vector<int> stepper;  // dedup: the replica stepping each shard
  if (R > 1 && o.step_mode == StepMode::dedup) stepper = dedup_step_replicas(plan, R, o.optimizer, o.cost);
  // Each replica r whose ranks step shard i get its state and work (every replica unless dedup).
  auto steppers = [&](size_t i) {
    std::vector<int> rs;
    for (int r = 0; r < R; ++r)
      if (stepper.empty() || stepper[i] == r) rs.push_back(r);
    return rs;
  };

  // Baseline accumulators (per rank identical for zero3/zero1 params; state as described).
  int64_t zero3_params = 0, zero3_state = 0, full_params = 0, full_state = 0, largest_matrix = 0,
          largest_unit = 0;
  for (size_t i = 0; i < plan.shards().size(); ++i) {
    const MatrixShard& s = plan.shards()[i];
    const int64_t e = elem(s.dtype);
    const bool matrix = s.role == Role::owned_matrix;
    // Experts (any role): each rank steps the whole experts it stores, one matrix per expert.
    const bool experts = s.kind == ParamKind::expert_matrix && o.optimizer != OptimizerKind::adamw;
    const OptimizerKind opt = matrix || experts ? o.optimizer : OptimizerKind::adamw;
    const std::vector<int64_t> slice(s.shape.begin() + (experts ? 1 : 0), s.shape.end());
    const int64_t per_expert_state = experts ? optimizer_state_elements(opt, slice, o.cost) * e : 0;
    const double per_expert_cost = experts ? optimizer_step_cost(opt, slice[0], slice[1], o.cost) : 0;
    const int64_t state = experts ? per_expert_state * s.shape[0] : optimizer_state_elements(opt, s.shape, o.cost) * e;
    const double cost = matrix ? optimizer_step_cost(opt, s.shape[0], s.shape[1], o.cost)
                               : optimizer_step_cost(OptimizerKind::adamw, s.numel(), 1, o.cost);
    full_params += s.numel() * e;
    full_state += state;
    zero3_params += even_chunk_rows(s.shape[0], W) * s.row_numel() * e;
    zero3_state += (state + W - 1) / W;
    if (matrix) largest_matrix = std::max(largest_matrix, s.numel() * e);
    if (experts) largest_matrix = std::max(largest_matrix, s.row_numel() * e);
    for (int r = 0; r < R; ++r) {
      if (s.owned()) (matrix ? usage.ranks[r * W + s.owner].owned_matrices : usage.ranks[r * W + s.owner].owned_tails) += 1;
      if (experts)
        for (const ShardSlice& sl : s.slices) usage.ranks[r * W + sl.rank].owned_matrices += static_cast<int>(sl.rows);
    }
    for (int r : steppers(i)) {
      if (s.owned()) {
        RankUsage& ru = usage.ranks[r * W + s.owner];
        ru.state_bytes += state;
        ru.optimizer_cost += cost;
      } else {
        for (const ShardSlice& sl : s.slices) {
          RankUsage& ru = usage.ranks[r * W + sl.rank];
          ru.state_bytes += experts ? sl.rows * per_expert_state : 2 * sl.rows * s.row_numel() * e;
          ru.optimizer_cost += experts ? static_cast<double>(sl.rows) * per_expert_cost : static_cast<double>(sl.rows * s.row_numel());
        }
      }
    }
  }
  usage.total_param_bytes = full_params;
  const int64_t ce = elem(o.precision.param_dtype);  // the compute copy's element size
  int64_t full_compute = 0;
  // A unit lending tied parameters stays gathered from its forward to its backward, under every
  // other unit's gathered buffers: per rank, its bytes add to the largest of the others'.
  std::vector<bool> lends(plan.units().size(), false);
  for (const UnitLayout& u : plan.units())
    for (int b : u.borrowed) lends[plan.shards()[b].unit] = true;
  std::vector<int64_t> kept(static_cast<size_t>(R) * W, 0), others(static_cast<size_t>(R) * W, 0);
  for (size_t ui = 0; ui < plan.units().size(); ++ui) {
    const UnitLayout& u = plan.units()[ui];
    const int64_t e = elem(u.dtype);
    const bool casts = o.precision.casts(u.dtype);
    full_compute += casts ? u.numel * ce : 0;
    largest_unit = std::max(largest_unit, u.numel * ce);
    // The gathered buffer also holds a full copy of each even-sharded parameter (copy-out).
    int64_t even_full = 0;
    for (int si : u.shards) {
      const MatrixShard& s = plan.shards()[si];
      if (!s.owned()) even_full += (s.numel() + align_elements(u.dtype) - 1) / align_elements(u.dtype) * align_elements(u.dtype);
    }
    for (int g = 0; g < R * W; ++g) {
      RankUsage& ru = usage.ranks[g];
      const int64_t mine = u.segments[g % W].numel;
      ru.param_bytes += mine * e;
      ru.grad_bytes += mine * e;
      ru.unshard_recv_bytes += (u.numel - mine) * ce;
      const int64_t gathered = (casts ? u.numel : u.numel - mine) + even_full;
      if (o.whole_model_gathered) kept[g] += (gathered + u.numel) * ce;  // its gathered buffer and held gradients
      else if (lends[ui]) kept[g] += gathered * ce;
      else others[g] = std::max(others[g], o.prefetch * gathered * ce);
    }
  }
  for (int g = 0; g < R * W; ++g) usage.ranks[g].transient_bytes = kept[g] + others[g];
  int64_t full_numel = 0;
  for (const MatrixShard& s : plan.shards()) full_numel += s.numel();
  for (RankUsage& ru : usage.ranks) {
    ru.resident_bytes = ru.param_bytes + ru.grad_bytes + ru.state_bytes;
    if (o.grad_accum > 1) {
      const int64_t e = static_cast<int64_t>(sizeof(float));  // the accumulation dtype
      const int64_t m = plan.units().empty() ? 4 : static_cast<int64_t>(c10::elementSize(plan.units()[0].dtype));
      ru.accum_bytes = o.deferred ? full_numel * e : ru.grad_bytes / m * e;
    }
    ru.peak_bytes = ru.resident_bytes + ru.transient_bytes + ru.accum_bytes;
  }
  auto [max_res, mean_res] = max_mean(usage.ranks, [](const RankUsage& r) { return r.resident_bytes; });
  auto [max_cost, mean_cost] = max_mean(usage.ranks, [](const RankUsage& r) { return r.optimizer_cost; });
  auto [max_peak, _] = max_mean(usage.ranks, [](const RankUsage& r) { return r.peak_bytes; });
  usage.bytes_imbalance = mean_res > 0 ? max_res / mean_res : 1.0;
  usage.cost_imbalance = mean_cost > 0 ? max_cost / mean_cost : 1.0;
  usage.placements.push_back({"owner", static_cast<int64_t>(max_res), static_cast<int64_t>(mean_res),
                              static_cast<int64_t>(max_peak)});

  // Accumulation sums of the other placements, as the owner's: per micro-batch the sums of what a
  // rank's reduction delivers (its even shards; ZeRO-1 its owned parameters, about 1/W; DDP
  // everything), deferred every rank's own full gradients; float32.
  const int64_t full_fp32 = full_numel * static_cast<int64_t>(sizeof(float));
  const int64_t master = plan.units().empty() ? 4 : static_cast<int64_t>(c10::elementSize(plan.units()[0].dtype));
  auto accum = [&](int64_t per_microbatch_bytes) { return o.grad_accum <= 1 ? 0 : o.deferred ? full_fp32 : per_microbatch_bytes; };
  const int64_t zero3_resident = 2 * zero3_params + zero3_state;
  const int64_t reconstruct = o.optimizer == OptimizerKind::adamw ? 0 : 2 * largest_matrix;
  const bool casts = !plan.units().empty() && o.precision.casts(plan.units()[0].dtype);
  const int64_t zero3_gathered = casts ? largest_unit : largest_unit - largest_unit / W;
  const int64_t zero3_transient = std::max(o.prefetch * zero3_gathered, reconstruct);
  usage.placements.push_back({"zero3", zero3_resident, zero3_resident,
                              zero3_resident + zero3_transient + accum(zero3_params / master * 4)});

  auto [max_state, mean_state] = max_mean(usage.ranks, [](const RankUsage& r) { return r.state_bytes; });
  const int64_t zero1_max = 2 * full_params + static_cast<int64_t>(max_state);
  usage.placements.push_back({"zero1", zero1_max, 2 * full_params + static_cast<int64_t>(mean_state),
                              zero1_max + full_compute + accum(full_fp32 / (R * W))});

  const int64_t ddp = 2 * full_params + full_state;
  usage.placements.push_back({"ddp", ddp, ddp, ddp + full_compute + accum(full_fp32)});
  return usage;
}

nlohmann::json to_json(const PlanUsage& usage) {
  nlohmann::ordered_json j;
  j["bytes_imbalance"] = usage.bytes_imbalance;
  j["cost_imbalance"] = usage.cost_imbalance;
  j["total_param_bytes"] = usage.total_param_bytes;
  auto ranks = nlohmann::ordered_json::array();
  for (const RankUsage& r : usage.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"owned_matrices", r.owned_matrices},
                     {"owned_tails", r.owned_tails},
                     {"param_bytes", r.param_bytes},
                     {"grad_bytes", r.grad_bytes},
                     {"state_bytes", r.state_bytes},
                     {"resident_bytes", r.resident_bytes},
                     {"optimizer_cost", r.optimizer_cost},
                     {"unshard_recv_bytes", r.unshard_recv_bytes},
                     {"transient_bytes", r.transient_bytes},
                     {"peak_bytes", r.peak_bytes}});
    if (r.accum_bytes > 0) ranks.back()["accum_bytes"] = r.accum_bytes;
  }
  j["ranks"] = ranks;
  auto placements = nlohmann::ordered_json::array();
  for (const PlacementMemory& p : usage.placements) {
    placements.push_back({{"placement", p.placement},
                          {"max_resident_bytes", p.max_resident_bytes},
                          {"mean_resident_bytes", p.mean_resident_bytes},
                          {"max_peak_bytes", p.max_peak_bytes}});
  }
  j["placements"] = placements;
  return j;
}

}  // namespace mfsdp
