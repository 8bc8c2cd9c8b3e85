// `mfsdp train`: an owner-shaped training run on the embedded default data, with per-step loss,
// time breakdown, bytes per phase and resident memory; JSON-lines metrics for machines
// (core/train/metrics.h). Flags shared with verify, plan and simulate: cli/run_options.h.
#include "cli/commands.h"
#include "cli/run_options.h"
#include "core/dist/launch_env.h"
#include "core/dist/launcher.h"
#include "core/io/checkpoint.h"
#include "core/train/metrics.h"
#include "core/train/trainer.h"
#include "core/util/files.h"
#include "harness/placements.h"
#include "harness/trajectory_dump.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <optional>

namespace mfsdp::cli {
namespace {

struct TrainArgs {
  int world_size = 2;
  Launcher launcher = Launcher::threads;
  std::string placement = "owner";
  RunOptions run;
  StepArgs step;
  RateArgs rates;  // given values only (else the training defaults, core/plan/optimizer_config.h)
  bool deterministic = true;
  std::string device = "cpu";
  std::string backend = "gloo";
  std::string metrics;
  std::string data;
  NonFinitePolicy on_non_finite = NonFinitePolicy::fail;
  int layers = 2, hidden = 64, heads = 4, intermediate = 128;
  std::vector<int> kill_at;  // hidden: RANK STEP
  std::vector<int> kill_in_checkpoint;  // hidden: RANK STEP
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool resume = false;
  std::string resume_from;
  bool overwrite_checkpoints = false;
  std::string dump_trajectory;
  bool dump_grads = false;
  bool dump_state = false;
};

// Files, directories and flag combinations, checked here rather than by every rank, or after training.
void check_inputs(const TrainArgs& a, const TrainConfig& c) {
  TORCH_CHECK(a.checkpoint_every == 0 || !a.checkpoint_dir.empty(), "train: --checkpoint-every needs --checkpoint-dir");
  TORCH_CHECK(!a.overwrite_checkpoints || !a.checkpoint_dir.empty(), "train: --overwrite-checkpoints needs --checkpoint-dir");
  TORCH_CHECK(!a.overwrite_checkpoints || (!a.resume && a.resume_from.empty()),
              "train: --overwrite-checkpoints starts a new run; it cannot be combined with --resume or --resume-from");
  TORCH_CHECK(c.checkpoint_dir.empty() || runs_on_owner_runtime(c.placement), "train: placement ", a.placement,
              " does not write checkpoints (owner, reconstruct and alltoall do)");
  TORCH_CHECK(c.resume_from.empty() || runs_on_owner_runtime(c.placement) || c.placement == Placement::ddp, "train: placement ",
              a.placement, " does not resume from checkpoints (owner, reconstruct, alltoall and ddp do)");
  TORCH_CHECK(!a.dump_grads || !a.dump_trajectory.empty(), "train: --dump-grads needs --dump-trajectory DIR");
  TORCH_CHECK(!a.dump_state || !a.dump_trajectory.empty(), "train: --dump-state needs --dump-trajectory DIR");
  TORCH_CHECK(!a.dump_state || c.placement == Placement::ddp, "train: --dump-state: placement ", a.placement,
              " does not gather its optimizer state in full yet; dump the reference with --placement ddp (the oracle)");
  TORCH_CHECK(!a.dump_grads || c.placement != Placement::zero1, "train: --dump-grads: placement zero1 cannot report its gradients "
              "(owner, reconstruct, alltoall and ddp can)");
  TORCH_CHECK(!a.dump_grads || c.runtime.step_mode != StepMode::dedup || a.run.replicas <= 1,
              "train: --dump-grads: under --step-mode dedup no rank group holds every reduced gradient; use --step-mode replicated");
  // Checked once, by the process that starts the ranks: a rank process started by our launcher
  // would find the directory rank 0 has begun writing. Under torchrun or Slurm rank 0's writer
  // checks it, and every rank fails together (train_rank).
  if (!a.dump_trajectory.empty() && !read_launch_env()) check_empty_output_dir(a.dump_trajectory, "train: --dump-trajectory");
  check_model_fits(c.model, c.placement == Placement::ddp ? launched_world_size(a.world_size) : 1, "train");
  check_corpus(a.data, c.seq, "train: --data");
  if (!a.metrics.empty()) check_output_path(a.metrics, "train: --metrics");  // after the inputs: never one of them
  // The dump's directory must stay empty until the dump writes it.
  TORCH_CHECK(a.metrics.empty() || a.dump_trajectory.empty() || !file_lands_in(a.metrics, a.dump_trajectory), "train: --metrics: '",
              a.metrics, "' is inside --dump-trajectory '", a.dump_trajectory, "' (the dump's directory holds only the dump); write it elsewhere");
  if (!a.resume_from.empty()) TORCH_CHECK(path_exists(a.resume_from), "train: --resume-from: '", a.resume_from, "' does not exist");
}

TrainConfig make_config(const TrainArgs& a) {
  TrainConfig c;
  c.model = trainable_model_config(a.layers, a.hidden, a.heads, a.intermediate);
  apply_run_options(a.run, launched_world_size(a.world_size), c);
  apply_placement(placement_from_string(a.placement), c);
  apply_step_options(a.step, c);
  TORCH_CHECK(a.backend != "nccl" || a.device == "cuda", "train: --backend nccl needs --device cuda");
  c.runtime.non_finite = a.on_non_finite;
  apply_rate_options(a.rates, c.runtime);
  c.data = a.data;
  if (a.kill_at.size() == 2) c.kill_rank_at_step = std::make_pair(a.kill_at[0], a.kill_at[1]);
  if (a.kill_in_checkpoint.size() == 2) c.kill_rank_in_checkpoint = std::make_pair(a.kill_in_checkpoint[0], a.kill_in_checkpoint[1]);
  c.checkpoint_dir = a.checkpoint_dir;
  c.checkpoint_every = a.checkpoint_every;
  c.overwrite_checkpoints = a.overwrite_checkpoints;
  // --resume: continue from the directory's latest checkpoint if it has one (a fresh start if not,
  // so one command line serves the first run and every restart); --resume-from: that checkpoint.
  TORCH_CHECK(!a.resume || !a.checkpoint_dir.empty(), "train: --resume needs --checkpoint-dir (or use --resume-from PATH)");
  if (!a.checkpoint_dir.empty()) {
    check_output_dir(a.checkpoint_dir, "train: --checkpoint-dir");
    note_checkpoint_dir(a.checkpoint_dir);  // no other output of this run goes inside it
  }
  if (!a.resume_from.empty()) c.resume_from = a.resume_from;
  else if (a.resume && !a.checkpoint_dir.empty() && has_checkpoint(a.checkpoint_dir)) c.resume_from = a.checkpoint_dir;
  check_inputs(a, c);
  return c;
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// The body every rank runs; rank 0 reports.
void train_rank(RankContext& ctx, const TrainArgs& a, TrainConfig config) {
  config.runtime.device = rank_device(a.device, ctx.rank);
  if (!config.runtime.device.is_cpu()) apply_cuda_determinism(ctx.determinism);
  const bool reporter = ctx.rank == 0;
  // Rank 0's metrics: one JSON line per step, then a summary; committed at the end (complete or
  // absent, never half-written).
  std::unique_ptr<AtomicFile> metrics;
  if (reporter && !a.metrics.empty()) {
    try {
      metrics = std::make_unique<AtomicFile>(a.metrics);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "train: --metrics: ", e.what_without_backtrace());
    }
  }
  if (reporter) say("train: " + describe_run(config, ctx.world_size, a.device, a.backend));
  if (reporter && a.resume && config.resume_from.empty())
    say("resume: no checkpoint under " + a.checkpoint_dir + " yet; starting at step 0");
  // The trajectory dump (docs/conformance.md): rank 0 writes every step's full state.
  const std::unique_ptr<TrajectoryWriter> dump =
      a.dump_trajectory.empty() ? nullptr
                                : attach_trajectory_dump(ctx, config, a.dump_trajectory, a.dump_grads,
                                                         "mfsdp train --placement " + a.placement, a.dump_state);
  auto report = [&](const StepMetrics& m) {
    if (!reporter) return;
    say(progress_line(m, a.step.steps));
    if (!m.checkpoint.empty()) say("checkpoint: " + m.checkpoint + " (" + std::to_string(1e3 * m.checkpoint_s) + " ms)");
    if (metrics) metrics->write(metrics_row(m).dump() + "\n");
  };
  config.on_notice = [&](const std::string& notice) {
    if (reporter) say("train: " + notice);
  };
  config.on_resume = [&](const ResumeInfo& r) {
    if (!reporter) return;
    for (const std::string& line : resume_lines(r)) say(line);
    if (config.steps <= r.step)
      say("resume: warning: the checkpoint is at step " + std::to_string(r.step) + " and --steps is " + std::to_string(config.steps) +
          " (the total, not the steps to add): no step runs");
  };
  const TrainResult result = train_placement(ctx, config, report);

  Communicator comm(ctx.backend);
  const std::vector<RankSummary> ranks = gather_rank_summaries(comm, result.steps.empty() ? StepMetrics{} : result.steps.back());
  if (!reporter) return;
  std::fputs(("\n" + rank_summary_table(ranks)).c_str(), stdout);
  if (!result.steps.empty()) {
    char plan_hash[32];
    std::snprintf(plan_hash, sizeof(plan_hash), "%016llx", static_cast<unsigned long long>(result.plan_hash));
    char losses[96];
    std::snprintf(losses, sizeof(losses), "loss %.4f -> %.4f over %zu steps", result.steps.front().loss,
                  result.steps.back().loss, result.steps.size());
    say(losses +
        (result.resumed.checkpoint.empty() ? std::string() : " (resumed after step " + std::to_string(result.resumed.step) + ")") +
        "; plan hash " + plan_hash);
  }
  if (dump) {
    dump->finish();
    say("trajectory: " + a.dump_trajectory);
  }
  if (metrics) {
    metrics->write(summary_row(ranks, config.runtime.precision).dump() + "\n");
    metrics->commit();
    say("metrics: " + a.metrics);
  }
}

int run_train(const TrainArgs& a) {
  TrainConfig config;
  try {
    config = make_config(a);
  } catch (const c10::Error& e) {
    throw usage_error("train", e.what_without_backtrace());
  }
  // One clear error up front instead of one per rank.
  TORCH_CHECK(a.device != "cuda" || at::globalContext().hasCUDA(),
              "train: --device cuda, but no CUDA device is visible (torch.cuda.is_available() is false); use --device cpu");
  RanksOptions ranks;
  ranks.world_size = a.world_size;
  ranks.timeout = std::chrono::seconds(a.step.timeout_s);
  ranks.determinism = a.run.fast ? Determinism::fast : Determinism::deterministic;
  ranks.seed = a.step.seed;
  ranks.backend = backend_kind_from_string(a.backend);
  // After a rank process failed, the others get a few seconds to say what they saw (a lost peer is
  // named within about 3 s: heartbeat.h), then are stopped: never the whole --timeout-s.
  return run_ranks(ranks, a.launcher, relaunch_self(), std::chrono::seconds(std::min(a.step.timeout_s, 5)),
                   [&](RankContext& ctx) { train_rank(ctx, a, config); });
}

}  // namespace

void add_train_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("train", "Owner-shaped ZeRO-3 training of the tiny transformer on the embedded corpus");
  auto a = std::make_shared<TrainArgs>();
  cmd->add_option("-w,--world-size", a->world_size, "Ranks")->check(CLI::Range(1, 64));
  add_enum_option(cmd, "--launcher", a->launcher, kLauncherNames, "How ranks run");
  cmd->add_option("--placement", a->placement,
                  "owner | reconstruct (FSDP2 + Muon) | alltoall (DistMuon) | zero1 (ZeRO-1 owner) | ddp (the oracle)");
  add_run_options(cmd, a->run);
  cmd->add_flag("--deterministic", a->deterministic, "Rank-order gradient sums, one intra-op thread (default)")
      ->excludes(cmd->get_option("--fast"));
  add_step_options(cmd, a->step, /*min_steps=*/0);
  add_rate_options(cmd, a->rates);
  cmd->add_option("--device", a->device, "cpu | cuda (rank r on GPU r mod count)")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--backend", a->backend, "gloo (CPU or CUDA tensors) | nccl (CUDA, one GPU per rank)")
      ->check(CLI::IsMember({"gloo", "nccl"}));
  cmd->add_option("--metrics", a->metrics, "Write JSON lines (one per step, then a summary) to this file");
  cmd->add_option("--data", a->data, std::string("Training text (default: ") + kDefaultCorpus + ")");
  add_enum_option(cmd, "--on-non-finite", a->on_non_finite, kNonFinitePolicyNames, "A step with a non-finite gradient");
  cmd->add_option("--layers", a->layers, "Transformer blocks")->check(CLI::Range(1, 64));
  cmd->add_option("--hidden", a->hidden, "Hidden size")->check(CLI::Range(8, 4096));
  cmd->add_option("--heads", a->heads, "Attention heads")->check(CLI::Range(1, 64));
  cmd->add_option("--intermediate", a->intermediate, "MLP size")->check(CLI::Range(8, 16384));
  cmd->add_option("--fault-kill", a->kill_at, "RANK STEP: that rank kills itself mid-step (fault tests)")->expected(2)->group("");
  cmd->add_option("--fault-kill-in-checkpoint", a->kill_in_checkpoint,
                  "RANK STEP: that rank kills itself in that step's checkpoint, after writing its file (fault tests)")
      ->expected(2)->group("");
  cmd->add_option("--checkpoint-dir", a->checkpoint_dir, "Write checkpoints into this directory (step_N/, latest)");
  cmd->add_option("--checkpoint-every", a->checkpoint_every, "Steps between checkpoints (and one after the last step)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_flag("--resume", a->resume, "Continue from --checkpoint-dir's latest checkpoint, if any (any world size, planner, tail policy)");
  cmd->add_option("--resume-from", a->resume_from, "Continue from this checkpoint (a step directory or a checkpoint directory)");
  cmd->add_flag("--overwrite-checkpoints", a->overwrite_checkpoints,
                "Start a new run in a --checkpoint-dir that holds another run's checkpoints, removing them");
  cmd->add_option("--dump-trajectory", a->dump_trajectory,
                  "Write every step's loss and full parameters into this new or empty directory, for mfsdp conform "
                  "(docs/conformance.md)");
  cmd->add_flag("--dump-grads", a->dump_grads, "With --dump-trajectory: also every step's gradients as its update used them");
  cmd->add_flag("--dump-state", a->dump_state,
                "With --dump-trajectory: also the optimizer state after every step (placement ddp), what one-step replay needs");
  cmd->callback([&run, a] { run = [a] { return run_train(*a); }; });
}

}  // namespace mfsdp::cli
