// `mfsdp simulate`: a placement's step at a world size, priced on a hardware profile
// (sim/simulate.h, docs/simulate.md): the placement's traced collectives over an α-β model,
// compute from FLOPs, memory from the memory model plus activations.
#include "cli/commands.h"
#include "cli/run_options.h"
#include "core/plan/precision.h"
#include "core/dist/mesh.h"
#include "core/plan/presets.h"
#include "sim/hardware.h"
#include "sim/simulate.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace mfsdp::cli {
namespace {

struct SimulateArgs {
  std::string model;
  std::vector<int> world_sizes;
  std::vector<std::string> placements{"owner", "reconstruct", "alltoall", "zero1", "ddp"};
  std::string profile;
  RunOptions run;    // --planner, --tail-policy, --optimizer, the mesh, the precision policy, --fast
  int64_t batch = 1, seq = 4096;
  int grad_accum = 1;
  GradReduce grad_reduce = GradReduce::per_microbatch;
  double max_norm = 0;
  ScheduleArgs schedule;  // checked and recorded; a schedule changes no collective and no kernel
  bool checkpointing = false;
  bool fused_attention = false;
  std::string baseline_ns = "redundant";
  bool placements_given = false;
  bool json = false;
};

SimConfig make_sim_config(const SimulateArgs& a, Placement placement, int W, const HardwareProfile& profile) {
  SimConfig s;
  TrainConfig& c = s.train;
  c.model = preset_config(a.model);
  // As in `mfsdp plan`: no --param-dtype, everything in the preset's dtype; with it, fp32 masters.
  if (!a.run.param_dtype.empty()) c.model.dtype = c10::kFloat;
  apply_run_options(a.run, W, c);
  // dedup is the owner runtime's mode; the baselines' even-matrix steps run on every replica.
  if (placement != Placement::owner) c.runtime.step_mode = StepMode::replicated;
  c.batch = a.batch;
  c.seq = a.seq;
  c.grad_accum = a.grad_accum;
  c.runtime.grad_reduce = a.grad_reduce;
  c.runtime.max_norm = a.max_norm;
  c.lr_schedule = lr_schedule_of(a.schedule);
  s.placement = placement;
  s.world_size = W;
  s.profile = profile;
  s.activation_checkpointing = a.checkpointing;
  s.fused_attention = a.fused_attention;
  s.reconstruct_ns = a.baseline_ns == "sharded" ? SimConfig::ReconstructNs::sharded : SimConfig::ReconstructNs::redundant;
  return s;
}

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), s >= 10 ? "%.0f" : s >= 0.1 ? "%.1f" : "%.3f", s * 1e3);
  return b;
}

int run_simulate(const SimulateArgs& a) {
  HardwareProfile profile;
  try {  // bad input: an unknown preset or placement, a missing or malformed profile
    profile = load_hardware_profile(a.profile, MFSDP_PROFILE_DIR);
    const c10::ScalarType masters = a.run.param_dtype.empty() ? preset_config(a.model).dtype : c10::kFloat;
    if (a.grad_accum > 1 && masters != c10::kFloat)
      throw UsageError("simulate: --grad-accum " + std::to_string(a.grad_accum) + " accumulates in float32 masters, but " +
                       a.model + " keeps " + c10::toString(masters) + " masters; add --param-dtype bf16 (float32 masters, " +
                       "bf16 compute copies)");
    for (const std::string& p : a.placements) placement_from_string(p);
    for (int W : a.world_sizes) mesh_shape(W, a.run.replicas);
    lr_schedule_of(a.schedule);
    planner_options(a.run);  // the Newton–Schulz flags
  } catch (const c10::Error& e) {
    throw UsageError(std::string("simulate: ") + e.what_without_backtrace());
  }
  if (a.run.replicas > 1 && a.baseline_ns == "sharded")
    throw UsageError("simulate: --baseline-ns sharded is priced for a flat world only, not on an HSDP mesh (--replicas " +
                     std::to_string(a.run.replicas) + ")");
  std::vector<std::string> placements = a.placements;
  if (a.run.replicas > 1) {
    // ZeRO-1 has no HSDP mode: left out of the default list, refused when named.
    const bool zero1 = std::find(placements.begin(), placements.end(), "zero1") != placements.end();
    if (zero1 && a.placements_given)
      throw UsageError("simulate: the zero1 placement has no HSDP mode (--replicas " + std::to_string(a.run.replicas) + ")");
    placements.erase(std::remove(placements.begin(), placements.end(), "zero1"), placements.end());
  }
  nlohmann::json out = nlohmann::json::array();
  std::vector<std::string> assumptions;  // every result's, each once, in order
  for (int W : a.world_sizes) {
    std::vector<SimResult> results;
    for (const std::string& p : placements) {
      results.push_back(simulate(make_sim_config(a, placement_from_string(p), W, profile)));
      for (const std::string& s : results.back().assumptions)
        if (std::find(assumptions.begin(), assumptions.end(), s) == assumptions.end()) assumptions.push_back(s);
    }
    if (a.json) {
      for (const SimResult& r : results) out.push_back(to_json(r));
      continue;
    }
    std::string mesh;
    if (a.run.replicas > 1)
      mesh = " as " + std::to_string(a.run.replicas) + " replica groups of " + std::to_string(W / a.run.replicas) + " (HSDP)";
    std::string step;
    if (a.grad_accum > 1) step += ", " + std::to_string(a.grad_accum) + " micro-batches (" + to_string(a.grad_reduce) + " reduction)";
    if (a.max_norm > 0) step += ", clipped";
    std::printf("%s on %s, W = %d%s (%d node%s), %lld x %lld tokens per rank%s%s\n", a.model.c_str(), profile.name.c_str(), W,
                mesh.c_str(), results[0].nodes, results[0].nodes == 1 ? "" : "s", static_cast<long long>(a.batch),
                static_cast<long long>(a.seq), a.grad_accum > 1 ? " per micro-batch" : "", step.c_str());
    std::printf("  %-24s %8s %8s %8s %9s %8s %6s %10s %10s %10s %4s\n", "placement", "fwd ms", "bwd ms", "opt ms",
                "opt comm", "step ms", "colls", "resident", "activ.", "peak", "fits");
    for (const SimResult& r : results) {
      int64_t calls = 0;
      for (const StageTime& st : r.stages) calls += st.calls;
      auto gib = [](int64_t b) { return human_bytes(static_cast<double>(b), 1); };
      const std::string name = r.step_mode.empty() ? r.placement : r.placement + " (" + r.step_mode + ")";
      std::printf("  %-24s %8s %8s %8s %9s %8s %6lld %10s %10s %10s %4s\n", name.c_str(),
                  ms(r.stages[0].seconds()).c_str(), ms(r.stages[1].seconds()).c_str(), ms(r.stages[2].seconds()).c_str(),
                  ms(r.stages[2].comm_s).c_str(), ms(r.step_s).c_str(), static_cast<long long>(calls),
                  gib(r.resident_bytes).c_str(), gib(r.activation_bytes).c_str(), gib(r.peak_bytes).c_str(),
                  r.fits ? "yes" : "NO");
    }
    const SimResult* owner = nullptr;
    for (const SimResult& r : results)
      if (r.placement == "owner") owner = &r;
    if (owner && owner->stages[2].seconds() > 0) {
      for (const SimResult& r : results) {
        if (&r == owner) continue;
        std::printf("  optimizer step: %s / owner = %.1fx; step: %.2fx\n", r.placement.c_str(),
                    r.stages[2].seconds() / owner->stages[2].seconds(), r.step_s / owner->step_s);
      }
    }
    double slowest = 0;
    for (const SimResult& r : results) slowest = std::max(slowest, r.trace_s);
    std::printf("  simulated in %.3f s per placement at most\n", slowest);
  }
  if (a.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("assumptions:\n");
    for (const std::string& s : assumptions) std::printf("  - %s\n", s.c_str());
    std::printf("  - profile %s: %s\n", profile.name.c_str(), profile.description.c_str());
  }
  return kExitOk;
}

}  // namespace

void add_simulate_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("simulate", "Predict a placement's step time and memory per rank on a hardware profile");
  auto a = std::make_shared<SimulateArgs>();
  cmd->add_option("--model", a->model, "Preset (mfsdp plan --help lists them)")->required();
  cmd->add_option("-w,--world-size", a->world_sizes, "Ranks (repeatable)")->required()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--placement", a->placements, "owner | reconstruct | alltoall | zero1 | ddp (repeatable; default all)")
      ->each([a](const std::string&) { a->placements_given = true; });
  cmd->add_option("--profile", a->profile, "Hardware profile: a name in sim/profiles or a JSON file")->required();
  add_run_options(cmd, a->run, {.optimizer_flags = false, .prefetch = false, .recompute = false, .output_dtype = false, .model = false});
  cmd->add_option("--batch", a->batch, "Sequences per rank")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--seq", a->seq, "Tokens per sequence")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--grad-accum", a->grad_accum,
                  "Micro-batches of --batch sequences per step: K forwards and backwards, one optimizer step")
      ->check(CLI::Range(1, kMaxGradAccum));
  add_enum_option(cmd, "--grad-reduce", a->grad_reduce, kGradReduceNames,
                  "With --grad-accum: reduce every micro-batch, or once after the last (more memory)");
  cmd->add_option("--max-norm", a->max_norm, "Global gradient-norm clipping: prices its gathers and all-reduce")
      ->check(CLI::PositiveNumber);
  add_schedule_options(cmd, a->schedule);
  cmd->add_flag("--activation-checkpointing", a->checkpointing,
                "Recompute each block in backward (activations: block inputs only; owner, reconstruct and alltoall trace "
                "their real recomputing step)");
  cmd->add_flag("--fused-attention", a->fused_attention, "Activations without the S x S attention scores (flash attention)");
  cmd->add_option("--baseline-ns", a->baseline_ns,
                  "reconstruct's Newton–Schulz: redundant (all-gather, NS on every rank; traced) | sharded (NS on row shards with "
                  "implicit gathers; priced from a formula)")
      ->check(CLI::IsMember({"redundant", "sharded"}));
  cmd->add_flag("--json", a->json, "One JSON object per placement and world size");
  cmd->callback([&run, a] { run = [a] { return run_simulate(*a); }; });
}

}  // namespace mfsdp::cli
