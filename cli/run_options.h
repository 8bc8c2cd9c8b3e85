// The options that describe a run, shared by train, verify, plan and simulate: declared once here,
// with one spelling, one help text and one meaning each, and settled into the library's
// configurations here (never re-read by a command):
//   --planner, --tail-policy, --optimizer   the plan; the optimizer kind is stated once (set_optimizer)
//   --replicas, --step-mode                 the HSDP mesh (R replica groups of W / R ranks)
//   --param-dtype, --reduce-dtype, --output-dtype
//                                           the precision policy; none given: the model's own dtype
//   --tie-embeddings, --experts, ...        the model
//   --fast                                  the fast mode of the determinism contract: the native
//                                           reduce (any summation order) and, where ranks run, the
//                                           libraries' thread pools; judged by a tolerance model
//   --ns-variant, --ns-steps                Muon's Newton–Schulz variant and its iterations (a
//                                           variant with a fixed table pins them)
//   --prefetch                              overlap: two units gathered at once (the next unit's
//                                           unshard, in backward the previous unit's revive, issued
//                                           while this one computes)
#pragma once

#include "core/plan/planner.h"
#include "core/plan/precision.h"
#include "core/plan/presets.h"
#include "core/train/trainer.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp::cli {

struct MoeArgs {
  int64_t experts = 0;           // 0: dense blocks
  int64_t top_k = 2;
  int64_t shared_experts = 0;
  int64_t moe_intermediate = 0;  // 0: the dense intermediate size
  int64_t first_dense = 0;
  int expert_ranges = 0;         // planner: ranges per expert tensor (0: min(experts, W))
  bool batched_ns = false;       // Muon: one batched Newton–Schulz chain per expert tensor
  bool any() const { return experts > 0; }
};

struct RunOptions {
  std::string planner = "balanced", tail_policy = "even", optimizer = "muon";
  int replicas = 1;
  StepMode step_mode = StepMode::replicated;
  std::string param_dtype, reduce_dtype, output_dtype;  // empty: not given
  bool tie_embeddings = false;
  int64_t kv_heads = 0;  // grouped-query attention's key/value heads; 0: as many as query heads
  MoeArgs moe;
  bool fast = false;
  bool prefetch = false;
  // The unshard's transport (core/runtime/unit.h): broadcast (one group of a unit's segment
  // broadcasts), allgather_even (the even tail's all-gather in the same group) or per_segment (each
  // broadcast a collective of its own). The same bits every way: a transport, not arithmetic.
  std::string unshard = "broadcast";
  bool activation_checkpointing = false;  // recompute each block in backward (docs/recompute.md)
  CommGroups comm_groups = CommGroups::unit;  // how many units' transfers travel as one group
  std::optional<std::string> ns_variant;  // Muon's Newton–Schulz variant (core/plan/ns_variant.h); unset: torch
  std::optional<int> ns_steps;            // its iterations, for a variant without a fixed table
  int units_gathered() const { return prefetch ? 2 : 1; }  // under --comm-groups model: all of them
};

// Which of the shared options a command takes.
struct RunOptionSet {
  bool optimizer_flags = true;    // --batched-ns (the ones that change the optimizer's step)
  bool fast = true;               // --fast (not for plan: the plan does not depend on it)
  bool prefetch = true;           // --prefetch
  bool unshard = true;            // --unshard (plan prices no transport)
  bool recompute = true;          // --activation-checkpointing (simulate has its own; plan models no activations)
  bool output_dtype = true;       // --output-dtype
  bool model = true;              // --tie-embeddings and the MoE options
  bool explicit_planner = false;  // `--planner explicit` is offered (mfsdp plan, with --assign)
};

void add_run_options(CLI::App* cmd, RunOptions& o, RunOptionSet set = {});

// The learning-rate schedule (--lr-schedule, --warmup-steps, --decay-steps, --stable-steps,
// --min-lr-ratio; docs/schedules.md): given values only.
struct ScheduleArgs {
  std::optional<std::string> kind;
  std::optional<int64_t> warmup_steps, decay_steps, stable_steps;
  std::optional<double> min_lr_ratio;
};
void add_schedule_options(CLI::App* cmd, ScheduleArgs& a);
// The schedule the flags give; throws naming a schedule flag given without --lr-schedule, or a
// bad value (validate(LrSchedule)).
LrSchedule lr_schedule_of(const ScheduleArgs& a);

// The length and inputs of a run (train, verify): --steps (at least `min_steps`), --batch, --seq,
// --grad-accum, --grad-reduce, --max-norm, the schedule's flags, --seed, --timeout-s, --group.
struct StepArgs {
  int steps = 20;
  int64_t batch = 4, seq = 32;
  int grad_accum = 1;
  GradReduce grad_reduce = GradReduce::per_microbatch;
  std::optional<double> max_norm;  // clipping; unset: none
  std::optional<double> qk_clip_tau;  // QK-clip's threshold; unset: none
  ScheduleArgs schedule;
  uint64_t seed = 0;
  int timeout_s = 60;
  std::vector<std::string> groups;  // PATTERN:lr=X:wd=Y
};
void add_step_options(CLI::App* cmd, StepArgs& a, int min_steps);
// Sets steps, batch, seq, accumulation, clipping, the schedule, seed and the parameter groups
// (checked against the model) of `c`.
void apply_step_options(const StepArgs& a, TrainConfig& c);

// --lr (the matrix optimizer's; with --optimizer adamw, AdamW's), --adamw-lr (embeddings, head, 1-D
// tails; with --optimizer adamw, everywhere), --weight-decay (every optimizer's): given values only.
struct RateArgs {
  std::optional<double> lr, adamw_lr, weight_decay;
};
void add_rate_options(CLI::App* cmd, RateArgs& a);
// A given value is used as given (0 included) or refused, never silently replaced by a default.
void apply_rate_options(const RateArgs& a, RuntimeOptions& runtime);

// The trainable transformer (byte vocabulary, fp32 masters) of these sizes.
TransformerConfig trainable_model_config(int layers, int hidden, int heads, int intermediate);
// The world size a run will have: the launch environment's (torchrun, Slurm, mfsdp launch) when this
// process was launched as a rank, else `world_size` (-w).
int launched_world_size(int world_size);
// Refuses, naming the size flags, a model whose parameters, gradients and optimizer state
// (16 bytes a parameter, `copies` whole models: 1 for the sharded placements, W for ddp, W + 1
// for verify's oracle beside the runtime) exceed this machine's available memory. Skipped for a
// rank of an external launcher (its host holds only its share).
void check_model_fits(const TransformerConfig& model, int64_t copies, const std::string& command);

// The planner's options (planner, tail policy, optimizer, expert ranges; the cost model priced with
// the Newton–Schulz variant and steps); throws naming a bad value.
PlannerOptions planner_options(const RunOptions& o);
// The precision policy over the masters; none given: every copy in `model_dtype`, nothing cast.
PrecisionPolicy precision_policy(const RunOptions& o, c10::ScalarType model_dtype);
// The model's MoE fields (only with --experts) and its tied embedding.
void apply_model_options(const RunOptions& o, TransformerConfig& model);
// --ns-variant and --ns-steps into Muon's options; throws naming both flags when a variant with a
// fixed table is given --ns-steps, or either flag with another matrix optimizer.
void apply_ns_options(const RunOptions& o, OptimizerKind optimizer, MuonOptions& muon);
// Everything above into a training configuration: model, planner, runtime (optimizer once, precision, mesh, reduce mode, prefetch, Muon's
// Newton–Schulz variant, steps and batched mode). The mesh is checked against
// `world_size` (R must divide it). Throws naming the first bad value.
void apply_run_options(const RunOptions& o, int world_size, TrainConfig& c);

}  // namespace mfsdp::cli
