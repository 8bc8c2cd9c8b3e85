// `mfsdp verify`: a placement and the DDP full-matrix oracle side by side on the embedded default,
// compared bit for bit after every step (harness/verify.h); exit code 1 when they differ. Flags
// shared with train, plan and simulate: cli/run_options.h.
#include "cli/commands.h"
#include "cli/run_options.h"
#include "core/dist/launcher.h"
#include "harness/placements.h"
#include "harness/verify.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace mfsdp::cli {
namespace {

struct VerifyArgs {
  int world_size = 2;
  std::string placement = "owner";
  RunOptions run;
  StepArgs step = [] {
    StepArgs s;
    s.steps = 10, s.batch = 2, s.seq = 16;
    return s;
  }();
  bool json = false;
};

nlohmann::ordered_json phase_bytes(const std::array<PhaseCounters, kNumPhases>& bytes) {
  nlohmann::ordered_json j;
  for (int p = 0; p < kNumPhases; ++p)
    j[to_string(static_cast<Phase>(p))] = {{"calls", bytes[p].calls}, {"parts", bytes[p].parts}, {"bytes_sent", bytes[p].bytes_sent},
                                           {"bytes_recv", bytes[p].bytes_recv}};
  return j;
}

void report(const VerifyArgs& a, const TrainConfig& config, int world_size, const VerifyVerdict& v) {
  const int judged = std::min(a.step.steps, kFastToleranceSteps);
  if (a.json) {
    nlohmann::ordered_json j{{"bitwise_equal", v.bitwise_equal}, {"max_abs_diff", v.max_abs_diff}, {"max_ulp", v.max_ulp},
                             {"steps", a.step.steps}, {"loss_runtime", v.loss_runtime}, {"loss_oracle", v.loss_oracle},
                             {"world_size", world_size}, {"planner", a.run.planner}, {"tail_policy", a.run.tail_policy},
                             {"optimizer", a.run.optimizer}, {"placement", a.placement},
                             {"reduce", a.run.fast ? "fast" : "deterministic"}, {"grad_accum", a.step.grad_accum},
                             {"grad_reduce", to_string(a.step.grad_reduce)}, {"unshard", a.run.unshard},
                             {"comm_groups", name_in(kCommGroupsNames, a.run.comm_groups)}};
    if (a.step.max_norm) {
      j["max_norm"] = *a.step.max_norm;
      j["grad_norm_runtime"] = v.grad_norm_runtime;
      j["grad_norm_oracle"] = v.grad_norm_oracle;
    }
    if (a.step.qk_clip_tau) {
      j["qk_clip_tau"] = *a.step.qk_clip_tau;
      j["qk_max_logit_runtime"] = v.qk_max_logit_runtime, j["qk_max_logit_oracle"] = v.qk_max_logit_oracle;
      j["qk_clipped_heads_runtime"] = v.qk_clipped_runtime, j["qk_clipped_heads_oracle"] = v.qk_clipped_oracle;
    }
    if (a.run.fast)
      j["fast_tolerance"] = {{"steps_judged", judged}, {"max_param_abs", v.fast.max_param_abs},
                             {"bound_param_abs", v.tolerance.max_param_abs}, {"max_loss_rel", v.fast.max_loss_rel},
                             {"bound_loss_rel", v.tolerance.max_loss_rel}, {"within", v.within_tolerance()}};
    j["bytes"]["runtime"] = phase_bytes(v.runtime_bytes);
    j["bytes"]["oracle"] = phase_bytes(v.oracle_bytes);
    std::cout << j.dump(2) << "\n";
    return;
  }
  const RuntimeOptions& r = config.runtime;
  std::printf("verify: placement %s (planner %s, tail %s) vs DDP full-matrix oracle, %s, precision %s, W=%d%s, %d steps\n",
              a.placement.c_str(), a.run.planner.c_str(), a.run.tail_policy.c_str(), describe_optimizer(r).c_str(),
              to_string(r.precision).c_str(), world_size,
              r.replicas > 1 ? (" = " + std::to_string(r.replicas) + " replicas x " + std::to_string(world_size / r.replicas) + " (" +
                                to_string(r.step_mode) + " step)").c_str()
                             : "",
              a.step.steps);
  if (a.step.grad_accum > 1)
    std::printf("gradient accumulation: %d micro-batches of %lld sequence(s) per rank and step, %s reduction\n", a.step.grad_accum,
                static_cast<long long>(a.step.batch), to_string(a.step.grad_reduce));
  if (a.step.max_norm)
    std::printf("clipping: every gradient scaled by min(1, %g / (norm + 1e-6)), the norm over all mean gradients (phase "
                "grad_norm)\n", *a.step.max_norm);
  if (a.step.qk_clip_tau)
    std::printf("qk-clip: tau %g; after each update the q and k rows of heads whose largest logit exceeded it scaled by "
                "sqrt(tau / logit) (the largest logit agreed in phase qk_clip)\n", *a.step.qk_clip_tau);
  const bool norms = !v.grad_norm_runtime.empty() && v.grad_norm_runtime.size() == v.grad_norm_oracle.size() &&
                     v.grad_norm_runtime.size() == v.loss_runtime.size();
  const bool qk = !v.qk_max_logit_runtime.empty() && v.qk_max_logit_runtime.size() == v.qk_max_logit_oracle.size() &&
                  v.qk_max_logit_runtime.size() == v.loss_runtime.size();
  std::printf("%5s %22s %22s%s%s\n", "step", "loss (runtime)", "loss (oracle)",
              norms ? "    grad norm (runtime)     grad norm (oracle)" : "", qk ? "   max logit  clipped heads" : "");
  for (size_t s = 0; s < v.loss_runtime.size(); ++s) {
    const bool same = v.loss_runtime[s] == v.loss_oracle[s] &&
                      (!norms || std::memcmp(&v.grad_norm_runtime[s], &v.grad_norm_oracle[s], sizeof(double)) == 0) &&
                      (!qk || (std::memcmp(&v.qk_max_logit_runtime[s], &v.qk_max_logit_oracle[s], sizeof(double)) == 0 &&
                               v.qk_clipped_runtime[s] == v.qk_clipped_oracle[s]));
    std::printf("%5zu %22.17g %22.17g", s + 1, v.loss_runtime[s], v.loss_oracle[s]);
    if (norms) std::printf(" %22.9g %22.9g", v.grad_norm_runtime[s], v.grad_norm_oracle[s]);
    if (qk) std::printf(" %11.6g %14lld", v.qk_max_logit_runtime[s], static_cast<long long>(v.qk_clipped_runtime[s]));
    std::printf("%s\n", same ? "" : "  DIFFERS");
  }
  auto sent = [](const std::array<PhaseCounters, kNumPhases>& b, Phase p) { return static_cast<long long>(b[phase_index(p)].bytes_sent); };
  std::printf("bytes in the last step (rank 0, sent): %s unshard %lld, grad_reduce %lld, grad_norm %lld, qk_clip %lld, optimizer_step %lld "
              "(%lld calls) | oracle grad_reduce %lld, optimizer_step %lld\n",
              a.placement.c_str(), sent(v.runtime_bytes, Phase::unshard), sent(v.runtime_bytes, Phase::grad_reduce),
              sent(v.runtime_bytes, Phase::grad_norm), sent(v.runtime_bytes, Phase::qk_clip), sent(v.runtime_bytes, Phase::optimizer_step),
              static_cast<long long>(v.runtime_bytes[phase_index(Phase::optimizer_step)].calls),
              sent(v.oracle_bytes, Phase::grad_reduce), sent(v.oracle_bytes, Phase::optimizer_step));
  std::printf("%s: every parameter after every step and every loss %s (max |diff| %g, max ULP %g)\n",
              v.bitwise_equal ? "BITWISE EQUAL" : "NOT EQUAL", v.bitwise_equal ? "match" : "do not all match", v.max_abs_diff,
              v.max_ulp);
  if (a.run.fast)
    std::printf("fast mode: %s its tolerance model over the first %d step(s): max |weight diff| %.3g (bound %.3g), "
                "max relative loss diff %.3g (bound %.3g)%s\n",
                v.within_tolerance() ? "WITHIN" : "OUTSIDE", judged, v.fast.max_param_abs, v.tolerance.max_param_abs,
                v.fast.max_loss_rel, v.tolerance.max_loss_rel,
                a.step.steps > kFastToleranceSteps ? "; later steps are reported above, not judged" : "");
}

int run_verify(const VerifyArgs& a) {
  TrainConfig config;
  try {
    apply_run_options(a.run, launched_world_size(a.world_size), config);  // the oracle runs under the same policy and mesh
    apply_placement(placement_from_string(a.placement), config);
    apply_step_options(a.step, config);
    check_model_fits(config.model, launched_world_size(a.world_size) + 1, "verify");  // the oracle's W copies too
  } catch (const c10::Error& e) {
    throw usage_error("verify", e.what_without_backtrace());
  }
  bool passed = true;  // bitwise equal; with --fast: within the tolerance model
  RanksOptions ranks;
  ranks.world_size = a.world_size;
  ranks.timeout = std::chrono::seconds(a.step.timeout_s);
  ranks.seed = a.step.seed;
  ranks.determinism = a.run.fast ? Determinism::fast : Determinism::deterministic;
  const int code = run_ranks(ranks, Launcher::threads, {}, {}, [&](RankContext& ctx) {
    const VerifyVerdict v = verify_against_oracle(ctx, config);
    if (!v.mine.bitwise_equal && !a.run.fast)
      std::fprintf(stderr, "verify: rank %d: first difference at step %d in %s: %s\n", ctx.rank, v.mine.first_bad_step,
                   v.mine.first_bad.c_str(), v.mine.detail.c_str());
    if (ctx.rank != 0) return;
    passed = a.run.fast ? v.within_tolerance() : v.bitwise_equal;
    report(a, config, ctx.world_size, v);
  });
  return code != kExitOk ? code : passed ? kExitOk : kExitFailure;
}

}  // namespace

void add_verify_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("verify", "Run the owner-shaped runtime and the DDP oracle side by side; compare bit for bit");
  auto a = std::make_shared<VerifyArgs>();
  cmd->add_option("-w,--world-size", a->world_size, "Ranks (threads)")->check(CLI::Range(1, 64));
  cmd->add_option("--placement", a->placement, "owner | reconstruct (FSDP2 + Muon) | alltoall (DistMuon) | zero1 (ZeRO-1 owner) | ddp (oracle vs itself)");
  add_run_options(cmd, a->run);
  add_step_options(cmd, a->step, /*min_steps=*/1);
  cmd->add_flag("--json", a->json, "One JSON object: bitwise_equal, max_abs_diff, max_ulp, steps, loss_runtime, "
                                   "loss_oracle, world_size, planner, optimizer, placement, bytes");
  cmd->callback([&run, a] { run = [a] { return run_verify(*a); }; });
}

}  // namespace mfsdp::cli
