#include "cli/run_options.h"

#include "cli/commands.h"
#include "core/dist/launch_env.h"
#include "core/dist/mesh.h"
#include "core/optim/optim.h"
#include "core/plan/presets.h"
#include "core/util/files.h"
#include "core/util/units.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

namespace mfsdp::cli {

void add_run_options(CLI::App* cmd, RunOptions& o, RunOptionSet set) {
  cmd->add_option("--planner", o.planner,
                  set.explicit_planner ? "round_robin | greedy_bytes | greedy_cost | balanced | explicit"
                                       : "round_robin | greedy_bytes | greedy_cost | balanced");
  cmd->add_option("--tail-policy", o.tail_policy, "even | owner");
  cmd->add_option("--optimizer", o.optimizer,
                  "muon | normuon | adamuon | shampoo | soap | adamw (matrix optimizer; the rest uses AdamW)");
  cmd->add_option("--ns-variant", o.ns_variant,
                  "Muon's Newton-Schulz variant, each pinned to its source (docs/optimizers.md): " + ns_variant_names() +
                      " (default torch)");
  cmd->add_option("--ns-steps", o.ns_steps,
                  "Muon's Newton-Schulz iterations (default 5), for a variant without a fixed table")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--replicas", o.replicas, "HSDP: R replica groups of W/R ranks (-w counts all ranks; the plan is made for W/R)")
      ->check(CLI::Range(1, 1 << 16));
  add_enum_option(cmd, "--step-mode", o.step_mode, kStepModeNames,
                  "HSDP: replicated (every replica steps) | dedup (one replica steps each matrix and broadcasts it)");
  cmd->add_option("--param-dtype", o.param_dtype,
                  "fp32 | bf16: the compute copy unshard sends and forward/backward use, over fp32 masters "
                  "(default: the model's own dtype, nothing cast)");
  cmd->add_option("--reduce-dtype", o.reduce_dtype,
                  "fp32 | bf16: gradients on the wire (default fp32; deterministic mode accumulates in fp32 either way)");
  if (set.output_dtype)
    cmd->add_option("--output-dtype", o.output_dtype, "fp32 | bf16: cast each unit's output to it (default: as computed)");
  if (set.fast)
    cmd->add_flag("--fast", o.fast,
                  "Fast mode: native reduce (any summation order) and library thread pools, judged by a tolerance model");
  if (set.prefetch)
    cmd->add_flag("--prefetch", o.prefetch,
                  "Overlap: unshard the next unit (revive the previous one in backward) while this one computes "
                  "(two units gathered at once)");
  if (set.unshard)
    cmd->add_option("--unshard", o.unshard,
                    "broadcast (a unit's segment broadcasts as one group) | allgather_even (the even tail's all-gather "
                    "in the same group) | per_segment (each segment's broadcast a collective of its own)")
        ->check(CLI::IsMember({"broadcast", "allgather_even", "per_segment"}));
  if (set.unshard)
    add_enum_option(cmd, "--comm-groups", o.comm_groups, kCommGroupsNames,
                    "unit (each unit's unshard and reduction one group; default) | model (the whole model's unshard one "
                    "group at the first forward, kept gathered until backward, and every reduction one group when "
                    "backward ends: two collectives a step, DDP's memory; docs/architecture.md)");
  if (set.recompute)
    cmd->add_flag("--activation-checkpointing", o.activation_checkpointing,
                  "Recompute each transformer block in backward on its revived buffer, keeping only block inputs "
                  "(owner, reconstruct, alltoall; no extra unshard; docs/recompute.md)");
  if (!set.model) return;
  cmd->add_flag("--tie-embeddings", o.tie_embeddings,
                "The output head reuses the token embedding (one parameter, both uses' gradients summed)");
  cmd->add_option("--kv-heads", o.kv_heads,
                  "Grouped-query attention: key/value heads, dividing the query heads (default: as many as query heads)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  MoeArgs& a = o.moe;
  CLI::Option* experts = cmd->add_option("--experts", a.experts, "Mixture of experts: routed experts per block, stored 3-D [E, out, in] (0: dense)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  cmd->add_option("--top-k", a.top_k, "Experts each token is routed to (with --experts)")->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->needs(experts);
  cmd->add_option("--shared-experts", a.shared_experts, "Always-on experts of the expert width, one dense SwiGLU (with --experts)")
      ->check(CLI::Range(int64_t{0}, int64_t{64}))
      ->needs(experts);
  cmd->add_option("--moe-intermediate", a.moe_intermediate, "Width of each expert (default: the dense intermediate size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->needs(experts);
  cmd->add_option("--first-dense", a.first_dense, "Blocks before the first MoE block keep a dense MLP (DeepSeek's first_k_dense)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->needs(experts);
  cmd->add_option("--expert-ranges", a.expert_ranges,
                  "Planner: contiguous expert ranges per expert tensor, each owned whole by one rank (0: min(experts, W))")
      ->check(CLI::Range(0, 4096));
  if (set.optimizer_flags)
    cmd->add_flag("--batched-ns", a.batched_ns,
                  "Muon: one batched Newton-Schulz chain per expert tensor (measured against the per-expert mode, not bitwise it)")
        ->needs(experts);
}

void apply_ns_options(const RunOptions& o, OptimizerKind k, MuonOptions& m) { set_newton_schulz(m, k, o.ns_variant, o.ns_steps); }

PlannerOptions planner_options(const RunOptions& o) {
  PlannerOptions p;
  p.planner = planner_kind_from_string(o.planner);
  p.tail_policy = tail_policy_from_string(o.tail_policy);
  p.optimizer = optimizer_kind_from_string(o.optimizer);
  p.expert_ranges = o.moe.expert_ranges;
  OptimizerOptions priced = training_defaults();  // the cost model prices the Newton–Schulz variant run
  apply_ns_options(o, p.optimizer, priced.muon);
  p.cost = OptimizerCostConfig(priced);
  return p;
}

PrecisionPolicy precision_policy(const RunOptions& o, c10::ScalarType model_dtype) {
  if (!o.param_dtype.empty())
    return precision_from_flags(o.param_dtype, o.reduce_dtype.empty() ? "fp32" : o.reduce_dtype, o.output_dtype);
  if (model_dtype == c10::kFloat)  // fp32 masters: the policy flags alone are meaningful
    return precision_from_flags("fp32", o.reduce_dtype.empty() ? "fp32" : o.reduce_dtype, o.output_dtype);
  TORCH_CHECK(o.reduce_dtype.empty() && o.output_dtype.empty(), "--", o.reduce_dtype.empty() ? "output" : "reduce",
              "-dtype needs --param-dtype (a policy over fp32 masters)");
  PrecisionPolicy p;
  p.param_dtype = p.reduce_dtype = model_dtype;
  return p;
}

void apply_model_options(const RunOptions& o, TransformerConfig& model) {
  model.tie_embeddings = o.tie_embeddings;
  if (o.kv_heads > 0) {
    TORCH_CHECK(model.heads % o.kv_heads == 0, "--kv-heads ", o.kv_heads, " must divide the ", model.heads, " query heads");
    model.kv_heads = o.kv_heads;
  }
  const MoeArgs& a = o.moe;
  if (!a.any()) return;
  TORCH_CHECK(a.top_k <= a.experts, "--top-k ", a.top_k, " must be in [1, ", a.experts, "] (the number of experts)");
  model.experts = a.experts;
  model.top_k = a.top_k;
  model.shared_experts = a.shared_experts;
  model.moe_intermediate = a.moe_intermediate > 0 ? a.moe_intermediate : model.intermediate;
  model.first_dense = a.first_dense;
}

void apply_run_options(const RunOptions& o, int world_size, TrainConfig& c) {
  apply_model_options(o, c.model);
  c.planner = planner_options(o);
  TORCH_CHECK(c.planner.planner != PlannerKind::explicit_assignment, "--planner explicit is for mfsdp plan and tests");
  set_optimizer(c, c.planner.optimizer);
  apply_ns_options(o, c.runtime.optimizer, c.runtime.muon);
  TORCH_CHECK(!o.moe.batched_ns || c.runtime.optimizer == OptimizerKind::muon, "--batched-ns batches Muon's Newton-Schulz "
              "over an expert tensor, but the matrix optimizer is ", to_string(c.runtime.optimizer), " (it steps each expert as its own matrix)");
  c.runtime.muon.batched_ns = o.moe.batched_ns;
  c.runtime.precision = precision_policy(o, c.model.dtype);
  mesh_shape(world_size, o.replicas);  // throws unless R divides W
  c.runtime.replicas = o.replicas;
  c.runtime.step_mode = o.step_mode;
  c.runtime.reduce = o.fast ? ReduceMode::fast : ReduceMode::deterministic;
  c.runtime.prefetch = o.prefetch;
  c.runtime.unshard = o.unshard == "allgather_even" ? UnshardStrategy::allgather_even
                      : o.unshard == "per_segment"  ? UnshardStrategy::per_segment
                                                    : UnshardStrategy::broadcast;
  c.runtime.activation_checkpointing = o.activation_checkpointing;
  c.runtime.comm_groups = o.comm_groups;
  if (o.comm_groups == CommGroups::model) {
    TORCH_CHECK(!o.prefetch, "--comm-groups model issues the whole unshard as one group: --prefetch has nothing to overlap");
    TORCH_CHECK(!o.activation_checkpointing, "--comm-groups model keeps every unit gathered until its backward: "
                "--activation-checkpointing recomputes on a revived buffer, which it never has");
    TORCH_CHECK(o.unshard != "per_segment", "--comm-groups model issues the whole unshard as one group: --unshard "
                "per_segment (each broadcast a collective of its own) contradicts it");
  }
}

TransformerConfig trainable_model_config(int layers, int hidden, int heads, int intermediate) {
  TransformerConfig c = preset_config("tiny");
  c.name = "tiny";
  c.vocab = 256;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = c.kv_heads = heads;
  c.intermediate = intermediate;
  c.dtype = c10::kFloat;
  return c;
}

int launched_world_size(int world_size) {
  const std::optional<LaunchEnv> launched = read_launch_env();
  if (!launched) return world_size;
  // -w given on a launched rank's command line must agree with the launcher's world size (it is
  // not silently ignored).
  bool given = false;
  for (const std::string& arg : raw_args())
    given = given || arg == "-w" || arg == "--world-size" || arg.rfind("--world-size=", 0) == 0 || (arg.rfind("-w", 0) == 0 && arg.size() > 2 && arg[2] != '-');
  TORCH_CHECK(!given || world_size == launched->world_size, "--world-size ", world_size, " differs from the launch environment's ",
              launched->source == "slurm" ? "SLURM_NTASKS" : "WORLD_SIZE", "=", launched->world_size, " (", launched->source,
              "): under a launcher the world size is the launcher's; drop -w or make them agree");
  return launched->world_size;
}

void check_model_fits(const TransformerConfig& model, int64_t copies, const std::string& command) {
  if (read_launch_env() && !std::getenv("MFSDP_LAUNCHER")) return;  // another host's launcher: a share each
  int64_t available_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    int64_t value = 0;
    meminfo >> value;
    if (key == "MemAvailable:") available_kib = value;
    meminfo.ignore(256, '\n');
  }
  if (available_kib <= 0) return;  // unknown: nothing to compare with
  const double params = static_cast<double>(transformer_spec(model).numel());
  const double need = params * 16.0 * static_cast<double>(copies);
  TORCH_CHECK(need <= static_cast<double>(available_kib) * 1024.0, command, ": the model (--layers ", model.layers, " --hidden ",
              model.hidden, " --intermediate ", model.intermediate, ": ", params / 1e6, " M parameters) needs about ",
              human_bytes(static_cast<int64_t>(need)), " for parameters, gradients and optimizer state", copies > 1 ? " (" : "",
              copies > 1 ? std::to_string(copies) + " whole copies)" : "", ", more than the ",
              human_bytes(available_kib * 1024), " this machine has available; make it smaller");
}

void check_output_flag(const std::string& command, const std::string& path, const std::string& flag) {
  try {
    check_output_path(path, flag);
  } catch (const c10::Error& e) {
    throw usage_error(command, e.what_without_backtrace());
  }
}

}  // namespace mfsdp::cli
