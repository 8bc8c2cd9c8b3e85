// `mfsdp train`: an owner-shaped training run on the embedded default data, with per-step loss,
// time breakdown, bytes per phase and resident memory; JSON-lines metrics for machines.
#include "cli/commands.h"
#include "cli/model_options.h"
#include "core/dist/launch_env.h"
#include "core/dist/mesh.h"
#include "core/util/errors.h"
#include "core/util/files.h"
#include "core/dist/launcher.h"
#include "core/plan/memory_model.h"
#include "core/io/checkpoint.h"
#include "core/train/trainer.h"
#include "harness/placements.h"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <fstream>

namespace mfsdp::cli {

namespace {

struct TrainArgs {
  int world_size = 2;
  Launcher launcher = Launcher::threads;
  std::string placement = "owner";
  std::string planner = "balanced";
  std::string tail_policy = "even";
  std::string optimizer = "muon";
  int steps = 20;
  int64_t batch = 4;
  int64_t seq = 32;
  // Given values only (nullopt: the training defaults, core/plan/optimizer_config.h).
  std::optional<double> lr, adamw_lr, weight_decay;
  bool deterministic = true;
  bool fast = false;
  bool prefetch = false;
  std::string device = "cpu";
  std::string backend = "gloo";
  std::string metrics;
  std::string data;
  uint64_t seed = 0;
  int timeout_s = 60;
  NonFinitePolicy on_non_finite = NonFinitePolicy::fail;
  int layers = 2, hidden = 64, heads = 4, intermediate = 128;
  bool tie_embeddings = false;
  MoeArgs moe;
  std::vector<int> kill_at;  // hidden: RANK STEP
  std::vector<int> kill_in_checkpoint;  // hidden: RANK STEP
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool resume = false;
  std::string resume_from;
  bool overwrite_checkpoints = false;
  std::vector<std::string> groups;
  std::string param_dtype = "fp32", reduce_dtype = "fp32", output_dtype;
  int replicas = 1;
  StepMode step_mode = StepMode::replicated;
};

TrainConfig make_config(const TrainArgs& a) {
  TrainConfig c;
  c.model.name = "tiny";
  c.model.vocab = 256;
  c.model.layers = a.layers;
  c.model.hidden = a.hidden;
  c.model.heads = a.heads;
  c.model.kv_heads = a.heads;
  c.model.intermediate = a.intermediate;
  c.model.dtype = c10::kFloat;
  c.model.tie_embeddings = a.tie_embeddings;
  apply_moe(a.moe, c.model, c.planner, &c.runtime);
  c.planner.planner = planner_kind_from_string(a.planner);
  TORCH_CHECK(c.planner.planner != PlannerKind::explicit_assignment, "train: --planner explicit is for mfsdp plan and tests");
  c.planner.tail_policy = tail_policy_from_string(a.tail_policy);
  c.planner.optimizer = optimizer_kind_from_string(a.optimizer);
  c.runtime.optimizer = c.planner.optimizer;
  c.runtime.reduce = a.fast ? ReduceMode::fast : ReduceMode::deterministic;
  c.runtime.prefetch = a.prefetch;
  c.runtime.precision = precision_from_flags(a.param_dtype, a.reduce_dtype, a.output_dtype);
  // Launched (torchrun, Slurm, mfsdp launch): the environment's world size, not -w.
  const std::optional<LaunchEnv> launched = read_launch_env();
  mesh_shape(launched ? launched->world_size : a.world_size, a.replicas);  // throws unless R divides W
  c.runtime.replicas = a.replicas;
  c.runtime.step_mode = a.step_mode;
  for (const std::string& g : a.groups) c.runtime.groups.push_back(param_group_from_string(g));
  check_groups(c);
  TORCH_CHECK(a.backend != "nccl" || a.device == "cuda", "train: --backend nccl needs --device cuda");
  c.runtime.non_finite = a.on_non_finite;
  // A given value is used as given (0 included) or refused; never silently replaced by a default.
  auto checked = [](const char* flag, const std::optional<double>& v) {
    TORCH_CHECK(!v || (std::isfinite(*v) && *v >= 0), "train: ", flag, " must be a finite number >= 0, got ", *v);
    return v;
  };
  // --lr: the matrix optimizer's rate (Muon, Shampoo or SOAP; with --optimizer adamw, AdamW's);
  // --adamw-lr: AdamW's on embeddings, head and 1-D tails (and, with --optimizer adamw, everywhere).
  if (auto lr = checked("--lr", a.lr)) {
    c.runtime.muon.lr = c.runtime.shampoo.lr = c.runtime.soap.lr = *lr;
    if (c.runtime.optimizer == OptimizerKind::adamw) c.runtime.adamw.lr = *lr;
  }
  if (auto lr = checked("--adamw-lr", a.adamw_lr)) c.runtime.adamw.lr = *lr;
  if (auto wd = checked("--weight-decay", a.weight_decay)) {
    c.runtime.muon.weight_decay = c.runtime.adamw.weight_decay = *wd;
    c.runtime.shampoo.weight_decay = c.runtime.soap.weight_decay = *wd;
  }
  validate(c.runtime.muon), validate(c.runtime.adamw), validate(c.runtime.shampoo), validate(c.runtime.soap);
  c.steps = a.steps;
  c.batch = a.batch;
  c.seq = a.seq;
  c.seed = a.seed;
  c.data = a.data;
  if (a.kill_at.size() == 2) c.kill_rank_at_step = std::make_pair(a.kill_at[0], a.kill_at[1]);
  if (a.kill_in_checkpoint.size() == 2) c.kill_rank_in_checkpoint = std::make_pair(a.kill_in_checkpoint[0], a.kill_in_checkpoint[1]);
  TORCH_CHECK(a.checkpoint_every == 0 || !a.checkpoint_dir.empty(), "train: --checkpoint-every needs --checkpoint-dir");
  TORCH_CHECK(!a.resume || !a.checkpoint_dir.empty(), "train: --resume needs --checkpoint-dir (or use --resume-from PATH)");
  // Files and directories, checked here rather than by every rank, or after training.
  if (!a.metrics.empty()) check_output_path(a.metrics, "train: --metrics");
  const std::string data = a.data.empty() ? kDefaultCorpus : a.data;
  check_input_file(data, "train: --data", int64_t{1} << 30);
  struct stat st {};
  TORCH_CHECK(::stat(data.c_str(), &st) == 0 && st.st_size >= a.seq + 1, "train: --data: '", data, "' has ",
              static_cast<int64_t>(st.st_size), " bytes; a sequence of --seq ", a.seq, " needs ", a.seq + 1);
  if (!a.checkpoint_dir.empty()) check_output_dir(a.checkpoint_dir, "train: --checkpoint-dir");
  if (!a.resume_from.empty()) TORCH_CHECK(path_exists(a.resume_from), "train: --resume-from: '", a.resume_from, "' does not exist");
  TORCH_CHECK(!a.overwrite_checkpoints || !a.checkpoint_dir.empty(), "train: --overwrite-checkpoints needs --checkpoint-dir");
  TORCH_CHECK(!a.overwrite_checkpoints || (!a.resume && a.resume_from.empty()),
              "train: --overwrite-checkpoints starts a new run; it cannot be combined with --resume or --resume-from");
  c.checkpoint_dir = a.checkpoint_dir;
  c.checkpoint_every = a.checkpoint_every;
  c.overwrite_checkpoints = a.overwrite_checkpoints;
  // --resume: continue from the directory's latest checkpoint if it has one (a fresh start if not,
  // so one command line serves the first run and every restart); --resume-from: that checkpoint.
  if (!a.resume_from.empty()) c.resume_from = a.resume_from;
  else if (a.resume && has_checkpoint(a.checkpoint_dir)) c.resume_from = a.checkpoint_dir;
  return c;
}

// The body every rank runs; rank 0 reports.
void train_rank(RankContext& ctx, const TrainArgs& a, TrainConfig config) {
  config.runtime.device = rank_device(a.device, ctx.rank);
  if (!config.runtime.device.is_cpu()) apply_cuda_determinism(ctx.determinism);
  // Rank 0's metrics: one JSON line per step, then a summary; committed at the end (complete or
  // absent, never half-written).
  std::unique_ptr<AtomicFile> metrics;
  if (ctx.rank == 0 && !a.metrics.empty()) {
    try {
      metrics = std::make_unique<AtomicFile>(a.metrics);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "train: --metrics: ", e.what_without_backtrace());
    }
  }
  if (ctx.rank == 0) {
    std::printf("train: placement %s, %d rank(s) on %s over %s, planner %s, tail %s, optimizer %s, %s reduction%s, "
                "precision %s over fp32 masters,%s %d steps of %lld x %lld tokens per rank\n",
                a.placement.c_str(), ctx.world_size, a.device.c_str(), a.backend.c_str(), a.planner.c_str(),
                a.tail_policy.c_str(), a.optimizer.c_str(), a.fast ? "fast" : "deterministic",
                a.prefetch ? ", prefetch" : "", to_string(config.runtime.precision).c_str(),
                a.replicas > 1 ? (" HSDP " + std::to_string(a.replicas) + " x " + std::to_string(ctx.world_size / a.replicas) +
                                  " (" + to_string(a.step_mode) + " step),").c_str()
                               : "",
                a.steps,
                static_cast<long long>(a.batch), static_cast<long long>(a.seq));
    std::fflush(stdout);
  }
  if (ctx.rank == 0 && a.resume && config.resume_from.empty()) {
    std::printf("resume: no checkpoint under %s yet; starting at step 0\n", a.checkpoint_dir.c_str());
  }
  auto report = [&](const StepMetrics& m) {
    if (ctx.rank != 0) return;
    const int width = 20, done = static_cast<int>(static_cast<double>(m.step) / a.steps * width);
    std::string bar = std::string(done, '#') + std::string(width - done, '.');
    std::printf("[%s] step %3d/%d  loss %.4f  fwd %6.1f ms  bwd %6.1f ms  opt %6.1f ms  | unshard %s  reduce %s  "
                "step %s (%lld calls)%s  | resident %s  peak gathered %s%s\n",
                bar.c_str(), m.step, a.steps, m.loss, 1e3 * m.forward_s, 1e3 * m.backward_s, 1e3 * m.optimizer_s,
                human_bytes(m.bytes[0].bytes_recv).c_str(), human_bytes(m.bytes[1].bytes_sent).c_str(),
                human_bytes(m.bytes[2].bytes_sent + m.bytes[2].bytes_recv).c_str(),
                static_cast<long long>(m.bytes[2].calls),
                m.bytes[static_cast<int>(Phase::update_broadcast)].calls == 0
                    ? ""
                    : ("  update broadcast " + human_bytes(m.bytes[static_cast<int>(Phase::update_broadcast)].bytes_sent +
                                                           m.bytes[static_cast<int>(Phase::update_broadcast)].bytes_recv))
                          .c_str(),
                human_bytes(m.resident_bytes).c_str(),
                human_bytes(m.peak_gathered_bytes).c_str(),
                m.skipped ? ("  SKIPPED: non-finite gradient in " + m.non_finite_parameter).c_str() : "");
    if (!m.checkpoint.empty()) std::printf("checkpoint: %s (%.1f ms)\n", m.checkpoint.c_str(), 1e3 * m.checkpoint_s);
    std::fflush(stdout);
    if (metrics) {
      nlohmann::ordered_json j{{"step", m.step}, {"loss", m.loss}, {"forward_ms", 1e3 * m.forward_s},
                               {"backward_ms", 1e3 * m.backward_s}, {"optimizer_ms", 1e3 * m.optimizer_s},
                               {"resident_bytes", m.resident_bytes}, {"peak_gathered_bytes", m.peak_gathered_bytes},
                               {"skipped", m.skipped}};
      if (!m.checkpoint.empty()) j["checkpoint"] = {{"dir", m.checkpoint}, {"ms", 1e3 * m.checkpoint_s}};
      for (int p = 0; p < kNumPhases; ++p) {
        j["phases"][to_string(static_cast<Phase>(p))] = {
            {"calls", m.bytes[p].calls}, {"bytes_sent", m.bytes[p].bytes_sent}, {"bytes_recv", m.bytes[p].bytes_recv}};
      }
      metrics->write(j.dump() + "\n");
    }
  };
  config.on_notice = [&](const std::string& notice) {
    if (ctx.rank != 0) return;
    std::printf("train: %s\n", notice.c_str());
    std::fflush(stdout);
  };
  config.on_resume = [&](const ResumeInfo& r) {
    if (ctx.rank != 0) return;
    std::printf("resume: %s, step %lld, written by %d rank(s); %s; every file verified (rank 0's share %lld bytes); "
                "rank 0 read %lld of %lld checkpoint bytes\n",
                r.checkpoint.c_str(), static_cast<long long>(r.step), r.written_world_size,
                r.same_layout ? "same layout (each rank read its own file)" : "resharded onto this plan",
                static_cast<long long>(r.bytes_verified), static_cast<long long>(r.bytes_read),
                static_cast<long long>(r.bytes_total));
    for (const std::string& w : r.warnings) std::printf("resume: warning: %s\n", w.c_str());
    std::fflush(stdout);
  };
  TrainResult result = train_placement(ctx, config, report);

  // Per-rank summary: bytes per phase over the last step and resident memory, gathered to rank 0.
  const StepMetrics last = result.steps.empty() ? StepMetrics{} : result.steps.back();
  std::vector<int64_t> row{last.bytes[0].bytes_recv, last.bytes[0].bytes_sent, last.bytes[1].bytes_sent,
                           last.bytes[1].bytes_recv, last.bytes[2].calls, last.bytes[2].bytes_sent + last.bytes[2].bytes_recv,
                           last.resident_bytes, last.peak_gathered_bytes};
  const int64_t n = static_cast<int64_t>(row.size());
  Communicator comm(ctx.backend);
  at::Tensor mine = at::tensor(row, at::TensorOptions().dtype(at::kLong)).to(comm.control_device());
  at::Tensor all = at::empty({ctx.world_size * n}, comm.control_options(at::kLong));
  comm.allgather(all, mine)->wait();
  all = all.cpu();
  if (ctx.rank != 0) return;
  std::printf("\nper rank, last step:  unshard recv / sent | grad reduce sent / recv | optimizer step calls, bytes | "
              "resident | peak gathered\n");
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (int r = 0; r < ctx.world_size; ++r) {
    const int64_t* v = all.const_data_ptr<int64_t>() + r * n;
    std::printf("  rank %2d   %10s / %-10s | %10s / %-10s | %lld, %s | %s | %s\n", r, human_bytes(v[0]).c_str(),
                human_bytes(v[1]).c_str(), human_bytes(v[2]).c_str(), human_bytes(v[3]).c_str(),
                static_cast<long long>(v[4]), human_bytes(v[5]).c_str(), human_bytes(v[6]).c_str(),
                human_bytes(v[7]).c_str());
    ranks.push_back({{"rank", r}, {"unshard_recv_bytes", v[0]}, {"unshard_sent_bytes", v[1]},
                     {"grad_reduce_sent_bytes", v[2]}, {"grad_reduce_recv_bytes", v[3]},
                     {"optimizer_step_calls", v[4]}, {"optimizer_step_bytes", v[5]}, {"resident_bytes", v[6]},
                     {"peak_gathered_bytes", v[7]}});
  }
  if (!result.steps.empty()) {
    std::printf("loss %.4f -> %.4f over %zu steps%s; plan hash %016llx\n", result.steps.front().loss,
                result.steps.back().loss, result.steps.size(),
                result.resumed.checkpoint.empty() ? "" : (" (resumed after step " + std::to_string(result.resumed.step) + ")").c_str(),
                static_cast<unsigned long long>(result.plan_hash));
  }
  if (metrics) {
    const PrecisionPolicy& pp = config.runtime.precision;
    nlohmann::ordered_json precision{{"param_dtype", short_dtype_name(pp.param_dtype)},
                                     {"reduce_dtype", short_dtype_name(pp.reduce_dtype)},
                                     {"master_dtype", "fp32"}};
    if (pp.output_dtype) precision["output_dtype"] = short_dtype_name(*pp.output_dtype);
    metrics->write(nlohmann::ordered_json{{"summary", true}, {"world_size", ctx.world_size}, {"precision", precision},
                                          {"ranks", ranks}}.dump() + "\n");
    metrics->commit();
    std::printf("metrics: %s\n", a.metrics.c_str());
  }
}

int run_train(const TrainArgs& a) {
  TrainConfig config;
  try {
    config = make_config(a);
    apply_placement(placement_from_string(a.placement), config);
    TORCH_CHECK(config.checkpoint_dir.empty() || runs_on_owner_runtime(config.placement), "train: placement ", a.placement,
                " does not write checkpoints (owner, reconstruct and alltoall do)");
    TORCH_CHECK(config.resume_from.empty() || runs_on_owner_runtime(config.placement) || config.placement == Placement::ddp,
                "train: placement ", a.placement, " does not resume from checkpoints (owner, reconstruct, alltoall and ddp do)");
  } catch (const c10::Error& e) {
    throw UsageError(e.what_without_backtrace());
  }
  // One clear error up front instead of one per rank.
  TORCH_CHECK(a.device != "cuda" || at::globalContext().hasCUDA(),
              "train: --device cuda, but no CUDA device is visible (torch.cuda.is_available() is false); use --device cpu");
  RanksOptions ranks;
  ranks.world_size = a.world_size;
  ranks.timeout = std::chrono::seconds(a.timeout_s);
  ranks.determinism = a.fast ? Determinism::fast : Determinism::deterministic;
  ranks.seed = a.seed;
  ranks.backend = backend_kind_from_string(a.backend);
  auto body = [&](RankContext& ctx) { train_rank(ctx, a, config); };
  if (auto env = read_launch_env()) {
    run_as_launched_rank(*env, ranks, body);
    return kExitOk;
  }
  if (a.launcher == Launcher::processes) {
    LaunchOptions launch;
    launch.world_size = a.world_size;
    // After a rank failed, the others get a few seconds to say what they saw (a lost peer is named
    // within about 3 s: heartbeat.h), then are stopped: never the whole --timeout-s, whatever state
    // a survivor is blocked in (forming the group with the dead rank, a store wait).
    launch.grace = std::chrono::seconds(std::min(a.timeout_s, 5));
    launch.command = {self_executable()};
    // Re-run this very command line in each child, minus the launcher choice.
    for (size_t i = 1; i < raw_args().size(); ++i) launch.command.push_back(raw_args()[i]);
    return launch_processes(launch);
  }
  run_ranks_as_threads(ranks, body);
  return kExitOk;
}

}  // namespace

void add_train_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("train", "Owner-shaped ZeRO-3 training of the tiny transformer on the embedded corpus");
  auto a = std::make_shared<TrainArgs>();
  cmd->add_option("-w,--world-size", a->world_size, "Ranks")->check(CLI::Range(1, 64));
  add_enum_option(cmd, "--launcher", a->launcher, kLauncherNames, "How ranks run");
  cmd->add_option("--placement", a->placement,
                  "owner | reconstruct (FSDP2 + Muon) | alltoall (DistMuon) | zero1 (ZeRO-1 owner) | ddp (the oracle)");
  cmd->add_option("--planner", a->planner, "round_robin | greedy_bytes | greedy_cost | balanced");
  cmd->add_option("--tail-policy", a->tail_policy, "even | owner");
  cmd->add_option("--optimizer", a->optimizer, "muon | shampoo | soap | adamw (matrix optimizer; the rest uses AdamW)");
  cmd->add_option("--steps", a->steps, "Training steps")->check(CLI::Range(0, 1000000));
  cmd->add_option("--batch", a->batch, "Sequences per rank per step")->check(CLI::Range(1, 4096));
  cmd->add_option("--seq", a->seq, "Tokens per sequence")->check(CLI::Range(1, 8192));
  {
    const OptimizerOptions d = training_defaults();
    char help[256];
    std::snprintf(help, sizeof(help), "Matrix optimizer's learning rate, >= 0 (default: Muon %g, Shampoo %g, SOAP %g)",
                  d.muon.lr, d.shampoo.lr, d.soap.lr);
    cmd->add_option("--lr", a->lr, help);
    std::snprintf(help, sizeof(help), "AdamW's learning rate (embeddings, head, 1-D tails), >= 0 (default: %g)", d.adamw.lr);
    cmd->add_option("--adamw-lr", a->adamw_lr, help);
    std::snprintf(help, sizeof(help), "Weight decay of every optimizer, >= 0 (default: Muon %g, AdamW %g, Shampoo %g, SOAP %g)",
                  d.muon.weight_decay, d.adamw.weight_decay, d.shampoo.weight_decay, d.soap.weight_decay);
    cmd->add_option("--weight-decay", a->weight_decay, help);
  }
  auto* det = cmd->add_flag("--deterministic", a->deterministic, "Rank-order gradient sums, one intra-op thread (default)");
  cmd->add_flag("--fast", a->fast, "Native reduce and library thread pools instead")->excludes(det);
  cmd->add_option("--group", a->groups, "PATTERN:lr=X:wd=Y — a parameter group (glob over names; repeatable)");
  cmd->add_option("--replicas", a->replicas, "HSDP: R replica groups of W/R ranks (the plan is made for W/R)")
      ->check(CLI::Range(1, 64));
  add_enum_option(cmd, "--step-mode", a->step_mode, kStepModeNames,
                  "HSDP: replicated (every replica steps) | dedup (one replica steps each matrix and broadcasts it)");
  cmd->add_option("--param-dtype", a->param_dtype,
                  "fp32 | bf16: the compute copy unshard sends and forward/backward use (masters stay fp32)");
  cmd->add_option("--reduce-dtype", a->reduce_dtype,
                  "fp32 | bf16: gradients on the wire (deterministic mode accumulates in fp32 either way)");
  cmd->add_option("--output-dtype", a->output_dtype, "fp32 | bf16: cast each unit's output to it (default: as computed)");
  cmd->add_flag("--tie-embeddings", a->tie_embeddings,
                "The output head reuses the token embedding (one parameter, both uses' gradients summed)");
  add_moe_options(cmd, a->moe);
  cmd->add_flag("--prefetch", a->prefetch, "Overlap: unshard the next unit (revive the previous one in backward) while this one computes");
  cmd->add_option("--device", a->device, "cpu | cuda (rank r on GPU r mod count)")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--backend", a->backend, "gloo (CPU or CUDA tensors) | nccl (CUDA, one GPU per rank)")
      ->check(CLI::IsMember({"gloo", "nccl"}));
  cmd->add_option("--metrics", a->metrics, "Write JSON lines (one per step, then a summary) to this file");
  cmd->add_option("--data", a->data, std::string("Training text (default: ") + kDefaultCorpus + ")");
  cmd->add_option("--seed", a->seed, "Seed of weights and batches (0 to 2^64-1)")->check(seed_validator());
  cmd->add_option("--timeout-s", a->timeout_s, "Seconds before a collective or a lost rank fails the run")->check(CLI::Range(1, 3600));
  add_enum_option(cmd, "--on-non-finite", a->on_non_finite, kNonFinitePolicyNames, "A step with a non-finite gradient");
  cmd->add_option("--layers", a->layers, "Transformer blocks")->check(CLI::Range(1, 64));
  cmd->add_option("--hidden", a->hidden, "Hidden size")->check(CLI::Range(8, 4096));
  cmd->add_option("--heads", a->heads, "Attention heads")->check(CLI::Range(1, 64));
  cmd->add_option("--intermediate", a->intermediate, "MLP size")->check(CLI::Range(8, 16384));
  cmd->add_option("--fault-kill", a->kill_at, "RANK STEP: that rank kills itself mid-step (fault tests)")
      ->expected(2)->group("");
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
  cmd->callback([&run, a] { run = [a] { return run_train(*a); }; });
}

}  // namespace mfsdp::cli
