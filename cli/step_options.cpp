// The step's options (--steps, --batch, --seq, --grad-accum, --grad-reduce, --max-norm,
// --qk-clip-tau, the schedule's, --seed, --timeout-s, --group) and the rates (--lr, --adamw-lr,
// --weight-decay), declared in cli/run_options.h.
#include "cli/run_options.h"

#include "cli/commands.h"
#include "core/optim/optim.h"
#include "core/train/qk_clip.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <cstdio>

namespace mfsdp::cli {

void add_schedule_options(CLI::App* cmd, ScheduleArgs& a) {
  cmd->add_option("--lr-schedule", a.kind,
                  "Learning-rate schedule, every optimizer's lr = its base x lambda(t), t = optimizer steps taken: " +
                      names_or(kLrScheduleNames) + " (docs/schedules.md; default constant)");
  cmd->add_option("--warmup-steps", a.warmup_steps, "With --lr-schedule: linear warm-up steps, lambda = (t+1)/(W+1) (default 0)");
  cmd->add_option("--decay-steps", a.decay_steps,
                  "With a decaying --lr-schedule: the decay's length (default: the run's --steps after warm-up and "
                  "stable steps, fixed from then on in its checkpoints)");
  cmd->add_option("--stable-steps", a.stable_steps, "With --lr-schedule wsd: steps at the full rate after warm-up (default 0)");
  cmd->add_option("--min-lr-ratio", a.min_lr_ratio, "With a decaying --lr-schedule: lambda's floor after the decay, in [0, 1] (default 0)");
}

LrSchedule lr_schedule_of(const ScheduleArgs& a) {
  LrSchedule s;
  if (!a.kind) {
    const char* given = a.warmup_steps ? "--warmup-steps" : a.decay_steps ? "--decay-steps" : a.stable_steps ? "--stable-steps"
                        : a.min_lr_ratio ? "--min-lr-ratio" : nullptr;
    TORCH_CHECK(!given, given, " needs --lr-schedule (", names_or(kLrScheduleNames), ")");
    return s;
  }
  s.kind = lr_schedule_kind_from_string(*a.kind);
  s.warmup_steps = a.warmup_steps.value_or(0);
  s.stable_steps = a.stable_steps.value_or(0);
  s.decay_steps = a.decay_steps;
  s.min_lr_ratio = a.min_lr_ratio.value_or(0);
  validate(s);
  return s;
}

void add_step_options(CLI::App* cmd, StepArgs& a, int min_steps) {
  cmd->add_option("--steps", a.steps, "Training steps")->check(CLI::Range(min_steps, 1000000));
  cmd->add_option("--batch", a.batch, "Sequences per rank per micro-batch (a step has --grad-accum of them)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seq", a.seq, "Tokens per sequence")->check(CLI::Range(1, 8192));
  CLI::Option* grad_accum = cmd->add_option("--grad-accum", a.grad_accum,
                  "Gradient accumulation: micro-batches per step, each its own token-mean loss; the step's gradient is "
                  "their sum over micro-batches and ranks divided once by W K (default 1)")
      ->check(CLI::Range(1, kMaxGradAccum));
  add_enum_option(cmd, "--grad-reduce", a.grad_reduce, kGradReduceNames,
                  "With --grad-accum, the order micro-batches' gradients are added in (per-microbatch: each reduced to "
                  "the owners, who add the sums; deferred: each rank adds its own in fp32 and reduces once, more memory "
                  "and fewer collectives)")
      ->needs(grad_accum);  // alone it would change nothing, silently
  cmd->add_option("--max-norm", a.max_norm,
                  "Global gradient-norm clipping, as torch's clip_grad_norm_: every gradient scaled by "
                  "min(1, X / (norm + 1e-6)), the norm over all parameters' mean gradients logged every step (finite, > 0; "
                  "default: no clipping)");
  cmd->add_option("--qk-clip-tau", a.qk_clip_tau,
                  "QK-clip (MuonClip, docs/qk_clip.md): after each update, every head whose largest attention logit over "
                  "the step's batch on every rank exceeded X has its q and k rows scaled by sqrt(X / logit) (Muon family; "
                  "finite, > 0; default: off)");
  add_schedule_options(cmd, a.schedule);
  cmd->add_option("--seed", a.seed, "Seed of weights and batches (0 to 2^64-1)")->check(seed_validator());
  cmd->add_option("--timeout-s", a.timeout_s, "Seconds before a collective or a lost rank fails the run")->check(CLI::Range(1, 3600));
  cmd->add_option("--group", a.groups, "PATTERN:lr=X:wd=Y — a parameter group (glob over names; repeatable)");
}

void apply_step_options(const StepArgs& a, TrainConfig& c) {
  c.steps = a.steps;
  c.batch = a.batch;
  c.seq = a.seq;
  c.grad_accum = a.grad_accum;
  c.runtime.grad_reduce = a.grad_reduce;
  if (a.max_norm) {
    TORCH_CHECK(std::isfinite(*a.max_norm) && *a.max_norm > 0, "--max-norm must be a finite number > 0, got ", *a.max_norm);
    c.runtime.max_norm = *a.max_norm;
  }
  if (a.qk_clip_tau) {
    check_qk_clip(*a.qk_clip_tau, c.runtime.optimizer, c.model);
    c.qk_clip_tau = *a.qk_clip_tau;
  }
  c.lr_schedule = lr_schedule_of(a.schedule);
  c.seed = a.seed;
  for (const std::string& g : a.groups) c.runtime.groups.push_back(param_group_from_string(g));
  check_groups(c);
}

void add_rate_options(CLI::App* cmd, RateArgs& a) {
  const OptimizerOptions d = training_defaults();
  char help[256];
  std::snprintf(help, sizeof(help),
                "Matrix optimizer's learning rate, >= 0 (default: Muon %g, NorMuon %g, AdaMuon %g, Shampoo %g, SOAP %g)", d.muon.lr,
                d.normuon.lr, d.adamuon.lr, d.shampoo.lr, d.soap.lr);
  cmd->add_option("--lr", a.lr, help);
  std::snprintf(help, sizeof(help), "AdamW's learning rate (embeddings, head, 1-D tails), >= 0 (default: %g)", d.adamw.lr);
  cmd->add_option("--adamw-lr", a.adamw_lr, help);
  std::snprintf(help, sizeof(help),
                "Weight decay of every optimizer, >= 0 (default: Muon %g, NorMuon %g, AdaMuon %g, AdamW %g, Shampoo %g, SOAP %g)",
                d.muon.weight_decay, d.normuon.weight_decay, d.adamuon.weight_decay, d.adamw.weight_decay, d.shampoo.weight_decay,
                d.soap.weight_decay);
  cmd->add_option("--weight-decay", a.weight_decay, help);
}

void apply_rate_options(const RateArgs& a, RuntimeOptions& r) {
  auto checked = [](const char* flag, const std::optional<double>& v) {
    // The optimizers hold rates as float32 scalars: a value past float32's range overflows there.
    TORCH_CHECK(!v || (std::isfinite(*v) && *v >= 0 && *v <= std::numeric_limits<float>::max()), flag,
                " must be a finite number >= 0, got ", *v, v && std::isfinite(*v) && *v > 0 ? " (more than float32 holds, 3.4e38)" : "");
    return v;
  };
  if (auto lr = checked("--lr", a.lr)) {
    r.muon.lr = r.normuon.lr = r.adamuon.lr = r.shampoo.lr = r.soap.lr = *lr;
    if (r.optimizer == OptimizerKind::adamw) r.adamw.lr = *lr;
  }
  if (auto lr = checked("--adamw-lr", a.adamw_lr)) r.adamw.lr = *lr;
  if (auto wd = checked("--weight-decay", a.weight_decay)) {
    r.muon.weight_decay = r.normuon.weight_decay = r.adamuon.weight_decay = r.adamw.weight_decay = *wd;
    r.shampoo.weight_decay = r.soap.weight_decay = *wd;
  }
  validate(r.muon), validate(r.normuon), validate(r.adamuon), validate(r.adamw), validate(r.shampoo), validate(r.soap);
}

}  // namespace mfsdp::cli
