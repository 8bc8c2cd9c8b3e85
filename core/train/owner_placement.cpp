#include "core/train/owner_placement.h"

#include "core/dist/mesh.h"
#include "core/dist/rank_agreement.h"
#include "core/io/checkpoint.h"
#include "core/plan/planner.h"
#include "core/runtime/owner_runtime.h"

#include <c10/util/Exception.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>

namespace mfsdp {
namespace {

// HSDP: every rank must agree on the mesh and the step mode before forming sub-groups, also when
// this rank has none (a rank with another --replicas would otherwise wait for groups that never
// form, or form a plan for another world size).
std::optional<Mesh> checked_mesh(RankContext* ctx, Communicator& world, const TrainConfig& config) {
  const int R = config.runtime.replicas;
  {
    PhaseScope phase(world, Phase::other);
    check_same_settings(world, "train: the HSDP mesh",
                        R <= 1 ? std::string("no HSDP (replicas 1)")
                               : "replicas " + std::to_string(R) + ", step mode " + to_string(config.runtime.step_mode));
  }
  if (R <= 1) return std::nullopt;
  TORCH_CHECK(ctx, "train: rank ", world.rank(), ": --replicas ", R, " needs the rank context to form the mesh");
  return make_mesh(*ctx, R);
}

// The owner runtime behind the common loop.
class OwnerRunner : public PlacementRunner {
 public:
  OwnerRunner(const TransformerModel& model, Communicator& comm, const TrainConfig& config, const ParamMap& init,
              RankContext* ctx)
      : model_(model), world_(comm), mesh_(checked_mesh(ctx, comm, config)),
        plan_(make_plan(model.spec(), mesh_ ? mesh_->shape.shard : comm.world_size(), config.planner)),
        rt_(plan_, mesh_ ? *mesh_->shard : comm, config.runtime, init, mesh_ ? mesh_->replicate.get() : nullptr) {}

  std::vector<Communicator*> communicators() override {
    if (!mesh_) return {};
    return {mesh_->shard.get(), mesh_->replicate.get()};
  }

  Gradients forward_backward(const at::Tensor& tokens, const at::Tensor& targets,
                             const std::function<void()>& before_backward, const MicroBatch& micro_batch) override {
    Gradients r;
    rt_.begin_micro_batch(micro_batch);
    auto t0 = std::chrono::steady_clock::now();
    at::Tensor x = tokens;
    const bool recompute = rt_.options().activation_checkpointing;
    for (int u = 0; u < rt_.num_units(); ++u) {
      if (recompute && is_block(u)) {
        x = rt_.recomputed_forward(u, x, [this, u](const ParamMap& p, const at::Tensor& in) {
          return model_.unit_forward(u, in, p, at::Tensor());  // a block reads no targets
        });
      } else {
        ParamMap p = rt_.unshard(u);
        x = model_.unit_forward(u, x, p, targets);
      }
      x = rt_.after_forward(u, x);
    }
    r.forward_s = seconds_since(t0);
    r.loss = x.is_meta() ? 0.0 : x.item<double>();  // meta: a traced step (sim/trace.h)
    before_backward();
    t0 = std::chrono::steady_clock::now();
    x.backward();  // ends in the runtime's finish_backward: after the last micro-batch owners hold the mean gradients
    r.backward_s = seconds_since(t0);
    return r;
  }
  Update update() override {
    Update r;
    const auto t0 = std::chrono::steady_clock::now();
    const StepReport report = rt_.step();
    r.optimizer_s = seconds_since(t0);
    r.skipped = report.skipped;
    r.non_finite_parameter = report.non_finite_parameter;
    r.grad_norm = report.grad_norm;
    r.non_finite_norm = report.non_finite_norm;
    return r;
  }
  void set_lr_factor(double factor) override { rt_.set_lr_factor(factor); }
  void scale_rows(const std::string& name, const at::Tensor& row_scale) override {
    const ShardSlice* mine = plan_.shard(name).slice_on(rt_.comm().rank());  // the shard group's rank: every replica
    if (!mine) return;
    const at::Tensor held = rt_.local_param(name);
    if (held.defined()) scale_held_rows(held.narrow(0, 0, mine->rows), row_scale, mine->row_begin);
  }
  ParamMap full_params() override { return rt_.gather_full_params(); }
  ParamMap full_grads() override { return rt_.gather_full_grads(); }
  std::string save_checkpoint(const std::string& root, int64_t step, const TrainConfig& config,
                              const LoopState& loop) override {
    CheckpointContext ctx;
    ctx.step = step;
    ctx.placement = to_string(config.placement);
    ctx.model = model_config_json(config.model);
    ctx.optimizers = optimizers_to_json(config.runtime);
    ctx.sampler = nlohmann::json::parse(loop.sampler);
    if (!loop.lr_schedule.empty()) ctx.lr_schedule = nlohmann::json::parse(loop.lr_schedule);
    ctx.allow_rollback = config.checkpoint_rollback;
    ctx.check_lock = config.check_checkpoint_lock;
    const auto& kill_at = config.kill_rank_in_checkpoint;
    if (kill_at && kill_at->first == world_.rank() && kill_at->second == step)
      ctx.after_rank_file = [] { kill(getpid(), SIGKILL); };  // a rank lost mid-checkpoint, for the fault tests
    return mfsdp::save_checkpoint(root, rt_, ctx, &world_);
  }
  ResumeInfo load_checkpoint(const std::string& checkpoint, const TrainConfig&) override {
    return mfsdp::load_checkpoint(checkpoint, rt_, &world_);
  }
  int64_t resident_bytes() const override { return rt_.resident_bytes(); }
  int64_t peak_gathered_bytes() const override { return rt_.peak_gathered_bytes(); }
  int64_t peak_accumulation_bytes() const override { return rt_.peak_accumulation_bytes(); }
  uint64_t plan_hash() const override { return plan_.hash(); }

 private:
  bool is_block(int u) const { return u >= 1 && u <= model_.config().layers; }  // units 0 and L + 1: embed, head
  const TransformerModel& model_;
  Communicator& world_;       // every rank (HSDP: the whole mesh)
  std::optional<Mesh> mesh_;  // HSDP only; its communicators outlive the runtime
  OwnershipPlan plan_;  // the runtime keeps a reference: declared first, outlives it
  OwnerRuntime rt_;
};

}  // namespace

std::unique_ptr<PlacementRunner> make_owner_runner(const TransformerModel& model, Communicator& comm,
                                                   const TrainConfig& config, const ParamMap& init, RankContext* ctx) {
  TORCH_CHECK(runs_on_owner_runtime(config.placement), "train: placement ", to_string(config.placement),
              " holds full replicas and does not run on the owner runtime");
  return std::make_unique<OwnerRunner>(model, comm, config, init, ctx);
}

}  // namespace mfsdp
