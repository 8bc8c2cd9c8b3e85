#include "core/plan/plan_report.h"

#include "core/plan/precision.h"
#include "core/util/units.h"

#include <algorithm>
#include <cstdio>

namespace mfsdp {
namespace {

struct Counts {
  int owned = 0, expert_tensors = 0, expert_ranges = 0;
  int64_t experts = 0;
};

Counts counts_of(const OwnershipPlan& plan) {
  Counts c;
  for (const auto& s : plan.shards()) {
    c.owned += s.role == Role::owned_matrix;
    if (s.role != Role::expert_range) continue;
    ++c.expert_tensors, c.experts += s.shape[0];
    c.expert_ranges += static_cast<int>(s.slices.size());
  }
  return c;
}

// One unit for a whole table, the largest in which its largest value is at least 1 (KiB for the
// tiny model, GiB for the large presets), so no column reads 0.000 everywhere.
struct ByteUnit {
  const char* name;
  double bytes;
};

ByteUnit unit_for(double largest) {
  if (largest >= double(int64_t{1} << 40)) return {"TiB", double(int64_t{1} << 40)};
  if (largest >= double(int64_t{1} << 30)) return {"GiB", double(int64_t{1} << 30)};
  if (largest >= double(int64_t{1} << 20)) return {"MiB", double(int64_t{1} << 20)};
  return {"KiB", 1024.0};
}

std::string in_unit(double bytes, const ByteUnit& u) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", bytes / u.bytes);
  return buf;
}

}  // namespace

nlohmann::ordered_json plan_report_json(const PlanReport& r) {
  const Counts c = counts_of(r.plan);
  nlohmann::ordered_json j;
  j["model"] = r.spec.name;
  j["world_size"] = r.world_size;
  j["planner"] = to_string(r.options.planner);
  j["tail_policy"] = to_string(r.options.tail_policy);
  j["optimizer"] = to_string(r.options.optimizer);
  j["replicas"] = r.memory.replicas;
  j["shard_group"] = r.world_size / r.memory.replicas;
  j["step_mode"] = to_string(r.memory.step_mode);
  {
    nlohmann::ordered_json p{{"master_dtype", short_dtype_name(r.spec.params.empty() ? c10::kFloat : r.spec.params.front().dtype)},
                             {"param_dtype", short_dtype_name(r.memory.precision.param_dtype)},
                             {"reduce_dtype", short_dtype_name(r.memory.precision.reduce_dtype)}};
    if (r.memory.precision.output_dtype) p["output_dtype"] = short_dtype_name(*r.memory.precision.output_dtype);
    j["precision"] = p;
  }
  j["plan_hash"] = r.plan.hash_hex();
  j["params"] = r.spec.numel();
  j["owned_matrices"] = c.owned;
  if (c.expert_tensors > 0) {
    nlohmann::ordered_json ranges = nlohmann::ordered_json::object();
    for (const auto& s : r.plan.shards()) {
      if (s.role != Role::expert_range) continue;
      for (const ShardSlice& sl : s.slices)
        ranges[s.name].push_back({{"rank", sl.rank}, {"first_expert", sl.row_begin}, {"experts", sl.rows}});
    }
    j["expert_ranges"] = ranges;
  }
  j["units"] = r.plan.units().size();
  j["plan_seconds"] = r.plan_seconds;
  j["usage"] = to_json(r.usage);
  if (r.recommend) j["recommend"] = *r.recommend;
  return j;
}

// The optimizer the plan is costed for, with its Newton–Schulz variant and steps when not the default.
static std::string optimizer_text(const PlannerOptions& o) {
  OptimizerOptions shown;
  shown.optimizer = o.optimizer;
  shown.muon.ns_variant = o.cost.ns_variant;
  shown.muon.ns_steps = o.cost.ns_steps;
  return describe_optimizer(shown);
}

std::string plan_report_text(const PlanReport& r) {
  const Counts c = counts_of(r.plan);
  std::string out;

  out += format("plan: model %s, %lld parameters (%.3f B), %d owned matrices in %zu units\n", r.spec.name.c_str(),
              static_cast<long long>(r.spec.numel()), r.spec.numel() / 1e9, c.owned, r.plan.units().size());
  out += format("      W=%d, planner %s, tail policy %s, optimizer %s, prefetch %d, hash %s (planned in %.3f s)\n",
              r.world_size, to_string(r.options.planner), to_string(r.options.tail_policy), optimizer_text(r.options).c_str(),
              r.memory.prefetch, r.plan.hash_hex().c_str(), r.plan_seconds);
  if (r.memory.replicas > 1)
    out += format("      HSDP: %d replica groups x %d ranks (the plan is for %d), step mode %s%s\n", r.memory.replicas,
                r.world_size / r.memory.replicas, r.world_size / r.memory.replicas, to_string(r.memory.step_mode),
                r.memory.step_mode == StepMode::dedup ? ": each shard stepped by one replica, state there only" : ": every replica steps");
  if (c.expert_tensors > 0) {
    out += format("      experts: %d expert tensors (%lld expert matrices) cut into %d expert ranges, each whole on one rank\n",
                c.expert_tensors, static_cast<long long>(c.experts), c.expert_ranges);
    int listed = 0;
    for (const auto& s : r.plan.shards()) {
      if (s.role != Role::expert_range || listed++ >= 3) continue;  // the first few; --json lists all
      std::string where;
      for (size_t k = 0; k < s.slices.size() && k < 4; ++k) {
        const ShardSlice& sl = s.slices[k];
        where += " [" + std::to_string(sl.row_begin) + "," + std::to_string(sl.row_begin + sl.rows) + ")@r" + std::to_string(sl.rank);
      }
      if (s.slices.size() > 4) where += " ... (" + std::to_string(s.slices.size()) + " ranges)";
      out += format("        %s:%s\n", s.name.c_str(), where.c_str());
    }
    if (listed > 3) out += format("        ... %d more (--json lists every range)\n", listed - 3);
  }
  for (const UnitLayout& u : r.plan.units())
    for (int b : u.borrowed)
      out += format("      tied: '%s' (unit %s) is also used by unit %s: its unit stays gathered until its backward\n",
                  r.plan.shards()[b].name.c_str(), r.plan.units()[r.plan.shards()[b].unit].name.c_str(), u.name.c_str());
  out += format("      precision: %s masters, gradients and state; %s compute copies (unshard, gathered, forward/backward)\n\n",
              short_dtype_name(r.spec.params.empty() ? c10::kFloat : r.spec.params.front().dtype),
              short_dtype_name(r.memory.precision.param_dtype));
  double largest = 0;
  for (const RankUsage& k : r.usage.ranks) largest = std::max({largest, double(k.peak_bytes), double(k.resident_bytes)});
  for (const auto& p : r.usage.placements) largest = std::max(largest, double(p.max_peak_bytes));
  const ByteUnit u = unit_for(largest);
  const double flop_max = [&] {
    double m = 0;
    for (const RankUsage& k : r.usage.ranks) m = std::max(m, 2 * k.optimizer_cost);
    return m;
  }();
  const bool mflop = flop_max < 1e9;
  auto head = [&](const char* what) { return std::string(what) + " " + u.name; };
  out += format("%5s %8s %5s %10s %10s %10s %12s %14s %13s %10s\n", "rank", "matrices", "tails", head("params").c_str(),
              head("grads").c_str(), head("state").c_str(), head("resident").c_str(),
              mflop ? "opt MFLOP/step" : "opt GFLOP/step", head("unshard").c_str(), head("peak").c_str());
  for (const RankUsage& k : r.usage.ranks) {
    out += format("%5d %8d %5d %10s %10s %10s %12s %14.1f %13s %10s\n", k.rank, k.owned_matrices, k.owned_tails,
                in_unit(k.param_bytes, u).c_str(), in_unit(k.grad_bytes, u).c_str(), in_unit(k.state_bytes, u).c_str(),
                in_unit(k.resident_bytes, u).c_str(), 2 * k.optimizer_cost / (mflop ? 1e6 : 1e9),
                in_unit(k.unshard_recv_bytes, u).c_str(), in_unit(k.peak_bytes, u).c_str());
  }
  if (r.memory.grad_accum > 1) {
    int64_t most = 0;
    for (const RankUsage& k : r.usage.ranks) most = std::max(most, k.accum_bytes);
    out += format("      gradient accumulation, %d micro-batches, %s: peak includes up to %s %s of float32 sums held "
                  "between micro-batches (%s)\n",
                  r.memory.grad_accum, r.memory.deferred ? "deferred" : "per micro-batch", in_unit(most, u).c_str(), u.name,
                  r.memory.deferred ? "each rank's own gradients of every parameter, in full"
                                    : "each owner's running sum of its gradient segments");
  }
  out += format("\nimbalance (max/mean): resident bytes %.4f, optimizer cost %.4f\n\n", r.usage.bytes_imbalance,
              r.usage.cost_imbalance);
  out += format("memory per rank by placement (%s)      max resident   mean resident   max peak\n", u.name);
  const char* what[] = {"owner  (this plan: owned matrices whole)", "zero3  (FSDP2 even shards, reconstruct) ",
                        "zero1  (full params, state on owners)  ", "ddp    (everything everywhere)         "};
  for (size_t i = 0; i < r.usage.placements.size(); ++i) {
    const auto& p = r.usage.placements[i];
    out += format("  %s %12s %15s %10s\n", what[i], in_unit(p.max_resident_bytes, u).c_str(),
                in_unit(p.mean_resident_bytes, u).c_str(), in_unit(p.max_peak_bytes, u).c_str());
  }
  if (r.recommend) {
    out += format("\nrecommendation (balanced planner, bound %.2f on both imbalances):\n", r.bound);
    out += format("%8s %10s %10s\n", "W", "bytes", "cost");
    for (const auto& row : (*r.recommend)["sweep"]) {
      out += format("%8d %10.4f %10.4f %s\n", row["world_size"].get<int>(), row["bytes_imbalance"].get<double>(),
                  row["cost_imbalance"].get<double>(), row["within_bound"].get<bool>() ? "" : "  over bound");
    }
    out += format("largest shard group within bound (every smaller swept W too): W = %d.\n"
                "Past it there are too few matrices per rank for whole-matrix owners to balance: combine owner\n"
                "sharding inside groups of that size with replication (HSDP) across groups.\n",
                (*r.recommend)["largest_world_size"].get<int>());
    const int R = (*r.recommend)["hsdp_for_world_size"]["replicas"].get<int>();
    if (R > 0)
      out += format("for -w %d: --replicas %d (%d replica group(s) x %d ranks)\n", r.world_size, R, R, r.world_size / R);
    else
      out += format("for -w %d: no shard group size is within the bound\n", r.world_size);
  }
  return out;
}

}  // namespace mfsdp
