// `mfsdp plan`: owner placement, per-rank memory and work, and the four-placement comparison for a
// preset or a JSON spec, without allocating a single weight.
#include "cli/commands.h"
#include "cli/model_options.h"
#include "core/util/errors.h"
#include "core/plan/memory_model.h"
#include "core/plan/planner.h"
#include "core/plan/presets.h"
#include "core/plan/recommend.h"
#include "core/util/files.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace mfsdp::cli {
namespace {

// Specs and assignment files are JSON of a few MB at most; a larger file is not one.
constexpr int64_t kMaxSpecBytes = int64_t{64} << 20;

struct PlanArgs {
  std::string model;
  int world_size = 0;
  std::string planner = "balanced";
  std::string tail_policy = "even";
  std::string optimizer = "muon";
  // The precision policy, spelled as in `mfsdp train`. No --param-dtype: every copy in the
  // spec's own dtype (bf16 for the large presets), nothing cast; with it, fp32 masters, gradients
  // and state, and compute copies in the param dtype.
  std::string param_dtype, reduce_dtype, output_dtype;
  bool tie_embeddings = false;
  MoeArgs moe;
  int replicas = 1;  // HSDP: -w counts all R x S ranks; the plan is made for S
  StepMode step_mode = StepMode::replicated;
  std::string assign_file;
  std::vector<std::string> place;
  int prefetch = 1;
  bool json = false;
  bool recommend = false;
  double bound = 1.10;
  int max_world_size = 4096;
};

std::string read_input(const std::string& path) {
  try {
    return read_file(path, "plan", kMaxSpecBytes);
  } catch (const c10::Error& e) {
    throw UsageError(std::string(e.what_without_backtrace()) + " (not a preset name and not a readable file)");
  }
}

ModelSpec load_model(const PlanArgs& a) {
  const bool policy = !a.param_dtype.empty();  // masters are fp32 under a policy
  if (is_preset(a.model)) {
    TransformerConfig c = preset_config(a.model);
    c.dtype = policy ? c10::kFloat : c.dtype;
    c.tie_embeddings = a.tie_embeddings;
    PlannerOptions unused;
    apply_moe(a.moe, c, unused);
    return transformer_spec(c);
  }
  if (a.tie_embeddings)
    throw UsageError("plan: --tie-embeddings applies to presets; a JSON spec ties a parameter with \"also_used_by\"");
  if (a.moe.any())
    throw UsageError("plan: --experts applies to presets; a JSON spec lists expert tensors with kind \"expert_matrix\"");
  if (a.model.find('/') == std::string::npos && a.model.find(".json") == std::string::npos) {
    preset_config(a.model);  // throws: unknown preset, listing the known ones
  }
  ModelSpec spec = model_spec_from_json(read_input(a.model), a.model);
  if (policy) {
    for (auto& p : spec.params) p.dtype = c10::kFloat;
  }
  return spec;
}

// The policy over the spec's masters: none given means compute in the masters' own dtype.
PrecisionPolicy plan_precision(const PlanArgs& a, const ModelSpec& spec) {
  if (!a.param_dtype.empty())
    return precision_from_flags(a.param_dtype, a.reduce_dtype.empty() ? "fp32" : a.reduce_dtype, a.output_dtype);
  TORCH_CHECK(a.reduce_dtype.empty() && a.output_dtype.empty(), "plan: --",
              a.reduce_dtype.empty() ? "output" : "reduce", "-dtype needs --param-dtype (a policy over fp32 masters)");
  PrecisionPolicy p;
  p.param_dtype = p.reduce_dtype = spec.params.empty() ? c10::kFloat : spec.params.front().dtype;
  return p;
}

PlannerOptions planner_options(const PlanArgs& a) {
  PlannerOptions o;
  o.expert_ranges = a.moe.expert_ranges;
  o.planner = planner_kind_from_string(a.planner);
  o.tail_policy = tail_policy_from_string(a.tail_policy);
  o.optimizer = optimizer_kind_from_string(a.optimizer);
  for (const std::string& rule : a.place) {
    auto eq = rule.rfind('=');
    TORCH_CHECK(eq != std::string::npos && eq > 0, "plan: --place '", rule, "' is not PATTERN=ROLE");
    const std::string role = rule.substr(eq + 1);
    TORCH_CHECK(role == to_string(Role::owned_matrix) || role == to_string(Role::even_shard), "plan: --place role '", role,
                "' (expected owned_matrix or even_shard)");
    const Role r = role_from_string(role);
    o.rules.push_back({rule.substr(0, eq), r});
  }
  if (o.planner == PlannerKind::explicit_assignment) {
    TORCH_CHECK(!a.assign_file.empty(), "plan: --planner explicit needs --assign FILE.json ({\"name\": rank, ...})");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_input(a.assign_file));
    } catch (const nlohmann::json::parse_error& e) {
      TORCH_CHECK(false, "plan: --assign ", a.assign_file, ": malformed JSON: ", e.what());
    }
    TORCH_CHECK(j.is_object(), "plan: --assign ", a.assign_file, ": expected an object {\"name\": rank}");
    for (auto& [name, rank] : j.items()) {
      TORCH_CHECK(rank.is_number_integer(), "plan: --assign ", a.assign_file, ": '", name, "' maps to ", rank.dump(),
                  ", not a rank");
      // Checked as the 64-bit value JSON holds: 4294967297 is not rank 1.
      const bool fits = rank.is_number_unsigned() ? rank.get<uint64_t>() < static_cast<uint64_t>(a.world_size)
                                                  : rank.get<int64_t>() >= 0 && rank.get<int64_t>() < a.world_size;
      TORCH_CHECK(fits, "plan: --assign ", a.assign_file, ": '", name, "' maps to rank ", rank.dump(), ", outside [0, ",
                  a.world_size, ") for -w ", a.world_size);
      o.explicit_owners[name] = static_cast<int>(rank.get<int64_t>());
    }
  } else {
    TORCH_CHECK(a.assign_file.empty(), "plan: --assign is used only with --planner explicit (the planner is ", a.planner, ")");
  }
  return o;
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

int run_plan(const PlanArgs& a) {
  ModelSpec spec;
  PlannerOptions options;
  std::optional<OwnershipPlan> plan;
  MemoryModelOptions mem;
  double plan_seconds = 0;
  try {
    if (a.world_size <= 0) throw UsageError("plan: --world-size must be a positive integer, got " + std::to_string(a.world_size));
    spec = load_model(a);
    options = planner_options(a);
    mem.precision = plan_precision(a, spec);
    TORCH_CHECK(a.replicas >= 1 && a.world_size % a.replicas == 0, "plan: --replicas ", a.replicas,
                " must be a positive divisor of the world size ", a.world_size, " (W = R x S)");
    mem.replicas = a.replicas;
    mem.step_mode = a.step_mode;
    mem.optimizer = options.optimizer;
    mem.cost = options.cost;
    mem.prefetch = a.prefetch;
    auto t0 = std::chrono::steady_clock::now();
    plan.emplace(make_plan(spec, a.world_size / a.replicas, options));
    plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const c10::Error& e) {
    throw UsageError(e.what_without_backtrace());
  }
  const PlanUsage usage = plan_usage(*plan, mem);
  int owned = 0, expert_tensors = 0, expert_ranges = 0;
  int64_t experts = 0;
  for (const auto& s : plan->shards()) {
    owned += s.role == Role::owned_matrix;
    if (s.role != Role::expert_range) continue;
    ++expert_tensors, experts += s.shape[0];
    expert_ranges += static_cast<int>(s.slices.size());
  }

  nlohmann::ordered_json recommend;
  if (a.recommend) {
    MemoryModelOptions flat = mem;  // the sweep is over shard-group sizes
    flat.replicas = 1;
    recommend = to_json(recommend_world_size(spec, options, flat, a.bound, a.max_world_size));
    const int R = recommend_replicas(a.world_size, recommend["largest_world_size"].get<int>());
    recommend["hsdp_for_world_size"] = {{"world_size", a.world_size}, {"replicas", R}, {"shard_group", R ? a.world_size / R : 0}};
  }

  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = spec.name;
    j["world_size"] = a.world_size;
    j["planner"] = to_string(options.planner);
    j["tail_policy"] = to_string(options.tail_policy);
    j["optimizer"] = to_string(options.optimizer);
    j["replicas"] = a.replicas;
    j["shard_group"] = a.world_size / a.replicas;
    j["step_mode"] = to_string(a.step_mode);
    {
      nlohmann::ordered_json p{{"master_dtype", short_dtype_name(spec.params.empty() ? c10::kFloat : spec.params.front().dtype)},
                               {"param_dtype", short_dtype_name(mem.precision.param_dtype)},
                               {"reduce_dtype", short_dtype_name(mem.precision.reduce_dtype)}};
      if (mem.precision.output_dtype) p["output_dtype"] = short_dtype_name(*mem.precision.output_dtype);
      j["precision"] = p;
    }
    j["plan_hash"] = plan->hash_hex();
    j["params"] = spec.numel();
    j["owned_matrices"] = owned;
    if (expert_tensors > 0) {
      nlohmann::ordered_json ranges = nlohmann::ordered_json::object();
      for (const auto& s : plan->shards()) {
        if (s.role != Role::expert_range) continue;
        for (const ShardSlice& sl : s.slices)
          ranges[s.name].push_back({{"rank", sl.rank}, {"first_expert", sl.row_begin}, {"experts", sl.rows}});
      }
      j["expert_ranges"] = ranges;
    }
    j["units"] = plan->units().size();
    j["plan_seconds"] = plan_seconds;
    j["usage"] = to_json(usage);
    if (a.recommend) j["recommend"] = recommend;
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }

  std::printf("plan: model %s, %lld parameters (%.3f B), %d owned matrices in %zu units\n", spec.name.c_str(),
              static_cast<long long>(spec.numel()), spec.numel() / 1e9, owned, plan->units().size());
  std::printf("      W=%d, planner %s, tail policy %s, optimizer %s, prefetch %d, hash %s (planned in %.3f s)\n",
              a.world_size, to_string(options.planner), to_string(options.tail_policy), to_string(options.optimizer),
              a.prefetch, plan->hash_hex().c_str(), plan_seconds);
  if (a.replicas > 1)
    std::printf("      HSDP: %d replica groups x %d ranks (the plan is for %d), step mode %s%s\n", a.replicas,
                a.world_size / a.replicas, a.world_size / a.replicas, to_string(a.step_mode),
                a.step_mode == StepMode::dedup ? ": each shard stepped by one replica, state there only" : ": every replica steps");
  if (expert_tensors > 0) {
    std::printf("      experts: %d expert tensors (%lld expert matrices) cut into %d expert ranges, each whole on one rank\n",
                expert_tensors, static_cast<long long>(experts), expert_ranges);
    int listed = 0;
    for (const auto& s : plan->shards()) {
      if (s.role != Role::expert_range || listed++ >= 3) continue;  // the first few; --json lists all
      std::string where;
      for (size_t k = 0; k < s.slices.size() && k < 4; ++k) {
        const ShardSlice& sl = s.slices[k];
        where += " [" + std::to_string(sl.row_begin) + "," + std::to_string(sl.row_begin + sl.rows) + ")@r" + std::to_string(sl.rank);
      }
      if (s.slices.size() > 4) where += " ... (" + std::to_string(s.slices.size()) + " ranges)";
      std::printf("        %s:%s\n", s.name.c_str(), where.c_str());
    }
    if (listed > 3) std::printf("        ... %d more (--json lists every range)\n", listed - 3);
  }
  for (const UnitLayout& u : plan->units())
    for (int b : u.borrowed)
      std::printf("      tied: '%s' (unit %s) is also used by unit %s: its unit stays gathered until its backward\n",
                  plan->shards()[b].name.c_str(), plan->units()[plan->shards()[b].unit].name.c_str(), u.name.c_str());
  std::printf("      precision: %s masters, gradients and state; %s compute copies (unshard, gathered, forward/backward)\n\n",
              short_dtype_name(spec.params.empty() ? c10::kFloat : spec.params.front().dtype),
              short_dtype_name(mem.precision.param_dtype));
  double largest = 0;
  for (const RankUsage& r : usage.ranks) largest = std::max({largest, double(r.peak_bytes), double(r.resident_bytes)});
  for (const auto& p : usage.placements) largest = std::max(largest, double(p.max_peak_bytes));
  const ByteUnit u = unit_for(largest);
  const double flop_max = [&] {
    double m = 0;
    for (const RankUsage& r : usage.ranks) m = std::max(m, 2 * r.optimizer_cost);
    return m;
  }();
  const bool mflop = flop_max < 1e9;
  auto head = [&](const char* what) { return std::string(what) + " " + u.name; };
  std::printf("%5s %8s %5s %10s %10s %10s %12s %14s %13s %10s\n", "rank", "matrices", "tails", head("params").c_str(),
              head("grads").c_str(), head("state").c_str(), head("resident").c_str(),
              mflop ? "opt MFLOP/step" : "opt GFLOP/step", head("unshard").c_str(), head("peak").c_str());
  for (const RankUsage& r : usage.ranks) {
    std::printf("%5d %8d %5d %10s %10s %10s %12s %14.1f %13s %10s\n", r.rank, r.owned_matrices, r.owned_tails,
                in_unit(r.param_bytes, u).c_str(), in_unit(r.grad_bytes, u).c_str(), in_unit(r.state_bytes, u).c_str(),
                in_unit(r.resident_bytes, u).c_str(), 2 * r.optimizer_cost / (mflop ? 1e6 : 1e9),
                in_unit(r.unshard_recv_bytes, u).c_str(), in_unit(r.peak_bytes, u).c_str());
  }
  std::printf("\nimbalance (max/mean): resident bytes %.4f, optimizer cost %.4f\n\n", usage.bytes_imbalance,
              usage.cost_imbalance);
  std::printf("memory per rank by placement (%s)      max resident   mean resident   max peak\n", u.name);
  const char* what[] = {"owner  (this plan: owned matrices whole)", "zero3  (FSDP2 even shards, reconstruct) ",
                        "zero1  (full params, state on owners)  ", "ddp    (everything everywhere)         "};
  for (size_t i = 0; i < usage.placements.size(); ++i) {
    const auto& p = usage.placements[i];
    std::printf("  %s %12s %15s %10s\n", what[i], in_unit(p.max_resident_bytes, u).c_str(),
                in_unit(p.mean_resident_bytes, u).c_str(), in_unit(p.max_peak_bytes, u).c_str());
  }
  if (a.recommend) {
    std::printf("\nrecommendation (balanced planner, bound %.2f on both imbalances):\n", a.bound);
    std::printf("%8s %10s %10s\n", "W", "bytes", "cost");
    for (const auto& row : recommend["sweep"]) {
      std::printf("%8d %10.4f %10.4f %s\n", row["world_size"].get<int>(), row["bytes_imbalance"].get<double>(),
                  row["cost_imbalance"].get<double>(), row["within_bound"].get<bool>() ? "" : "  over bound");
    }
    std::printf("largest shard group within bound (every smaller swept W too): W = %d.\n"
                "Past it there are too few matrices per rank for whole-matrix owners to balance: combine owner\n"
                "sharding inside groups of that size with replication (HSDP) across groups.\n",
                recommend["largest_world_size"].get<int>());
    const int R = recommend["hsdp_for_world_size"]["replicas"].get<int>();
    if (R > 0)
      std::printf("for -w %d: --replicas %d (%d replica group(s) x %d ranks)\n", a.world_size, R, R, a.world_size / R);
    else
      std::printf("for -w %d: no shard group size is within the bound\n", a.world_size);
  }
  return kExitOk;
}

}  // namespace

void add_plan_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("plan", "Plan owner placement for a model preset or JSON spec (shapes only)");
  auto a = std::make_shared<PlanArgs>();
  std::string presets;
  for (const auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  cmd->add_option("--model", a->model, "Preset (" + presets + "; 8b, 32b, 70b) or spec.json")->required();
  cmd->add_option("-w,--world-size", a->world_size, "Ranks in the shard group")->required();
  cmd->add_option("--planner", a->planner, "round_robin | greedy_bytes | greedy_cost | balanced | explicit");
  cmd->add_option("--tail-policy", a->tail_policy, "even | owner");
  cmd->add_option("--optimizer", a->optimizer, "muon | shampoo | soap | adamw (matrix optimizer)");
  cmd->add_flag("--tie-embeddings", a->tie_embeddings, "A preset with its output head tied to the token embedding");
  add_moe_options(cmd, a->moe, /*optimizer_flags=*/false);
  cmd->add_option("--replicas", a->replicas, "HSDP: R replica groups; -w counts all ranks, the plan is for W/R")
      ->check(CLI::Range(1, 4096));
  add_enum_option(cmd, "--step-mode", a->step_mode, kStepModeNames, "HSDP: replicated | dedup, as train");
  cmd->add_option("--param-dtype", a->param_dtype,
                  "fp32 | bf16: compute copies over fp32 masters, as train (default: the spec's dtype throughout, nothing cast)");
  cmd->add_option("--reduce-dtype", a->reduce_dtype, "fp32 | bf16: gradients on the wire, as train (default fp32; needs --param-dtype)");
  cmd->add_option("--output-dtype", a->output_dtype, "fp32 | bf16: unit outputs, as train (needs --param-dtype)");
  cmd->add_option("--assign", a->assign_file, "With --planner explicit: JSON {\"param\": rank, \"<unit>/tail\": rank}");
  cmd->add_option("--place", a->place, "PATTERN=owned_matrix|even_shard: override the default placement (glob)");
  cmd->add_option("--prefetch", a->prefetch, "Units gathered at once, for the transient memory")->check(CLI::Range(1, 16));
  cmd->add_flag("--json", a->json, "Print one JSON object (fields in README)");
  cmd->add_flag("--recommend", a->recommend, "Sweep W and report the largest shard group that still balances");
  cmd->add_option("--bound", a->bound, "Imbalance bound for --recommend")->check(CLI::Range(1.0, 100.0));
  cmd->callback([&run, a] { run = [a] { return run_plan(*a); }; });
}

}  // namespace mfsdp::cli
