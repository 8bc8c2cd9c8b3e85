#include "core/trainer.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>

namespace mfsdp {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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

const char* to_string(Placement placement) { return placement == Placement::owner ? "owner" : "reconstruct"; }

Placement placement_from_string(const std::string& name) {
  if (name == "owner") return Placement::owner;
  if (name == "reconstruct") return Placement::reconstruct;
  TORCH_CHECK(false, "placement '", name, "' is not available here (owner, reconstruct; zero1 runs in mfsdp verify; ",
              "alltoall is not built yet; ddp is the oracle of mfsdp verify)");
}

void apply_placement(Placement placement, PlannerOptions& planner) {
  if (placement == Placement::reconstruct) planner.rules = {{"*", Role::even_shard}};
}

TrainResult train_owner(RankContext& ctx, const TrainConfig& config,
                        const std::function<void(const StepMetrics&)>& on_step) {
  TORCH_CHECK(config.steps >= 0, "train: steps must be >= 0");
  TransformerModel model(config.model);
  const ByteCorpus corpus = ByteCorpus::load(config.data);
  TORCH_CHECK(config.model.vocab >= 256, "train: the byte-level corpus needs a vocabulary of at least 256");
  OwnershipPlan plan = make_plan(model.spec(), ctx.world_size, config.planner);
  Communicator comm(ctx.backend);
  const at::Device device = config.runtime.device;
  OwnerRuntime rt(plan, comm, config.runtime, model.init(config.seed, device));
  TrainResult result;
  result.plan_hash = plan.hash();
  for (int step = 0; step < config.steps; ++step) {
    StepMetrics m;
    m.step = step + 1;
    comm.reset_counters();
    auto [tokens, targets] = corpus.batch(config.seed, step, ctx.rank, config.batch, config.seq);
    if (!device.is_cpu()) tokens = tokens.to(device), targets = targets.to(device);

    auto t0 = std::chrono::steady_clock::now();
    at::Tensor x = tokens;
    for (int u = 0; u < rt.num_units(); ++u) {
      ParamMap p = rt.unshard(u);
      x = model.unit_forward(u, x, p, targets);
      x = rt.after_forward(u, x);
    }
    m.forward_s = seconds_since(t0);
    m.local_loss = x.item<double>();

    if (config.kill_rank_at_step && config.kill_rank_at_step->first == ctx.rank &&
        config.kill_rank_at_step->second == m.step) {
      kill(getpid(), SIGKILL);  // a rank lost mid-step, for the fault tests
    }
    t0 = std::chrono::steady_clock::now();
    x.backward();
    m.backward_s = seconds_since(t0);

    t0 = std::chrono::steady_clock::now();
    StepReport report = rt.step();
    m.optimizer_s = seconds_since(t0);
    m.skipped = report.skipped;
    m.non_finite_parameter = report.non_finite_parameter;
    for (int p = 0; p < kNumPhases; ++p) m.bytes[p] = comm.counters(static_cast<Phase>(p));
    m.loss = global_mean(comm, m.local_loss);  // after the snapshot: not part of the step's traffic
    m.resident_bytes = rt.resident_bytes();
    m.peak_gathered_bytes = rt.peak_gathered_bytes();
    if (config.record_params) result.params_per_step.push_back(rt.gather_full_params());
    if (on_step) on_step(m);
    result.steps.push_back(m);
  }
  result.final_params = rt.gather_full_params();
  return result;
}

}  // namespace mfsdp
