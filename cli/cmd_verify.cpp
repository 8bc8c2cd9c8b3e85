// `mfsdp verify`: the owner-shaped runtime and the DDP full-matrix oracle side by side on the
// embedded default, compared bit for bit after every step; exit code 1 when they differ.
#include "cli/commands.h"
#include "cli/model_options.h"
#include "core/dist/mesh.h"
#include "core/dist/launch_env.h"
#include "core/dist/rank_agreement.h"
#include "harness/trajectory.h"
#include "harness/placements.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace mfsdp::cli {
namespace {

struct VerifyArgs {
  int world_size = 2;
  std::string placement = "owner";
  std::string planner = "balanced";
  std::string tail_policy = "even";
  std::string optimizer = "muon";
  int steps = 10;
  int64_t batch = 2, seq = 16;
  uint64_t seed = 0;
  bool json = false;
  bool fast = false;
  int timeout_s = 60;
  std::vector<std::string> groups;
  std::string param_dtype = "fp32", reduce_dtype = "fp32", output_dtype;
  int replicas = 1;
  StepMode step_mode = StepMode::replicated;
  bool tie_embeddings = false;
  MoeArgs moe;
};

int run_verify(const VerifyArgs& a) {
  TrainConfig config;
  try {
    apply_placement(placement_from_string(a.placement), config);
    config.planner.planner = planner_kind_from_string(a.planner);
    TORCH_CHECK(config.planner.planner != PlannerKind::explicit_assignment, "verify: --planner explicit is for tests");
    config.planner.tail_policy = tail_policy_from_string(a.tail_policy);
    config.planner.optimizer = config.runtime.optimizer = optimizer_kind_from_string(a.optimizer);
    for (const std::string& g : a.groups) config.runtime.groups.push_back(param_group_from_string(g));
    check_groups(config);
    // The oracle runs under the same policy (fp32 masters, the same compute copies).
    config.runtime.precision = precision_from_flags(a.param_dtype, a.reduce_dtype, a.output_dtype);
    // Launched (torchrun, Slurm, mfsdp launch): the environment's world size, not -w.
    const std::optional<LaunchEnv> launched = read_launch_env();
    mesh_shape(launched ? launched->world_size : a.world_size, a.replicas);  // throws unless R divides W
    config.runtime.replicas = a.replicas;  // the oracle averages in the same mesh order
    config.model.tie_embeddings = a.tie_embeddings;
    apply_moe(a.moe, config.model, config.planner, &config.runtime);
    config.runtime.step_mode = a.step_mode;
  } catch (const c10::Error& e) {
    throw UsageError(e.what_without_backtrace());
  }
  config.steps = a.steps;
  config.batch = a.batch;
  config.seq = a.seq;
  config.seed = a.seed;
  if (a.fast) config.runtime.reduce = ReduceMode::fast;
  bool equal_everywhere = true;
  bool passed = true;  // bitwise equal; with --fast: within the tolerance model
  auto body = [&](RankContext& ctx) {
    const Trajectory oracle = run_oracle(ctx, config);
    const Trajectory owner = run_recorded(ctx, config);
    const Comparison cmp = compare(oracle, owner);
    // Fast mode is judged by its tolerance model over the steps the model covers.
    const FastDeviation dev = fast_deviation(oracle, owner, kFastToleranceSteps);
    // Every rank's verdict and worst differences, to rank 0.
    constexpr int kFields = 5;
    at::Tensor mine = at::tensor({cmp.bitwise_equal ? 1.0 : 0.0, cmp.max_abs_diff, static_cast<double>(cmp.max_ulp),
                                  dev.max_param_abs, dev.max_loss_rel},
                                 at::TensorOptions().dtype(at::kDouble));
    at::Tensor all = at::empty({kFields * ctx.world_size}, at::TensorOptions().dtype(at::kDouble));
    ctx.backend->_allgather_base(all, mine)->wait();
    Communicator comm(ctx.backend);
    const std::vector<double> loss_owner = mean_over_ranks(comm, owner.local_losses);
    const std::vector<double> loss_oracle = mean_over_ranks(comm, oracle.local_losses);
    bool equal = true;
    double max_abs = 0, max_ulp = 0;
    FastDeviation worst;
    for (int r = 0; r < ctx.world_size; ++r) {
      equal = equal && all[kFields * r].item<double>() == 1.0;
      max_abs = std::max(max_abs, all[kFields * r + 1].item<double>());
      max_ulp = std::max(max_ulp, all[kFields * r + 2].item<double>());
      worst.max_param_abs = std::max(worst.max_param_abs, all[kFields * r + 3].item<double>());
      worst.max_loss_rel = std::max(worst.max_loss_rel, all[kFields * r + 4].item<double>());
    }
    const FastTolerance tol = fast_tolerance(config.runtime.optimizer, config.runtime.precision.reduce_dtype);
    const bool within = worst.within(tol);
    if (!cmp.bitwise_equal && !a.fast) {
      std::fprintf(stderr, "verify: rank %d: first difference at step %d in %s: %s\n", ctx.rank, cmp.first_bad_step,
                   cmp.first_bad.c_str(), cmp.detail.c_str());
    }
    if (ctx.rank != 0) return;
    equal_everywhere = equal;
    passed = a.fast ? within : equal;
    if (a.json) {
      nlohmann::ordered_json j{{"bitwise_equal", equal}, {"max_abs_diff", max_abs}, {"max_ulp", max_ulp},
                               {"steps", a.steps}, {"loss_runtime", loss_owner}, {"loss_oracle", loss_oracle},
                               {"world_size", ctx.world_size}, {"planner", a.planner}, {"tail_policy", a.tail_policy},
                               {"optimizer", a.optimizer}, {"placement", a.placement},
                               {"reduce", a.fast ? "fast" : "deterministic"}};
      if (a.fast)
        j["fast_tolerance"] = {{"steps_judged", std::min(a.steps, kFastToleranceSteps)},
                               {"max_param_abs", worst.max_param_abs}, {"bound_param_abs", tol.max_param_abs},
                               {"max_loss_rel", worst.max_loss_rel}, {"bound_loss_rel", tol.max_loss_rel},
                               {"within", within}};
      for (int p = 0; p < kNumPhases; ++p) {
        const char* name = to_string(static_cast<Phase>(p));
        j["bytes"]["runtime"][name] = {{"calls", owner.last_step_bytes[p].calls},
                                       {"bytes_sent", owner.last_step_bytes[p].bytes_sent},
                                       {"bytes_recv", owner.last_step_bytes[p].bytes_recv}};
        j["bytes"]["oracle"][name] = {{"calls", oracle.last_step_bytes[p].calls},
                                      {"bytes_sent", oracle.last_step_bytes[p].bytes_sent},
                                      {"bytes_recv", oracle.last_step_bytes[p].bytes_recv}};
      }
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::printf("verify: placement %s (planner %s, tail %s) vs DDP full-matrix oracle, %s, precision %s, W=%d%s, %d steps\n",
                a.placement.c_str(), a.planner.c_str(), a.tail_policy.c_str(), a.optimizer.c_str(),
                to_string(config.runtime.precision).c_str(), ctx.world_size,
                a.replicas > 1 ? (" = " + std::to_string(a.replicas) + " replicas x " + std::to_string(ctx.world_size / a.replicas) +
                                  " (" + to_string(a.step_mode) + " step)").c_str() : "",
                a.steps);
    std::printf("%5s %22s %22s\n", "step", "loss (runtime)", "loss (oracle)");
    for (size_t s = 0; s < loss_owner.size(); ++s)
      std::printf("%5zu %22.17g %22.17g%s\n", s + 1, loss_owner[s], loss_oracle[s], loss_owner[s] == loss_oracle[s] ? "" : "  DIFFERS");
    std::printf("bytes in the last step (rank 0, sent): %s unshard %lld, grad_reduce %lld, optimizer_step %lld | "
                "oracle grad_reduce %lld, optimizer_step %lld\n", a.placement.c_str(),
                static_cast<long long>(owner.last_step_bytes[0].bytes_sent), static_cast<long long>(owner.last_step_bytes[1].bytes_sent),
                static_cast<long long>(owner.last_step_bytes[2].bytes_sent), static_cast<long long>(oracle.last_step_bytes[1].bytes_sent),
                static_cast<long long>(oracle.last_step_bytes[2].bytes_sent));
    std::printf("%s: every parameter after every step and every loss %s (max |diff| %g, max ULP %g)\n",
                equal ? "BITWISE EQUAL" : "NOT EQUAL", equal ? "match" : "do not all match", max_abs, max_ulp);
    if (a.fast)
      std::printf("fast mode: %s its tolerance model over the first %d step(s): max |weight diff| %.3g (bound %.3g), "
                  "max relative loss diff %.3g (bound %.3g)%s\n",
                  within ? "WITHIN" : "OUTSIDE", std::min(a.steps, kFastToleranceSteps), worst.max_param_abs,
                  tol.max_param_abs, worst.max_loss_rel, tol.max_loss_rel,
                  a.steps > kFastToleranceSteps ? "; later steps are reported above, not judged" : "");
  };
  RanksOptions ranks;
  ranks.world_size = a.world_size;
  ranks.timeout = std::chrono::seconds(a.timeout_s);
  ranks.seed = a.seed;
  if (auto env = read_launch_env()) run_as_launched_rank(*env, ranks, body);
  else run_ranks_as_threads(ranks, body);
  (void)equal_everywhere;
  return passed ? kExitOk : kExitFailure;
}

}  // namespace

void add_verify_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("verify", "Run the owner-shaped runtime and the DDP oracle side by side; compare bit for bit");
  auto a = std::make_shared<VerifyArgs>();
  cmd->add_option("-w,--world-size", a->world_size, "Ranks (threads)")->check(CLI::Range(1, 64));
  cmd->add_option("--placement", a->placement, "owner | reconstruct (FSDP2 + Muon) | alltoall (DistMuon) | zero1 (ZeRO-1 owner) | ddp (oracle vs itself)");
  cmd->add_option("--planner", a->planner, "round_robin | greedy_bytes | greedy_cost | balanced");
  cmd->add_option("--tail-policy", a->tail_policy, "even | owner");
  cmd->add_option("--optimizer", a->optimizer, "muon | shampoo | soap | adamw (matrix optimizer; the rest uses AdamW)");
  cmd->add_option("--steps", a->steps, "Steps")->check(CLI::Range(1, 100000));
  cmd->add_option("--batch", a->batch, "Sequences per rank")->check(CLI::Range(1, 4096));
  cmd->add_option("--seq", a->seq, "Tokens per sequence")->check(CLI::Range(1, 8192));
  cmd->add_option("--seed", a->seed, "Seed of weights and batches (0 to 2^64-1)")->check(seed_validator());
  cmd->add_option("--timeout-s", a->timeout_s, "Seconds before a collective fails")->check(CLI::Range(1, 3600));
  cmd->add_option("--group", a->groups, "PATTERN:lr=X:wd=Y — a parameter group (glob over names; repeatable)");
  cmd->add_flag("--tie-embeddings", a->tie_embeddings, "The output head reuses the token embedding, as train");
  add_moe_options(cmd, a->moe);
  cmd->add_option("--replicas", a->replicas, "HSDP: R replica groups of W/R ranks, as train")->check(CLI::Range(1, 64));
  add_enum_option(cmd, "--step-mode", a->step_mode, kStepModeNames, "HSDP: replicated | dedup, as train");
  cmd->add_option("--param-dtype", a->param_dtype, "fp32 | bf16: compute copies over fp32 masters, as train (oracle and runtime alike)");
  cmd->add_option("--reduce-dtype", a->reduce_dtype, "fp32 | bf16: gradients on the wire, as train");
  cmd->add_option("--output-dtype", a->output_dtype, "fp32 | bf16: unit outputs, as train");
  cmd->add_flag("--fast", a->fast, "Runtime uses the fast (native reduce) gradient reduction: judged by its tolerance model (exit 0 within it)");
  cmd->add_flag("--json", a->json, "One JSON object: bitwise_equal, max_abs_diff, max_ulp, steps, loss_runtime, "
                                   "loss_oracle, world_size, planner, optimizer, placement, bytes");
  cmd->callback([&run, a] { run = [a] { return run_verify(*a); }; });
}

}  // namespace mfsdp::cli
