#include "harness/placements.h"

#include "core/io/checkpoint.h"
#include "core/plan/presets.h"
#include "core/train/owner_placement.h"
#include "oracle/ddp_oracle.h"
#include "reference/alltoall.h"
#include "reference/reconstruct.h"
#include "reference/zero1.h"

#include <c10/util/Exception.h>

namespace mfsdp {
namespace {

// The oracle behind the loop, resumable: every rank reads the whole consolidated state (parameters
// and optimizer state) of a checkpoint written by any owner-runtime placement at any world size.
class DdpRunner final : public DdpOracle {
 public:
  DdpRunner(const TransformerModel& model, Communicator& comm, const RuntimeOptions& options, const ParamMap& init)
      : DdpOracle(model, comm, options, init, {options.precision, options.replicas, options.grad_reduce, options.max_norm}), rank_(comm.rank()) {}

  ResumeInfo load_checkpoint(const std::string& checkpoint, const TrainConfig&) override {
    FullState full = read_full_state(checkpoint);
    for (const std::string& name : names()) {
      auto it = full.params.find(name);
      TORCH_CHECK(it != full.params.end(), "checkpoint: '", checkpoint, "' was written for a different model: it has no parameter '",
                  name, "'");
      at::Tensor p = params().at(name).detach();
      TORCH_CHECK(it->second.sizes() == p.sizes() && it->second.scalar_type() == p.scalar_type(), "checkpoint: '", checkpoint,
                  "' was written for a different model: parameter '", name, "' is ", it->second.sizes(), " ",
                  it->second.scalar_type(), " there but ", p.sizes(), " ", p.scalar_type(), " here");
      p.copy_(it->second);
      TensorOptimizer& opt = optimizer(name);
      auto st = full.optimizers.find(name);
      if (st == full.optimizers.end()) {
        TORCH_CHECK(full.step == 0, "checkpoint: '", checkpoint, "' was written after step ", full.step,
                    " but holds no optimizer state for '", name, "'");
        continue;
      }
      TORCH_CHECK(st->second.kind == opt.kind(), "checkpoint: '", checkpoint, "' stepped '", name, "' with ",
                  to_string(st->second.kind), "; this run steps it with ", to_string(opt.kind()), " (pass the same --optimizer)");
      for (auto& [_, t] : st->second.state) t = t.to(p.device());
      opt.load_state(st->second.state, st->second.scalars, p.sizes().vec());
    }
    TORCH_CHECK(full.params.size() == names().size(), "checkpoint: '", checkpoint,
                "' was written for a different model: it has parameters this model lacks");
    ResumeInfo info;
    info.checkpoint = checkpoint;
    info.step = full.step;
    info.written_world_size = full.layout.world_size();
    info.bytes_read = info.bytes_total = 0;
    for (const FileManifest& m : full.layout.manifest) info.bytes_read += m.bytes, info.bytes_total += m.bytes;
    info.bytes_verified = info.bytes_total;  // every rank verified every file
    const int rank = rank_;
    info.sampler = full.layout.ranks[rank < full.layout.world_size() ? rank : 0].sampler.dump();
    return info;
  }

 private:
  int rank_;
};

}  // namespace

void apply_placement(Placement placement, TrainConfig& config) {
  // The replicas (zero1, ddp) never recompute; as the oracle, ddp is the control of recomputing runs.
  TORCH_CHECK(!config.runtime.activation_checkpointing || runs_on_owner_runtime(placement),
              "--activation-checkpointing: placement ", to_string(placement),
              " holds full replicas and does not recompute (owner, reconstruct and alltoall do)");
  TORCH_CHECK(config.runtime.comm_groups == CommGroups::unit || runs_on_owner_runtime(placement),
              "--comm-groups model: placement ", to_string(placement),
              " holds full replicas and has no units to group (owner, reconstruct and alltoall do)");
  config.placement = placement;
  if (placement == Placement::reconstruct || placement == Placement::alltoall) {
    config.planner.rules = {{"*", Role::even_shard}};
    config.runtime.even_matrix_step = placement == Placement::reconstruct ? make_reconstruct_step : make_alltoall_step;
  }
}


PlannerOptions planner_options_for(Placement placement, const PlannerOptions& planner) {
  return placement == Placement::zero1 ? zero1_planner_options(planner) : planner;
}

std::unique_ptr<PlacementRunner> make_runner(const TransformerModel& model, Communicator& comm, const TrainConfig& config,
                                             const ParamMap& init, RankContext* ctx) {
  switch (config.placement) {
    case Placement::owner:
    case Placement::reconstruct:
    case Placement::alltoall: return make_owner_runner(model, comm, config, init, ctx);
    case Placement::zero1:
      TORCH_CHECK(config.runtime.replicas == 1, "train: the zero1 placement has no HSDP mode (--replicas ", config.runtime.replicas, ")");
      return make_zero1_runner(model, comm, config, init);
    case Placement::ddp: return std::make_unique<DdpRunner>(model, comm, config.runtime, init);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown Placement");
}

TrainResult train_placement(RankContext& ctx, const TrainConfig& config,
                            const std::function<void(const StepMetrics&)>& on_step) {
  return train_loop(
      ctx, config,
      [&](const TransformerModel& model, Communicator& comm, const ParamMap& init) {
        return make_runner(model, comm, config, init, &ctx);
      },
      on_step);
}

TransformerConfig bench_model_config(const std::string& name) {
  TransformerConfig m = preset_config("tiny");
  m.name = name;
  if (name == "small") {
    m.hidden = 128;
    m.layers = 4;
    m.intermediate = 512;
  } else {
    TORCH_CHECK(name == "tiny", "bench_step: unknown model '", name, "' (tiny, small)");
  }
  return m;
}

TrainConfig bench_train_config(const std::string& placement, const std::string& model) {
  TrainConfig c;  // the `mfsdp train` defaults (training_defaults() for every optimizer)
  c.model = bench_model_config(model);
  c.batch = 4;
  c.seq = 32;
  if (placement.rfind("hsdp2_", 0) == 0) {
    c.runtime.replicas = 2;
    c.runtime.step_mode = placement == "hsdp2_owner_dedup" ? StepMode::dedup : StepMode::replicated;
    apply_placement(placement == "hsdp2_reconstruct" ? Placement::reconstruct : Placement::owner, c);
    return c;
  }
  apply_placement(placement_from_string(placement), c);
  return c;
}

}  // namespace mfsdp
