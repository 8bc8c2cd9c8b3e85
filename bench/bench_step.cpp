// The headline benchmark: every placement — owner, reconstruct (FSDP2 + Muon), alltoall
// (DistMuon), zero1, ddp — training the same model with Muon at W in {2, 4, 8}, ranks as threads
// over Gloo, in one run. Per case: optimizer-step latency (the iteration time), forward, backward
// and end-to-end step latency (each step's time is the slowest rank's; the median over the
// measured steps is reported), bytes sent and received per rank per phase and collective calls
// (max over ranks), optimizer FLOPs per rank (max), peak resident bytes per rank (max), and a
// correctness check outside the timed steps: a short run of the same placement must equal the DDP
// oracle bit for bit. After all cases, the ratios (owner vs reconstruct and vs alltoall optimizer
// step, owner vs even-layout forward+backward) are computed from this same run and printed;
// --json FILE writes everything (with the environment) for `mfsdp dashboard`.
//
//   build/bench/bench_step --json bench_step.json                      # all cases
//   build/bench/bench_step --models tiny --world-sizes 4 --benchmark_filter=owner
//   build/bench/bench_step --device cuda --json gpu.json               # on a GPU (Gloo on CUDA tensors)
//   build/bench/bench_step --rounds 3 --steps 10 --json r.json         # every case 3 times, rounds in turn:
//                                   # medians over all rounds' steps, and each round's medians in the JSON
//   build/bench/bench_step --batch 1 --grad-accum 4 --grad-reduce deferred --max-norm 1.0   # the step's
//                                   # settings, as mfsdp train's (bench/accumulation_sweep.sh sweeps K)
//   build/bench/bench_step --activation-checkpointing   # the owner runtime's placements recompute each block
//   build/bench/bench_step --lr-schedule warmup-cosine --warmup-steps 2   # every case under a schedule
#include "core/util/errors.h"
#include "core/util/files.h"
#include "core/dist/determinism.h"
#include "core/plan/memory_model.h"
#include "core/plan/planner.h"
#include "core/dist/process_group.h"
#include "core/dist/ranks.h"
#include "harness/trajectory.h"
#include "harness/placements.h"

#include <ATen/Context.h>
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <ctime>

namespace mfsdp {
namespace {

constexpr int kWarmup = 2;
int g_measured = 6;
int g_rounds = 1;  // --rounds: every case run this many times, the rounds one after another
std::string g_device = "cpu";
// The step's settings for every case (as `mfsdp train`'s flags): micro-batch size (0: the model's
// default), gradient accumulation and clipping.
int64_t g_batch = 0;
int g_grad_accum = 1;
GradReduce g_grad_reduce = GradReduce::per_microbatch;
double g_max_norm = 0;
// --activation-checkpointing: the owner runtime's placements recompute each block (the replicas,
// zero1 and ddp, never do: their cases run as without the flag, said in the JSON's step settings).
bool g_recompute = false;
// --lr-schedule and its settings (docs/schedules.md): applied to every case (and its oracle check);
// a schedule changes no collective and no kernel.
LrSchedule g_schedule;

const std::vector<std::string> kPlacements{"owner", "reconstruct", "alltoall", "zero1", "ddp"};
// HSDP with 2 replica groups (docs/hsdp.md), at every even W >= 4: the owner runtime in both step
// modes and FSDP2 HSDP + Muon (reconstruct, replicated).
const std::vector<std::string> kHsdpPlacements{"hsdp2_owner_replicated", "hsdp2_owner_dedup", "hsdp2_reconstruct"};

struct CaseResult {
  std::string model, placement;
  int world_size = 0;
  double optimizer_ms = 0, forward_ms = 0, backward_ms = 0, step_ms = 0;
  std::array<PhaseCounters, kNumPhases> phases{};  // max over ranks, per step
  int64_t resident_bytes_max = 0;
  int64_t peak_bytes_max = 0;  // resident + peak gathered + gradient accumulation's sums, max over ranks
  double optimizer_gflop_rank_max = 0;
  bool oracle_bitwise = false;
  // Every measured step of every round (each the slowest rank's), and each round's medians: the
  // latencies above are the medians over all rounds' steps; the rounds show how far one run of
  // the case strays from another on this machine.
  std::vector<double> opt_s, fwd_s, bwd_s, step_s;
  std::vector<double> round_optimizer_ms, round_fwd_bwd_ms;
};
std::vector<CaseResult> g_results;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Optimizer FLOPs per step of the busiest rank, from the cost model: Newton–Schulz where each
// placement runs it (owner, zero1: on the owner; reconstruct and ddp: every matrix on every rank;
// alltoall: matrix k on rank k mod W) plus AdamW on what the rank stores.
double optimizer_gflop_rank_max(const TrainConfig& c, int W) {
  if (c.runtime.replicas > 1) {
    // HSDP: the shard group's plan; reconstruct works as at W / R, the owner modes as the memory
    // model counts them over all R x S ranks (dedup: each matrix on one replica).
    TrainConfig flat = c;
    flat.runtime.replicas = 1;
    if (c.placement == Placement::reconstruct) return optimizer_gflop_rank_max(flat, W / c.runtime.replicas);
    MemoryModelOptions mo;
    mo.replicas = c.runtime.replicas;
    mo.step_mode = c.runtime.step_mode;
    const PlanUsage u = plan_usage(make_plan(TransformerModel(c.model).spec(), W / c.runtime.replicas, c.planner), mo);
    double m = 0;
    for (const RankUsage& r : u.ranks) m = std::max(m, 2 * r.optimizer_cost);
    return m / 1e9;
  }
  const OwnershipPlan plan = make_plan(TransformerModel(c.model).spec(), W, c.planner);
  const OptimizerCostConfig cost;
  std::vector<double> flop(W, 0);
  const bool everywhere = c.placement == Placement::reconstruct || c.placement == Placement::ddp;
  int even_matrix = 0;
  for (const MatrixShard& s : plan.shards()) {
    const bool matrix = s.kind == ParamKind::hidden_matrix;
    const double ns = matrix ? 2 * optimizer_step_cost(OptimizerKind::muon, s.shape[0], s.shape[1], cost) : 0;
    const double elementwise = 2.0 * static_cast<double>(s.numel());
    for (int r = 0; r < W; ++r) {
      if (matrix && everywhere) flop[r] += ns;
      else if (matrix && c.placement == Placement::alltoall) flop[r] += (even_matrix % W == r) ? ns : 0;
      else if (matrix) flop[r] += (s.owner == r) ? ns : 0;
      else if (c.placement == Placement::ddp || c.placement == Placement::zero1) flop[r] += c.placement == Placement::ddp ? elementwise : elementwise / W;
      else
        for (const ShardSlice& sl : s.slices)
          if (sl.rank == r) flop[r] += elementwise * static_cast<double>(sl.rows) / static_cast<double>(s.shape[0]);
    }
    if (matrix) ++even_matrix;
  }
  return *std::max_element(flop.begin(), flop.end()) / 1e9;
}

void BM_Step(benchmark::State& state, const std::string& placement, int W, const std::string& model) {
  TrainConfig config = bench_train_config(placement, model);
  config.steps = kWarmup + g_measured;
  if (g_batch > 0) config.batch = g_batch;
  config.grad_accum = g_grad_accum;
  config.runtime.grad_reduce = g_grad_reduce;
  config.runtime.max_norm = g_max_norm;
  config.runtime.activation_checkpointing = g_recompute && runs_on_owner_runtime(config.placement);
  config.lr_schedule = g_schedule;
  std::vector<std::vector<StepMetrics>> per_rank(W);
  RanksOptions ranks;
  ranks.world_size = W;
  ranks.timeout = std::chrono::seconds(600);
  auto on_device = [&](RankContext& ctx, TrainConfig c) {
    c.runtime.device = rank_device(g_device, ctx.rank);
    if (!c.runtime.device.is_cpu()) apply_cuda_determinism(ctx.determinism);
    return c;
  };
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    const TrainConfig c = on_device(ctx, config);
    train_placement(ctx, c, [&](const StepMetrics& m) { per_rank[ctx.rank].push_back(m); });
  });
  CaseResult* earlier = nullptr;  // this case's result from an earlier round
  for (CaseResult& e : g_results)
    if (e.model == model && e.placement == placement && e.world_size == W) earlier = &e;
  CaseResult r;
  r.model = model, r.placement = placement, r.world_size = W;
  std::vector<double> opt, fwd, bwd, step;
  for (int s = kWarmup; s < config.steps; ++s) {
    double o = 0, f = 0, b = 0, t = 0;
    for (int rank = 0; rank < W; ++rank) {
      const StepMetrics& m = per_rank[rank][s];
      o = std::max(o, m.optimizer_s), f = std::max(f, m.forward_s), b = std::max(b, m.backward_s);
      t = std::max(t, m.forward_s + m.backward_s + m.optimizer_s);
    }
    opt.push_back(o), fwd.push_back(f), bwd.push_back(b), step.push_back(t);
  }
  for (int rank = 0; rank < W; ++rank) {
    const StepMetrics& m = per_rank[rank].back();
    for (int p = 0; p < kNumPhases; ++p) {
      r.phases[p].calls = std::max(r.phases[p].calls, m.bytes[p].calls);
      r.phases[p].parts = std::max(r.phases[p].parts, m.bytes[p].parts);
      r.phases[p].bytes_sent = std::max(r.phases[p].bytes_sent, m.bytes[p].bytes_sent);
      r.phases[p].bytes_recv = std::max(r.phases[p].bytes_recv, m.bytes[p].bytes_recv);
    }
    r.resident_bytes_max = std::max(r.resident_bytes_max, m.resident_bytes);
    r.peak_bytes_max = std::max(r.peak_bytes_max, m.resident_bytes + m.peak_gathered_bytes + m.peak_accumulation_bytes);
  }
  r.round_optimizer_ms = {1e3 * median(opt)};
  r.round_fwd_bwd_ms = {1e3 * (median(fwd) + median(bwd))};
  r.opt_s = opt, r.fwd_s = fwd, r.bwd_s = bwd, r.step_s = step;
  if (earlier) {
    auto append = [](std::vector<double>& to, const std::vector<double>& from) { to.insert(to.end(), from.begin(), from.end()); };
    append(earlier->opt_s, opt), append(earlier->fwd_s, fwd), append(earlier->bwd_s, bwd), append(earlier->step_s, step);
    append(earlier->round_optimizer_ms, r.round_optimizer_ms), append(earlier->round_fwd_bwd_ms, r.round_fwd_bwd_ms);
    r.opt_s = earlier->opt_s, r.fwd_s = earlier->fwd_s, r.bwd_s = earlier->bwd_s, r.step_s = earlier->step_s;
    r.round_optimizer_ms = earlier->round_optimizer_ms, r.round_fwd_bwd_ms = earlier->round_fwd_bwd_ms;
  }
  r.optimizer_ms = 1e3 * median(r.opt_s), r.forward_ms = 1e3 * median(r.fwd_s), r.backward_ms = 1e3 * median(r.bwd_s);
  r.step_ms = 1e3 * median(r.step_s);
  r.optimizer_gflop_rank_max = optimizer_gflop_rank_max(config, W);

  // Correctness, outside the timed steps (first round only): two steps of this placement equal
  // the oracle's.
  if (earlier) {
    r.oracle_bitwise = earlier->oracle_bitwise;
  } else {
    std::atomic<bool> equal{true};
    TrainConfig check = config;
    check.steps = 2;
    run_ranks_as_threads(ranks, [&](RankContext& ctx) {
      const TrainConfig c = on_device(ctx, check);
      if (!compare(run_oracle(ctx, c), run_recorded(ctx, c)).bitwise_equal) equal = false;
    });
    r.oracle_bitwise = equal;
  }

  size_t i = 0;
  for (auto _ : state) state.SetIterationTime(opt[i++ % opt.size()]);
  state.counters["opt_ms"] = r.optimizer_ms;
  state.counters["fwd_bwd_ms"] = r.forward_ms + r.backward_ms;
  state.counters["step_ms"] = r.step_ms;
  state.counters["step_calls"] = static_cast<double>(r.phases[static_cast<int>(Phase::optimizer_step)].calls);
  state.counters["step_sent_B"] = static_cast<double>(r.phases[static_cast<int>(Phase::optimizer_step)].bytes_sent);
  state.counters["unshard_recv_B"] = static_cast<double>(r.phases[static_cast<int>(Phase::unshard)].bytes_recv);
  state.counters["reduce_sent_B"] = static_cast<double>(r.phases[static_cast<int>(Phase::grad_reduce)].bytes_sent);
  state.counters["resident_B"] = static_cast<double>(r.resident_bytes_max);
  state.counters["peak_B"] = static_cast<double>(r.peak_bytes_max);
  if (g_max_norm > 0) state.counters["norm_sent_B"] = static_cast<double>(r.phases[static_cast<int>(Phase::grad_norm)].bytes_sent);
  state.counters["update_bcast_B"] = static_cast<double>(r.phases[static_cast<int>(Phase::update_broadcast)].bytes_sent);
  state.counters["opt_GFLOP"] = r.optimizer_gflop_rank_max;
  state.counters["oracle_bitwise"] = r.oracle_bitwise ? 1 : 0;
  if (!r.oracle_bitwise) state.SkipWithError("the placement's result differs from the oracle's");
  if (earlier) *earlier = r;
  else g_results.push_back(r);
}

const CaseResult* find(const std::string& model, const std::string& placement, int W) {
  for (const CaseResult& r : g_results)
    if (r.model == model && r.placement == placement && r.world_size == W) return &r;
  return nullptr;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string commit() {
  std::string out;
  if (FILE* p = ::popen("git -C " MFSDP_SOURCE_DIR " rev-parse --short HEAD 2>/dev/null", "r")) {
    char buf[64];
    while (std::fgets(buf, sizeof(buf), p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out.empty() ? "unknown" : out;
}

nlohmann::ordered_json environment() {
  nlohmann::ordered_json env{{"device", g_device},
                             {"cpu", cpu_model()},
                             {"cpu_cores", std::thread::hardware_concurrency()},
                             {"cpu_capability", at::get_cpu_capability()},
                             {"torch_version", TORCH_VERSION},
                             {"commit", commit()},
                             {"ranks", "threads (Gloo over a shared store)"},
                             {"optimizer", "muon (matrices), adamw (the rest)"},
                             {"measured_steps", g_measured},
                             {"rounds", g_rounds},
                             {"warmup_steps", kWarmup}};
  if (g_device == "cuda" && at::globalContext().hasCUDA()) env["gpu"] = "cuda (see nvidia-smi)";
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  env["date"] = date;
  return env;
}

// Ratios from this run, printed and returned for the JSON.
nlohmann::ordered_json ratios(const std::vector<std::string>& models, const std::vector<int>& world_sizes) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::printf("\nratios from this run (optimizer step: median of the slowest rank's step time)\n");
  std::printf("  %-6s %3s  %22s  %22s  %26s\n", "model", "W", "reconstruct / owner", "alltoall / owner",
              "owner / even fwd+bwd");
  for (const std::string& m : models) {
    for (int W : world_sizes) {
      const CaseResult *owner = find(m, "owner", W), *rec = find(m, "reconstruct", W), *a2a = find(m, "alltoall", W);
      if (!owner) continue;
      nlohmann::ordered_json j{{"model", m}, {"world_size", W}};
      char a[32] = "-", b[32] = "-", c[32] = "-";
      if (rec) {
        j["reconstruct_over_owner_step"] = rec->optimizer_ms / owner->optimizer_ms;
        j["owner_over_even_fwd_bwd"] = (owner->forward_ms + owner->backward_ms) / (rec->forward_ms + rec->backward_ms);
        std::snprintf(a, sizeof(a), "%.2fx", rec->optimizer_ms / owner->optimizer_ms);
        std::snprintf(c, sizeof(c), "%.3fx", j["owner_over_even_fwd_bwd"].get<double>());
      }
      if (a2a) {
        j["alltoall_over_owner_step"] = a2a->optimizer_ms / owner->optimizer_ms;
        std::snprintf(b, sizeof(b), "%.2fx", a2a->optimizer_ms / owner->optimizer_ms);
      }
      std::printf("  %-6s %3d  %22s  %22s  %26s\n", m.c_str(), W, a, b, c);
      out.push_back(j);
    }
  }
  bool header = false;
  for (const std::string& m : models) {
    for (int W : world_sizes) {
      const CaseResult *dedup = find(m, "hsdp2_owner_dedup", W), *rep = find(m, "hsdp2_owner_replicated", W),
                       *rec = find(m, "hsdp2_reconstruct", W);
      if (!dedup || !rep || !rec) continue;
      if (!header) {
        std::printf("  HSDP, 2 replica groups:  %-6s %3s  %24s  %26s\n", "model", "W", "reconstruct / owner dedup",
                    "owner replicated / dedup");
        header = true;
      }
      nlohmann::ordered_json j{{"model", m}, {"world_size", W}, {"replicas", 2},
                               {"hsdp_reconstruct_over_dedup_step", rec->optimizer_ms / dedup->optimizer_ms},
                               {"hsdp_replicated_over_dedup_step", rep->optimizer_ms / dedup->optimizer_ms}};
      std::printf("  %24s  %-6s %3d  %23.2fx  %25.2fx\n", "", m.c_str(), W, rec->optimizer_ms / dedup->optimizer_ms,
                  rep->optimizer_ms / dedup->optimizer_ms);
      out.push_back(j);
    }
  }
  return out;
}

nlohmann::ordered_json planner_imbalance(const std::vector<std::string>& models, const std::vector<int>& world_sizes) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const std::string& m : models) {
    const ModelSpec spec = TransformerModel(bench_model_config(m)).spec();
    for (int W : world_sizes) {
      for (PlannerKind kind : {PlannerKind::round_robin, PlannerKind::greedy_bytes, PlannerKind::greedy_cost, PlannerKind::balanced}) {
        PlannerOptions o;
        o.planner = kind;
        const PlanUsage u = plan_usage(make_plan(spec, W, o), MemoryModelOptions{});
        out.push_back({{"model", m}, {"world_size", W}, {"planner", to_string(kind)},
                       {"bytes_imbalance", u.bytes_imbalance}, {"cost_imbalance", u.cost_imbalance}});
      }
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) out.push_back(part);
  return out;
}

}  // namespace
}  // namespace mfsdp

int main(int argc, char** argv) {
  using namespace mfsdp;
  std::string json_out;
  std::vector<std::string> models{"tiny", "small"};
  std::vector<int> world_sizes{2, 4, 8};
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_step: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--json") json_out = value("--json");
    else if (a == "--models") models = split(value("--models"));
    else if (a == "--world-sizes") {
      world_sizes.clear();
      for (const std::string& w : split(value("--world-sizes"))) world_sizes.push_back(std::stoi(w));
    } else if (a == "--steps") g_measured = std::stoi(value("--steps"));
    else if (a == "--rounds") g_rounds = std::stoi(value("--rounds"));
    else if (a == "--device") g_device = value("--device");
    else if (a == "--batch") g_batch = std::stoll(value("--batch"));
    else if (a == "--grad-accum") g_grad_accum = std::stoi(value("--grad-accum"));
    else if (a == "--grad-reduce") {
      const std::string v = value("--grad-reduce");
      const auto mode = value_in(kGradReduceNames, v);
      if (!mode) {
        std::fprintf(stderr, "bench_step: --grad-reduce %s: not one of per-microbatch, deferred\n", v.c_str());
        return 2;
      }
      g_grad_reduce = *mode;
    } else if (a == "--max-norm") g_max_norm = std::stod(value("--max-norm"));
    else if (a == "--activation-checkpointing") g_recompute = true;
    else if (a == "--lr-schedule") {
      const std::string v = value("--lr-schedule");
      const auto kind = value_in(kLrScheduleNames, v);
      if (!kind) {
        std::fprintf(stderr, "bench_step: --lr-schedule %s: not one of %s\n", v.c_str(), names_or(kLrScheduleNames).c_str());
        return 2;
      }
      g_schedule.kind = *kind;
    } else if (a == "--warmup-steps") g_schedule.warmup_steps = std::stoll(value("--warmup-steps"));
    else if (a == "--decay-steps") g_schedule.decay_steps = std::stoll(value("--decay-steps"));
    else if (a == "--stable-steps") g_schedule.stable_steps = std::stoll(value("--stable-steps"));
    else if (a == "--min-lr-ratio") g_schedule.min_lr_ratio = std::stod(value("--min-lr-ratio"));
    else rest.push_back(argv[i]);
  }
  if (g_device == "cuda" && !at::globalContext().hasCUDA()) {
    std::fprintf(stderr, "bench_step: --device cuda, but no CUDA device is visible\n");
    return 2;
  }
  for (const std::string& m : models) bench_model_config(m);  // names an unknown model before running anything
  auto add_case = [](const std::string& m, int W, const std::string& p, const std::string& suffix) {
    benchmark::RegisterBenchmark(("step/model:" + m + "/W:" + std::to_string(W) + "/placement:" + p + suffix).c_str(),
                                 [p, W, m](benchmark::State& s) { BM_Step(s, p, W, m); })
        ->UseManualTime()
        ->Iterations(g_measured)
        ->Unit(benchmark::kMillisecond);
  };
  if (g_batch < 0 || g_grad_accum < 1 || g_grad_accum > kMaxGradAccum || !(g_max_norm >= 0) || std::isinf(g_max_norm)) {
    std::fprintf(stderr, "bench_step: --batch >= 1, --grad-accum 1..%d and a finite --max-norm > 0 (got %lld, %d, %g)\n",
                 kMaxGradAccum, static_cast<long long>(g_batch), g_grad_accum, g_max_norm);
    return 2;
  }
  const std::string schedule_error = error_of([] { validate(g_schedule); });
  if (!schedule_error.empty()) {
    std::fprintf(stderr, "bench_step: %s\n", schedule_error.c_str());
    return 2;
  }
  if (g_measured < 1 || g_rounds < 1) {
    std::fprintf(stderr, "bench_step: --steps and --rounds need at least 1 (got %d, %d)\n", g_measured, g_rounds);
    return 2;
  }
  // Rounds one after another, each over every case: a drift of the machine's speed (minutes long
  // on a shared CPU) reaches every case alike instead of the ones that ran during it.
  for (int round = 1; round <= g_rounds; ++round) {
    const std::string suffix = g_rounds > 1 ? "/round:" + std::to_string(round) : "";
    for (const std::string& m : models)
      for (int W : world_sizes)
        for (const std::string& p : kPlacements) add_case(m, W, p, suffix);
    for (const std::string& m : models)
      for (int W : world_sizes)
        if (W >= 4 && W % 2 == 0)
          for (const std::string& p : kHsdpPlacements) add_case(m, W, p, suffix);
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 2;
  benchmark::AddCustomContext("torch_version", TORCH_VERSION);
  benchmark::AddCustomContext("device", g_device);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  nlohmann::ordered_json result{{"format", "mfsdp-bench"}, {"version", 1}, {"environment", environment()},
                                {"step", {{"batch", g_batch}, {"grad_accum", g_grad_accum},
                                          {"grad_reduce", to_string(g_grad_reduce)}, {"max_norm", g_max_norm},
                                          {"activation_checkpointing", g_recompute ? "owner, reconstruct, alltoall" : "none"},
                                          {"lr_schedule", describe(resolve_decay_steps(g_schedule, kWarmup + g_measured))}}},
                                {"cases", nlohmann::ordered_json::array()}, {"ratios", ratios(models, world_sizes)},
                                {"planner", planner_imbalance(models, world_sizes)}};
  for (const CaseResult& r : g_results) {
    nlohmann::ordered_json phases = nlohmann::ordered_json::object();
    for (int p = 0; p < kNumPhases; ++p)
      phases[to_string(static_cast<Phase>(p))] = {{"calls", r.phases[p].calls}, {"parts", r.phases[p].parts}, {"bytes_sent", r.phases[p].bytes_sent},
                                                  {"bytes_recv", r.phases[p].bytes_recv}};
    result["cases"].push_back({{"model", r.model}, {"placement", r.placement}, {"world_size", r.world_size},
                               {"optimizer_step_ms", r.optimizer_ms}, {"forward_ms", r.forward_ms},
                               {"backward_ms", r.backward_ms}, {"step_ms", r.step_ms}, {"phases", phases},
                               {"resident_bytes_max", r.resident_bytes_max}, {"peak_bytes_max", r.peak_bytes_max},
                               {"optimizer_gflop_rank_max", r.optimizer_gflop_rank_max},
                               {"round_optimizer_step_ms", r.round_optimizer_ms}, {"round_fwd_bwd_ms", r.round_fwd_bwd_ms},
                               {"oracle_bitwise", r.oracle_bitwise}});
  }
  if (!json_out.empty()) {
    try {
      write_file_atomic(json_out, result.dump(1) + "\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_step: %s\n", e.what());
      return 1;
    }
    std::printf("results: %s (%zu cases)\n", json_out.c_str(), g_results.size());
  }
  if (g_results.empty()) {
    std::fprintf(stderr, "bench_step: no case ran (check --benchmark_filter, --models, --world-sizes)\n");
    return 1;
  }
  for (const CaseResult& r : g_results)
    if (!r.oracle_bitwise) return 1;
  return 0;
}
