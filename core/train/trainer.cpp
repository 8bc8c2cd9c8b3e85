#include "core/train/trainer.h"

#include "core/dist/rank_agreement.h"
#include "core/io/checkpoint.h"
#include "core/io/checkpoint_dir.h"
#include "core/runtime/clipping.h"
#include "core/train/qk_clip.h"
#include "core/util/files.h"
#include "core/util/json_limits.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace mfsdp {

void check_groups(const TrainConfig& config) {
  std::vector<std::string> names;
  for (const ParamSpec& p : transformer_spec(config.model).params) names.push_back(p.name);
  check_groups(config.runtime, names);
}

nlohmann::json model_config_json(const TransformerConfig& m) {
  nlohmann::json j{{"name", m.name}, {"vocab", m.vocab}, {"hidden", m.hidden}, {"intermediate", m.intermediate},
                   {"layers", m.layers}, {"heads", m.heads}, {"kv_heads", m.kv_heads}, {"qkv_bias", m.qkv_bias},
                   {"dtype", c10::toString(m.dtype)}};
  if (m.tie_embeddings) j["tie_embeddings"] = true;
  if (!m.gated_mlp) j["gated_mlp"] = false;  // absent for SwiGLU, likewise  // absent when untied: earlier checkpoints compare equal
  if (m.experts > 0) {  // absent for dense models, likewise
    j["experts"] = m.experts, j["top_k"] = m.top_k, j["shared_experts"] = m.shared_experts;
    j["moe_intermediate"] = m.moe_intermediate, j["first_dense"] = m.first_dense;
  }
  return j;
}

namespace {

// This rank's data sampler: batches are a pure function of (seed, step, rank), so its state is
// the next step and what the batches are drawn from.
// With accumulation it also records K (absent for K = 1: such a sampler is the one before it).
nlohmann::json sampler_json(const TrainConfig& config, const ByteCorpus& corpus, int rank, int world_size, int64_t next_step) {
  nlohmann::json j{{"seed", config.seed}, {"next_step", next_step}, {"rank", rank}, {"world_size", world_size},
                   {"batch", config.batch}, {"seq", config.seq}, {"corpus", corpus.path()}, {"corpus_bytes", corpus.size()},
                   {"corpus_crc32", corpus.crc32()}};
  if (config.grad_accum != 1) j["grad_accum"] = config.grad_accum;
  return j;
}

// Differences between the sampler a checkpoint recorded and this run's (allowed, but said).
std::vector<std::string> sampler_differences(const std::string& recorded_text, const nlohmann::json& now) {
  std::vector<std::string> out;
  nlohmann::json recorded;
  try {
    recorded = parse_json(recorded_text, "checkpoint sampler state");
  } catch (const std::exception&) {
    return {"the checkpoint's sampler state is unreadable"};
  }
  for (const char* key : {"seed", "batch", "seq", "corpus_bytes", "corpus_crc32"}) {
    if (!recorded.contains(key)) out.push_back(std::string("the checkpoint does not record the sampler's ") + key);
    else if (recorded[key] != now[key])
      out.push_back(std::string("sampler ") + key + " was " + recorded[key].dump() + ", is " + now[key].dump() +
                    " (the data stream differs from an uninterrupted run)");
  }
  const nlohmann::json k_was = recorded.value("grad_accum", nlohmann::json(1)), k_is = now.value("grad_accum", nlohmann::json(1));
  if (k_was != k_is)
    out.push_back("gradient accumulation was " + k_was.dump() + " micro-batches per step, is " + k_is.dump() +
                  " (the data stream differs from an uninterrupted run)");
  return out;
}

// The directory `checkpoint` (a step directory) is in, resolved; "" when it cannot be.
std::string real_parent(const std::string& checkpoint) {
  const size_t slash = checkpoint.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : checkpoint.substr(0, slash);
  char buf[PATH_MAX];
  return ::realpath(parent.empty() ? "/" : parent.c_str(), buf) ? std::string(buf) : std::string();
}

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : std::string();
}

std::string steps_text(const std::vector<int64_t>& steps) {
  std::string out;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i == 3 && steps.size() > 5) {
      out += ", ..., " + std::to_string(steps.back());
      break;
    }
    out += (i ? ", " : "") + std::to_string(steps[i]);
  }
  return out;
}

// Rank 0, under the directory's lock: refuses a directory holding another run's checkpoints (or
// removes them, when told to), and finds whether resuming rolls `latest` back. `resumed` is the
// resolved checkpoint this run continues from ("" for none).
void claim_checkpoint_dir(TrainConfig& run, const std::string& resumed) {
  const std::string& dir = run.checkpoint_dir;
  const std::vector<int64_t> steps = committed_steps(dir);
  const bool has_latest = path_exists(dir + "/latest");
  if (steps.empty() && !has_latest) return;
  const bool continues = !resumed.empty() && real_parent(resumed) == real_path(dir);
  if (run.overwrite_checkpoints) {
    TORCH_CHECK(resumed.empty(), "train: --overwrite-checkpoints starts a new run; it cannot be combined with resuming");
    std::remove((dir + "/latest").c_str());  // first: never a `latest` naming a removed step
    for (int64_t s : steps) remove_flat_dir(dir + "/" + step_dir_name(s));
    if (run.on_notice)
      run.on_notice("--overwrite-checkpoints: removed " + std::to_string(steps.size()) + " checkpoint(s) (steps " +
                    steps_text(steps) + ")" + (has_latest ? " and latest" : "") + " from " + dir);
    return;
  }
  std::optional<int64_t> l;
  bool unreadable = false;
  std::string latest = "no latest";
  try {
    l = latest_step(dir);
    if (l) latest = "latest: step " + std::to_string(*l);
  } catch (const std::exception&) {
    latest = "an unreadable latest";
    unreadable = true;
  }
  TORCH_CHECK(continues, "train: --checkpoint-dir '", dir, "' already holds checkpoints of another run (", latest,
              steps.empty() ? std::string() : "; steps " + steps_text(steps),
              "); pass --resume to continue it, --resume-from one of its steps to roll back to it, or "
              "--overwrite-checkpoints to remove them");
  if (unreadable) latest_step(dir);  // continuing here needs a readable `latest`: throws its error
  // Continuing from one of its own steps: a rollback when that step is older than `latest`.
  const std::string name = resumed.substr(resumed.find_last_of('/') + 1);
  int64_t from = -1;
  for (int64_t s : steps)
    if (step_dir_name(s) == name) from = s;
  if (l && from >= 0 && from < *l) {
    run.checkpoint_rollback = true;
    if (run.on_notice)
      run.on_notice("rolling back: " + dir + "/latest names step " + std::to_string(*l) + "; this run continues from step " +
                    std::to_string(from) + ", and its checkpoints replace the later ones (latest moves back)");
  }
}

std::string lambda_text(double lambda) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", lambda);
  return buf;
}

// Resuming: the optimizer steps taken come from the checkpoint, and so does the decay length when
// this run gives none for the same kind of schedule; this run's flags win otherwise. Returns what
// differs from the recorded schedule ("" when nothing does), for the resume's warnings.
std::string resume_schedule(const TrainConfig& config, const CheckpointLayout& layout, LrSchedule& schedule, int64_t& taken) {
  if (layout.lr_schedule.is_null()) {
    taken = layout.step;  // written before schedules were recorded: a constant rate, no step skipped
    return schedule.kind == LrScheduleKind::constant && schedule.warmup_steps == 0
               ? ""
               : "the checkpoint records no learning-rate schedule (a constant rate); this run's " + describe(schedule) +
                     " starts at t = " + std::to_string(taken) + ", the checkpoint's step";
  }
  LrSchedule was;
  try {
    was = lr_schedule_from_json(layout.lr_schedule, &taken);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "train: cannot resume from the checkpoint's learning-rate schedule: ", e.what());
  }
  TORCH_CHECK(taken <= layout.step, "train: the checkpoint records ", taken, " optimizer steps in ", layout.step, " steps");
  schedule = config.lr_schedule;
  if (schedule.kind == was.kind && !schedule.decay_steps) schedule.decay_steps = was.decay_steps;
  schedule = resolve_decay_steps(schedule, config.steps);
  const std::string now = describe(schedule), before = describe(was);
  if (now == before) return "";
  return "learning-rate schedule was " + before + ", is " + now +
         " (this run's flags win; t = " + std::to_string(taken) + " optimizer steps continues)";
}

// The step's traffic per phase: the world's communicator and (HSDP) the runner's groups, all in one.
void count_step_traffic(Communicator& world, const std::vector<Communicator*>& groups, StepMetrics& m) {
  for (int p = 0; p < kNumPhases; ++p) {
    m.bytes[p] = world.counters(static_cast<Phase>(p));
    m.backend[p] = world.backend().counters(static_cast<Phase>(p));
    for (Communicator* c : groups) {
      const PhaseCounters& k = c->counters(static_cast<Phase>(p));
      m.bytes[p].calls += k.calls, m.bytes[p].parts += k.parts, m.bytes[p].bytes_sent += k.bytes_sent, m.bytes[p].bytes_recv += k.bytes_recv;
      const BackendCounters& b = c->backend().counters(static_cast<Phase>(p));
      m.backend[p].calls += b.calls, m.backend[p].parts += b.parts, m.backend[p].bytes += b.bytes;
    }
  }
}

}  // namespace

void set_optimizer(TrainConfig& config, OptimizerKind kind) {
  config.runtime.optimizer = kind;
  config.planner.optimizer = kind;
}

TrainResult train_loop(RankContext& ctx, const TrainConfig& config, const PlacementRunnerFactory& make,
                       const std::function<void(const StepMetrics&)>& on_step) {
  TORCH_CHECK(config.steps >= 0, "train: steps must be >= 0");
  TORCH_CHECK(config.model.vocab >= 256, "train: the byte-level corpus needs a vocabulary of at least 256");
  TORCH_CHECK(config.checkpoint_every >= 0, "train: checkpoint_every must be >= 0");
  TORCH_CHECK(config.grad_accum >= 1 && config.grad_accum <= kMaxGradAccum, "train: gradient accumulation needs 1 to ",
              kMaxGradAccum, " micro-batches per step, got ", config.grad_accum);
  if (config.runtime.max_norm != 0) check_max_norm(config.runtime.max_norm, "train");
  if (config.qk_clip_tau != 0) check_qk_clip(config.qk_clip_tau, config.runtime.optimizer, config.model);
  // One fact, one value: the plan is balanced for the optimizer the run steps with.
  TORCH_CHECK(config.planner.optimizer == config.runtime.optimizer, "train: the plan is balanced for ",
              to_string(config.planner.optimizer), " but the run steps with ", to_string(config.runtime.optimizer),
              " (set both with set_optimizer)");
  TORCH_CHECK(config.checkpoint_dir.empty() || runs_on_owner_runtime(config.placement), "train: placement ",
              to_string(config.placement), " does not write checkpoints (owner, reconstruct and alltoall do)");
  TransformerModel model(config.model, config.runtime.precision.output_dtype);
  check_groups(config);  // before any collective
  const ByteCorpus corpus = ByteCorpus::load(config.data);
  const at::Device device = config.runtime.device;
  Communicator comm(ctx.backend);
  TrainConfig run = config;
  // Where this run resumes from, and the checkpoint directory claimed for it (rank 0 holds the
  // lock until the loop ends); a failure on any rank fails every rank, before any step.
  std::string resumed;
  std::unique_ptr<CheckpointDirLock> lock;
  std::vector<std::string> allowed;
  validate(config.lr_schedule);
  LrSchedule schedule = resolve_decay_steps(config.lr_schedule, config.steps);
  int64_t taken = 0;  // t: the optimizer steps taken
  std::string schedule_note;  // what resuming did to the schedule
  std::string error = error_of([&] {
    if (!config.resume_from.empty()) {
      resumed = resolve_checkpoint(config.resume_from);
      const CheckpointLayout layout = read_layout(resumed);
      schedule_note = resume_schedule(config, layout, schedule, taken);
      const SettingsDiff d =
          compare_settings(layout, model_config_json(config.model), optimizers_to_json(config.runtime),
                           precision_to_json(config.runtime.precision));
      if (!d.refused.empty()) {
        std::string all;
        for (const std::string& r : d.refused) all += (all.empty() ? "" : "; ") + r;
        TORCH_CHECK(false, "train: cannot resume from '", resumed, "' with other settings: ", all);
      }
      allowed = d.allowed;
    }
    if (!config.checkpoint_dir.empty() && ctx.rank == 0) {
      lock = std::make_unique<CheckpointDirLock>(config.checkpoint_dir);
      run.check_checkpoint_lock = [held = lock.get()] { held->check_held(); };
      claim_checkpoint_dir(run, resumed);
    }
  });
  fail_together(comm, error, "train: preparing the run");
  std::unique_ptr<PlacementRunner> stepper = make(model, comm, model.init(config.seed, device));
  TrainResult result;
  result.plan_hash = stepper->plan_hash();
  int start = 0;
  if (!config.resume_from.empty()) {
    result.resumed = stepper->load_checkpoint(resumed, config);
    result.resumed.warnings =
        sampler_differences(result.resumed.sampler, sampler_json(config, corpus, ctx.rank, ctx.world_size, result.resumed.step));
    for (const std::string& a : allowed)
      result.resumed.warnings.push_back(a + " (allowed: a learning rate may change on resume; this run's base rate is used)");
    if (!schedule_note.empty()) result.resumed.warnings.push_back(schedule_note);
    result.resumed.lr_schedule = "learning rates: this run's base rates (--lr, --adamw-lr, --group) times the schedule's " +
                                 describe(schedule) + " at t = " + std::to_string(taken) + " optimizer steps taken (lambda " +
                                 lambda_text(lr_lambda(schedule, taken)) + ")";
    TORCH_CHECK(result.resumed.step <= INT32_MAX, "train: checkpoint step ", result.resumed.step, " is out of range");
    start = static_cast<int>(result.resumed.step);
    if (config.on_resume) config.on_resume(result.resumed);
  }
  TORCH_CHECK(!config.full_grads || config.on_full_state, "train: full_grads needs on_full_state");
  TORCH_CHECK(!config.full_state || config.on_full_state, "train: full_state needs on_full_state");
  std::optional<QkClip> qk_clip;
  if (config.qk_clip_tau > 0) qk_clip.emplace(config.model, config.qk_clip_tau, device);
  if (config.on_full_state) {
    const ParamMap params = stepper->full_params();
    std::optional<ParamMap> state;
    if (config.full_state) state = stepper->full_state();
    config.on_full_state(start, nullptr, params, nullptr, state ? &*state : nullptr);
  }
  if (config.record_params) result.initial_params = stepper->full_params();
  for (int step = start; step < config.steps; ++step) {
    StepMetrics m;
    m.step = step + 1;
    comm.reset_counters();
    for (Communicator* c : stepper->communicators()) c->reset_counters();
    const int K = config.grad_accum;
    auto [tokens, targets] = corpus.batch(config.seed, step, ctx.rank, K * config.batch, config.seq);
    if (!device.is_cpu()) tokens = tokens.to(device), targets = targets.to(device);
    auto before_backward = [&] {
      if (config.kill_rank_at_step && config.kill_rank_at_step->first == ctx.rank &&
          config.kill_rank_at_step->second == m.step) {
        kill(getpid(), SIGKILL);  // a rank lost mid-step, for the fault tests
      }
    };
    // The step's stages, in order (docs/architecture.md, "The step as stages"): per micro-batch,
    // forward and backward and (per micro-batch mode) the reduction; after the last one every
    // gradient is reduced to where it is stepped; then the update.
    double loss_sum = 0;
    if (qk_clip) qk_clip->begin_step(model);
    for (int mi = 0; mi < K; ++mi) {
      const auto rows = [&](const at::Tensor& t) { return K == 1 ? t : t.narrow(0, mi * config.batch, config.batch); };
      const PlacementRunner::Gradients g =
          stepper->forward_backward(rows(tokens), rows(targets), before_backward, MicroBatch{mi, K});
      loss_sum = mi == 0 ? g.loss : loss_sum + g.loss;
      m.forward_s += g.forward_s;
      m.backward_s += g.backward_s;
    }
    m.local_loss = K == 1 ? loss_sum : loss_sum / K;
    std::optional<QkLogits> qk_logits;  // QK-clip's statistic, agreed before the update (phase qk_clip)
    if (qk_clip) qk_logits = qk_clip->agree(comm, model, config.runtime.non_finite, m.step);
    std::optional<ParamMap> grads;
    if (config.full_grads) grads = stepper->full_grads();
    m.lr_scheduled = scheduled(schedule);
    m.lr_factor = lr_lambda(schedule, taken);
    stepper->set_lr_factor(m.lr_factor);
    const PlacementRunner::Update u = stepper->update();
    if (!u.skipped) ++taken;  // a skipped step takes no optimizer step, so t stays
    m.optimizer_steps = taken;
    m.optimizer_s = u.optimizer_s;
    m.skipped = u.skipped;
    m.non_finite_parameter = u.non_finite_parameter;
    m.grad_norm = u.grad_norm;
    m.non_finite_norm = u.non_finite_norm;
    if (qk_logits) {  // post-step: q and k rescaled where they are stored; no collective
      m.qk_max_logit = qk_logits->max();
      if (!u.skipped && qk_logits->non_finite_rank < 0) m.qk_clipped_heads = qk_clip->apply(*stepper, *qk_logits);
    }
    if (!config.checkpoint_dir.empty() && config.checkpoint_every > 0 &&
        (m.step % config.checkpoint_every == 0 || m.step == config.steps)) {
      const auto t0 = std::chrono::steady_clock::now();
      const LoopState loop{sampler_json(config, corpus, ctx.rank, ctx.world_size, m.step).dump(),
                           lr_schedule_to_json(schedule, taken).dump()};
      result.checkpoints.push_back(stepper->save_checkpoint(config.checkpoint_dir, m.step, run, loop));
      m.checkpoint_s = seconds_since(t0);
      m.checkpoint = result.checkpoints.back();
    }
    count_step_traffic(comm, stepper->communicators(), m);
    m.loss = mean_over_ranks(comm, {m.local_loss})[0];  // after the snapshot: not part of the step's traffic
    const std::vector<double> slowest = max_over_ranks(comm, {m.forward_s, m.backward_s, m.optimizer_s});
    m.max_forward_s = slowest[0], m.max_backward_s = slowest[1], m.max_optimizer_s = slowest[2];
    m.resident_bytes = stepper->resident_bytes();
    m.peak_gathered_bytes = stepper->peak_gathered_bytes();
    m.peak_accumulation_bytes = stepper->peak_accumulation_bytes();
    if (config.record_params) result.params_per_step.push_back(stepper->full_params());
    if (config.on_full_state) {
      const ParamMap params = stepper->full_params();
      std::optional<ParamMap> state;
      if (config.full_state) state = stepper->full_state();
      config.on_full_state(m.step, &m, params, grads ? &*grads : nullptr, state ? &*state : nullptr);
    }
    if (on_step) on_step(m);
    result.steps.push_back(m);
  }
  result.final_params = stepper->full_params();
  return result;
}

}  // namespace mfsdp
