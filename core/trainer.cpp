#include "core/trainer.h"

#include "core/checkpoint.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>

namespace mfsdp {
namespace {

// Mean of every rank's loss, summed in rank order (one all-gather, phase `other`).
double global_mean(Communicator& comm, double local) {
  PhaseScope phase(comm, Phase::other);
  at::Tensor mine = at::tensor({local}, at::TensorOptions().dtype(at::kDouble)).to(comm.control_device());
  at::Tensor all = at::empty({comm.world_size()}, comm.control_options(at::kDouble));
  comm.allgather(all, mine)->wait();
  all = all.cpu();
  double sum = 0;
  for (int r = 0; r < comm.world_size(); ++r) sum += all[r].item<double>();
  return sum / comm.world_size();
}

}  // namespace

const char* to_string(Placement placement) {
  switch (placement) {
    case Placement::owner: return "owner";
    case Placement::reconstruct: return "reconstruct";
    case Placement::alltoall: return "alltoall";
    case Placement::zero1: return "zero1";
    case Placement::ddp: return "ddp";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown Placement");
}

Placement placement_from_string(const std::string& name) {
  for (Placement p : {Placement::owner, Placement::reconstruct, Placement::alltoall, Placement::zero1, Placement::ddp})
    if (name == to_string(p)) return p;
  TORCH_CHECK(false, "placement '", name, "' is not available (owner, reconstruct, alltoall, zero1, ddp)");
}

bool runs_on_owner_runtime(Placement placement) {
  return placement == Placement::owner || placement == Placement::reconstruct || placement == Placement::alltoall;
}

void apply_placement(Placement placement, TrainConfig& config) {
  config.placement = placement;
  if (placement == Placement::reconstruct || placement == Placement::alltoall) {
    config.planner.rules = {{"*", Role::even_shard}};
    config.runtime.even_matrix_step =
        placement == Placement::reconstruct ? EvenMatrixStep::allgather : EvenMatrixStep::alltoall;
  }
}

void check_groups(const TrainConfig& config) {
  std::vector<std::string> names;
  for (const ParamSpec& p : transformer_spec(config.model).params) names.push_back(p.name);
  check_groups(config.runtime, names);
}

std::string Stepper::save_checkpoint(const std::string&, int64_t, const TrainConfig& config, const std::string&) {
  TORCH_CHECK(false, "train: placement ", to_string(config.placement),
              " does not write checkpoints (owner, reconstruct and alltoall do)");
}

ResumeInfo Stepper::load_checkpoint(const std::string&, const TrainConfig& config) {
  TORCH_CHECK(false, "train: placement ", to_string(config.placement),
              " does not resume from checkpoints (owner, reconstruct, alltoall and ddp do)");
}

nlohmann::json model_config_json(const TransformerConfig& m) {
  return {{"name", m.name}, {"vocab", m.vocab}, {"hidden", m.hidden}, {"intermediate", m.intermediate},
          {"layers", m.layers}, {"heads", m.heads}, {"kv_heads", m.kv_heads}, {"qkv_bias", m.qkv_bias},
          {"dtype", c10::toString(m.dtype)}};
}

namespace {

// This rank's data sampler: batches are a pure function of (seed, step, rank), so its state is
// the next step and what the batches are drawn from.
nlohmann::json sampler_json(const TrainConfig& config, const ByteCorpus& corpus, int rank, int world_size, int64_t next_step) {
  return {{"seed", config.seed}, {"next_step", next_step}, {"rank", rank}, {"world_size", world_size},
          {"batch", config.batch}, {"seq", config.seq}, {"corpus", corpus.path()}, {"corpus_bytes", corpus.size()},
          {"corpus_crc32", corpus.crc32()}};
}

// Differences between the sampler a checkpoint recorded and this run's (allowed, but said).
std::vector<std::string> sampler_differences(const std::string& recorded_text, const nlohmann::json& now) {
  std::vector<std::string> out;
  nlohmann::json recorded;
  try {
    recorded = nlohmann::json::parse(recorded_text);
  } catch (const std::exception&) {
    return {"the checkpoint's sampler state is unreadable"};
  }
  for (const char* key : {"seed", "batch", "seq", "corpus_bytes", "corpus_crc32"}) {
    if (!recorded.contains(key)) out.push_back(std::string("the checkpoint does not record the sampler's ") + key);
    else if (recorded[key] != now[key])
      out.push_back(std::string("sampler ") + key + " was " + recorded[key].dump() + ", is " + now[key].dump() +
                    " (the data stream differs from an uninterrupted run)");
  }
  return out;
}

}  // namespace

TrainResult train_loop(RankContext& ctx, const TrainConfig& config, const StepperFactory& make,
                       const std::function<void(const StepMetrics&)>& on_step) {
  TORCH_CHECK(config.steps >= 0, "train: steps must be >= 0");
  TORCH_CHECK(config.model.vocab >= 256, "train: the byte-level corpus needs a vocabulary of at least 256");
  TORCH_CHECK(config.checkpoint_every >= 0, "train: checkpoint_every must be >= 0");
  TORCH_CHECK(config.checkpoint_dir.empty() || runs_on_owner_runtime(config.placement), "train: placement ",
              to_string(config.placement), " does not write checkpoints (owner, reconstruct and alltoall do)");
  TransformerModel model(config.model);
  check_groups(config);  // before any collective
  const ByteCorpus corpus = ByteCorpus::load(config.data);
  const at::Device device = config.runtime.device;
  Communicator comm(ctx.backend);
  std::unique_ptr<Stepper> stepper = make(model, comm, model.init(config.seed, device));
  TrainResult result;
  result.plan_hash = stepper->plan_hash();
  int start = 0;
  if (!config.resume_from.empty()) {
    result.resumed = stepper->load_checkpoint(resolve_checkpoint(config.resume_from), config);
    result.resumed.warnings =
        sampler_differences(result.resumed.sampler, sampler_json(config, corpus, ctx.rank, ctx.world_size, result.resumed.step));
    TORCH_CHECK(result.resumed.step <= INT32_MAX, "train: checkpoint step ", result.resumed.step, " is out of range");
    start = static_cast<int>(result.resumed.step);
    if (config.on_resume) config.on_resume(result.resumed);
  }
  for (int step = start; step < config.steps; ++step) {
    StepMetrics m;
    m.step = step + 1;
    comm.reset_counters();
    auto [tokens, targets] = corpus.batch(config.seed, step, ctx.rank, config.batch, config.seq);
    if (!device.is_cpu()) tokens = tokens.to(device), targets = targets.to(device);
    auto before_backward = [&] {
      if (config.kill_rank_at_step && config.kill_rank_at_step->first == ctx.rank &&
          config.kill_rank_at_step->second == m.step) {
        kill(getpid(), SIGKILL);  // a rank lost mid-step, for the fault tests
      }
    };
    const Stepper::Result r = stepper->step(tokens, targets, before_backward);
    m.local_loss = r.loss;
    m.forward_s = r.forward_s;
    m.backward_s = r.backward_s;
    m.optimizer_s = r.optimizer_s;
    m.skipped = r.skipped;
    m.non_finite_parameter = r.non_finite_parameter;
    if (!config.checkpoint_dir.empty() && config.checkpoint_every > 0 &&
        (m.step % config.checkpoint_every == 0 || m.step == config.steps)) {
      const auto t0 = std::chrono::steady_clock::now();
      result.checkpoints.push_back(stepper->save_checkpoint(
          config.checkpoint_dir, m.step, config, sampler_json(config, corpus, ctx.rank, ctx.world_size, m.step).dump()));
      m.checkpoint_s = seconds_since(t0);
      m.checkpoint = result.checkpoints.back();
    }
    for (int p = 0; p < kNumPhases; ++p) m.bytes[p] = comm.counters(static_cast<Phase>(p));
    m.loss = global_mean(comm, m.local_loss);  // after the snapshot: not part of the step's traffic
    m.resident_bytes = stepper->resident_bytes();
    m.peak_gathered_bytes = stepper->peak_gathered_bytes();
    if (config.record_params) result.params_per_step.push_back(stepper->full_params());
    if (on_step) on_step(m);
    result.steps.push_back(m);
  }
  result.final_params = stepper->full_params();
  return result;
}

namespace {

// The owner runtime behind the common loop.
class OwnerStepper : public Stepper {
 public:
  OwnerStepper(const TransformerModel& model, Communicator& comm, const TrainConfig& config, const ParamMap& init)
      : model_(model), plan_(make_plan(model.spec(), comm.world_size(), config.planner)), rt_(plan_, comm, config.runtime, init) {}

  Result step(const at::Tensor& tokens, const at::Tensor& targets, const std::function<void()>& before_backward) override {
    Result r;
    auto t0 = std::chrono::steady_clock::now();
    at::Tensor x = tokens;
    for (int u = 0; u < rt_.num_units(); ++u) {
      ParamMap p = rt_.unshard(u);
      x = model_.unit_forward(u, x, p, targets);
      x = rt_.after_forward(u, x);
    }
    r.forward_s = seconds_since(t0);
    r.loss = x.item<double>();
    before_backward();
    t0 = std::chrono::steady_clock::now();
    x.backward();
    r.backward_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const StepReport report = rt_.step();
    r.optimizer_s = seconds_since(t0);
    r.skipped = report.skipped;
    r.non_finite_parameter = report.non_finite_parameter;
    return r;
  }
  ParamMap full_params() override { return rt_.gather_full_params(); }
  std::string save_checkpoint(const std::string& root, int64_t step, const TrainConfig& config,
                              const std::string& sampler) override {
    CheckpointContext ctx;
    ctx.step = step;
    ctx.placement = to_string(config.placement);
    ctx.model = model_config_json(config.model);
    ctx.optimizers = optimizers_to_json(config.runtime);
    ctx.sampler = nlohmann::json::parse(sampler);
    const auto& kill_at = config.kill_rank_in_checkpoint;
    if (kill_at && kill_at->first == rt_.comm().rank() && kill_at->second == step)
      ctx.after_rank_file = [] { kill(getpid(), SIGKILL); };  // a rank lost mid-checkpoint, for the fault tests
    return mfsdp::save_checkpoint(root, rt_, ctx);
  }
  ResumeInfo load_checkpoint(const std::string& checkpoint, const TrainConfig&) override {
    const LoadReport r = mfsdp::load_checkpoint(checkpoint, rt_);
    ResumeInfo info;
    info.checkpoint = checkpoint;
    info.step = r.step;
    info.written_world_size = r.written_world_size;
    info.same_layout = r.same_layout;
    info.bytes_read = r.bytes_read;
    info.bytes_total = r.bytes_total;
    info.sampler = r.sampler.dump();
    return info;
  }
  int64_t resident_bytes() const override { return rt_.resident_bytes(); }
  int64_t peak_gathered_bytes() const override { return rt_.peak_gathered_bytes(); }
  uint64_t plan_hash() const override { return plan_.hash(); }

 private:
  const TransformerModel& model_;
  OwnershipPlan plan_;  // the runtime keeps a reference: declared first, outlives it
  OwnerRuntime rt_;
};

}  // namespace

TrainResult train_owner(RankContext& ctx, const TrainConfig& config,
                        const std::function<void(const StepMetrics&)>& on_step) {
  TORCH_CHECK(runs_on_owner_runtime(config.placement), "train: placement ", to_string(config.placement),
              " holds full replicas and does not run on the owner runtime (use train_placement, reference/placements.h)");
  return train_loop(
      ctx, config,
      [&](const TransformerModel& model, Communicator& comm, const ParamMap& init) {
        return std::make_unique<OwnerStepper>(model, comm, config, init);
      },
      on_step);
}

}  // namespace mfsdp
