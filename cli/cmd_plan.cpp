// `mfsdp plan`: owner placement, per-rank memory and work, and the four-placement comparison for a
// preset or a JSON spec, without allocating a single weight.
#include "cli/commands.h"
#include "cli/run_options.h"
#include "core/dist/mesh.h"
#include "core/plan/plan_report.h"
#include "core/util/errors.h"
#include "core/plan/memory_model.h"
#include "core/plan/planner.h"
#include "core/plan/presets.h"
#include "core/plan/recommend.h"
#include "core/util/files.h"
#include "core/util/json_limits.h"

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
  // The precision policy as in `mfsdp train`. No --param-dtype: every copy in the spec's own dtype
  // (bf16 for the large presets), nothing cast; with it, fp32 masters, gradients and state, and
  // compute copies in the param dtype. HSDP: -w counts all R x S ranks; the plan is made for S.
  RunOptions run;
  std::string assign_file;
  std::vector<std::string> place;
  bool json = false;
  bool recommend = false;
  double bound = 1.10;
  int max_world_size = 4096;
  int grad_accum = 1;  // the memory the accumulation sums hold between micro-batches
  GradReduce grad_reduce = GradReduce::per_microbatch;
};

std::string read_input(const std::string& path) {
  try {
    return read_file(path, "plan", kMaxSpecBytes);
  } catch (const c10::Error& e) {
    throw UsageError(std::string(e.what_without_backtrace()) + " (not a preset name and not a readable file)");
  }
}

ModelSpec load_model(const PlanArgs& a) {
  const bool policy = !a.run.param_dtype.empty();  // masters are fp32 under a policy
  if (is_preset(a.model)) {
    TransformerConfig c = preset_config(a.model);
    c.dtype = policy ? c10::kFloat : c.dtype;
    apply_model_options(a.run, c);
    return transformer_spec(c);
  }
  if (a.run.tie_embeddings)
    throw UsageError("plan: --tie-embeddings applies to presets; a JSON spec ties a parameter with \"also_used_by\"");
  if (a.run.moe.any())
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

PlannerOptions plan_options(const PlanArgs& a) {
  PlannerOptions o = planner_options(a.run);
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
      j = parse_json(read_input(a.assign_file), "plan: --assign " + a.assign_file);
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
    TORCH_CHECK(a.assign_file.empty(), "plan: --assign is used only with --planner explicit (the planner is ", a.run.planner, ")");
  }
  return o;
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
    options = plan_options(a);
    mem.precision = precision_policy(a.run, spec.params.empty() ? c10::kFloat : spec.params.front().dtype);
    mesh_shape(a.world_size, a.run.replicas);  // throws unless R divides W
    mem.replicas = a.run.replicas;
    mem.step_mode = a.run.step_mode;
    mem.optimizer = options.optimizer;
    mem.cost = options.cost;
    mem.prefetch = a.run.units_gathered();
    mem.grad_accum = a.grad_accum;
    mem.deferred = a.grad_reduce == GradReduce::deferred;
    auto t0 = std::chrono::steady_clock::now();
    plan.emplace(make_plan(spec, a.world_size / a.run.replicas, options));
    plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const c10::Error& e) {
    throw usage_error("plan", e.what_without_backtrace());
  }
  const PlanUsage usage = plan_usage(*plan, mem);
  PlanReport report{spec, *plan, options, mem, usage, a.world_size, plan_seconds, std::nullopt, a.bound};
  if (a.recommend) {
    MemoryModelOptions flat = mem;  // the sweep is over shard-group sizes
    flat.replicas = 1;
    nlohmann::ordered_json rec = to_json(recommend_world_size(spec, options, flat, a.bound, a.max_world_size));
    const int R = recommend_replicas(a.world_size, rec["largest_world_size"].get<int>());
    rec["hsdp_for_world_size"] = {{"world_size", a.world_size}, {"replicas", R}, {"shard_group", R ? a.world_size / R : 0}};
    report.recommend = std::move(rec);
  }
  if (a.json) std::cout << plan_report_json(report).dump(2) << "\n";
  else std::fputs(plan_report_text(report).c_str(), stdout);
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
  add_run_options(cmd, a->run, {.optimizer_flags = false, .fast = false, .unshard = false, .recompute = false, .explicit_planner = true});
  cmd->add_option("--assign", a->assign_file, "With --planner explicit: JSON {\"param\": rank, \"<unit>/tail\": rank}");
  cmd->add_option("--place", a->place, "PATTERN=owned_matrix|even_shard: override the default placement (glob)");
  cmd->add_option("--grad-accum", a->grad_accum, "Micro-batches per step: peak memory adds the accumulation sums")
      ->check(CLI::Range(1, kMaxGradAccum));
  add_enum_option(cmd, "--grad-reduce", a->grad_reduce, kGradReduceNames,
                  "With --grad-accum, whose sums are held (per-microbatch: owners' segment sums; deferred: every rank's "
                  "full gradients in float32)");
  cmd->add_flag("--json", a->json, "Print one JSON object (fields in README)");
  cmd->add_flag("--recommend", a->recommend, "Sweep W and report the largest shard group that still balances");
  cmd->add_option("--bound", a->bound, "Imbalance bound for --recommend")->check(CLI::Range(1.0, 100.0));
  cmd->callback([&run, a] { run = [a] { return run_plan(*a); }; });
}

}  // namespace mfsdp::cli
