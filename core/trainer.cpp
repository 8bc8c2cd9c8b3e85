#include "core/trainer.h"

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

TrainResult train_loop(RankContext& ctx, const TrainConfig& config, const StepperFactory& make,
                       const std::function<void(const StepMetrics&)>& on_step) {
  TORCH_CHECK(config.steps >= 0, "train: steps must be >= 0");
  TORCH_CHECK(config.model.vocab >= 256, "train: the byte-level corpus needs a vocabulary of at least 256");
  TransformerModel model(config.model);
  check_groups(config);  // before any collective
  const ByteCorpus corpus = ByteCorpus::load(config.data);
  const at::Device device = config.runtime.device;
  Communicator comm(ctx.backend);
  std::unique_ptr<Stepper> stepper = make(model, comm, model.init(config.seed, device));
  TrainResult result;
  result.plan_hash = stepper->plan_hash();
  for (int step = 0; step < config.steps; ++step) {
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
