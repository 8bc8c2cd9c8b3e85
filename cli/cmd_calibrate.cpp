// `mfsdp calibrate`: this machine's collectives and matmul rate, measured and written as a hardware
// profile for `mfsdp simulate` (docs/simulate.md). Collectives run over Gloo between thread ranks
// (as bench_step's ranks do); each kind is timed at every world size and size given, the median of
// --reps rounds after a warm-up (each round times every size once, 4 calls in a row, each after a
// burst of compute on every rank, less the bursts timed alone), and fitted by least squares of
// the relative error to the model of collective_model.h: across world sizes,
// t = base + ring steps x hop + S x g / busbw (g: (n-1)/n for all-gather and reduce-scatter,
// 2(n-1)/n for all-reduce, 1 for broadcast, reduce and all-to-all, whose one step folds into base),
// and at each measured world size on its own, t = latency + S x g / busbw (`at_ranks`).
#include "cli/commands.h"
#include "core/dist/communicator.h"
#include "core/dist/ranks.h"
#include "core/optim/optimizer_routing.h"
#include "core/optim/optim.h"
#include "core/sim/collective_model.h"
#include "core/sim/hardware.h"
#include "core/train/model.h"
#include "core/util/files.h"
#include "sim/simulate.h"
#include "sim/trace.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <numeric>
#include <thread>

namespace mfsdp::cli {
namespace {

struct CalibrateArgs {
  std::string out = std::string(MFSDP_PROFILE_DIR) + "/cpu-local.json";
  std::string name = "cpu-local";
  std::vector<int> world_sizes{2, 4, 8};
  std::vector<int64_t> sizes{4 << 10, 64 << 10, 512 << 10, 4 << 20};
  int reps = 15;
  bool verbose = false;
};

struct Sample {
  int n;
  double bytes, seconds;
};

// Calls timed together between two barriers, so that the barriers' own cost is spread thin (a
// step's collectives follow one another too).
constexpr int kBackToBack = 4;
// 64 x 64 x 64 products before each call: about a quarter of a millisecond of one core.
constexpr int kBurstProducts = 40;

// The median times of one collective of `kind` moving each of `sizes` bytes (CollectiveCall's
// meaning) on W thread ranks: every round times each size once, in turn, so that what the machine
// does meanwhile falls on every size alike.
std::vector<Sample> measure(CollectiveKind kind, int W, const std::vector<int64_t>& sizes, int reps) {
  std::vector<std::vector<double>> times(sizes.size());
  std::vector<int64_t> elems;
  for (int64_t bytes : sizes) elems.push_back(std::max<int64_t>(W, bytes / 4 / W * W));  // fp32, a multiple of W
  RanksOptions ranks;
  ranks.world_size = W;
  ranks.timeout = std::chrono::seconds(120);
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    Communicator comm(ctx.backend);
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    auto once = [&](int64_t n, at::Tensor& a, at::Tensor& b, at::Tensor& chunk) {
      switch (kind) {
        case CollectiveKind::broadcast: comm.broadcast(a, 0)->wait(); break;
        case CollectiveKind::reduce: comm.reduce_sum(a, 0)->wait(); break;
        case CollectiveKind::allreduce: comm.allreduce_sum(a)->wait(); break;
        case CollectiveKind::allgather: comm.allgather(b, a)->wait(); break;
        case CollectiveKind::reduce_scatter: comm.reduce_scatter_sum(chunk, a)->wait(); break;
        case CollectiveKind::alltoall: comm.alltoall(b, a, std::vector<int64_t>(W, n / W), std::vector<int64_t>(W, n / W))->wait(); break;
      }
    };
    std::vector<at::Tensor> as, bs, chunks;
    for (int64_t n : elems) {
      as.push_back(at::empty({n}, opts).fill_(1));
      bs.push_back(at::empty({kind == CollectiveKind::allgather ? n * W : n}, opts));
      chunks.push_back(at::empty({n / W}, opts));
    }
    for (size_t i = 0; i < elems.size(); ++i)
      for (int w = 0; w < 2; ++w) once(elems[i], as[i], bs[i], chunks[i]);
    // Each call follows a burst of compute on every rank, as a step's collectives follow its
    // operators; the bursts alone are timed too, and the call is what the pair adds to them (the
    // wait for the slowest rank, and the wake-ups of ranks whose cores are busy, included).
    const at::Tensor x = at::randn({64, 64}, opts), y = at::randn({64, 64}, opts);
    auto burst = [&] {
      for (int k = 0; k < kBurstProducts; ++k) (void)at::mm(x, y);
    };
    std::vector<std::vector<double>> bursts(elems.size());
    for (int r = 0; r < reps; ++r) {
      for (size_t i = 0; i < elems.size(); ++i) {
        for (const bool with_calls : {false, true}) {
          comm.barrier();
          const auto t0 = std::chrono::steady_clock::now();
          for (int k = 0; k < kBackToBack; ++k) {
            burst();
            if (with_calls) once(elems[i], as[i], bs[i], chunks[i]);
          }
          comm.barrier();  // the slowest rank's end
          if (ctx.rank == 0) (with_calls ? times : bursts)[i].push_back(seconds_since(t0) / kBackToBack);
        }
      }
    }
    if (ctx.rank == 0)
      for (size_t i = 0; i < elems.size(); ++i) {
        std::sort(bursts[i].begin(), bursts[i].end());
        for (double& t : times[i]) t = std::max(t - bursts[i][bursts[i].size() / 2], 1e-7);
      }
  });
  std::vector<Sample> out;
  for (size_t i = 0; i < elems.size(); ++i) {
    std::sort(times[i].begin(), times[i].end());
    const double elem = 4.0 * static_cast<double>(elems[i]);
    const double S = kind == CollectiveKind::allgather ? elem * W : kind == CollectiveKind::alltoall ? elem * (W - 1) / W : elem;
    out.push_back({W, S, times[i][times[i].size() / 2]});
  }
  return out;
}

// Least squares of the relative error for t = sum_c coef[c] * x[c], over the columns in `use`,
// refitted without any negative coefficient but the last (the per-byte one, which must be
// positive). Returns the coefficients, or an empty vector when no positive per-byte fit exists.
std::vector<double> relative_least_squares(const std::vector<std::vector<double>>& xs, const std::vector<double>& t,
                                           std::vector<bool> use) {
  const size_t width = use.size();
  for (size_t attempt = 0; attempt < width; ++attempt) {
    std::vector<size_t> cols;
    for (size_t c = 0; c < width; ++c)
      if (use[c]) cols.push_back(c);
    const size_t m = cols.size();
    std::vector<std::vector<double>> A(m, std::vector<double>(m + 1, 0.0));
    for (size_t s = 0; s < t.size(); ++s) {  // relative residuals: the times span orders of magnitude
      const double w = 1.0 / (t[s] * t[s]);
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < m; ++j) A[i][j] += w * xs[s][cols[i]] * xs[s][cols[j]];
        A[i][m] += w * xs[s][cols[i]] * t[s];
      }
    }
    bool singular = false;
    for (size_t i = 0; i < m && !singular; ++i) {  // Gauss-Jordan on the normal equations
      size_t piv = i;
      for (size_t r = i + 1; r < m; ++r)
        if (std::fabs(A[r][i]) > std::fabs(A[piv][i])) piv = r;
      std::swap(A[i], A[piv]);
      if (!(std::fabs(A[i][i]) > 0)) singular = true;
      for (size_t r = 0; r < m && !singular; ++r) {
        if (r == i) continue;
        const double f = A[r][i] / A[i][i];
        for (size_t c = i; c <= m; ++c) A[r][c] -= f * A[i][c];
      }
    }
    if (singular) return {};
    std::vector<double> coef(width, 0.0);
    for (size_t i = 0; i < m; ++i) coef[cols[i]] = A[i][m] / A[i][i];
    bool negative = false;
    for (size_t c : cols)
      if (coef[c] < 0 && c + 1 != width) use[c] = false, negative = true;
    if (negative) continue;
    if (!(coef[width - 1] > 0)) return {};
    return coef;
  }
  return {};
}

double ring_steps(CollectiveKind kind, int n) {
  return kind == CollectiveKind::alltoall ? 0.0 : (kind == CollectiveKind::allreduce ? 2.0 : 1.0) * (n - 1);
}

// The fit across world sizes, t = base + ring steps x hop + S g(n) / busbw (what a world size
// calibrate did not measure uses), and one per world size, t = latency + S g(n) / busbw.
CollectiveFit fit(CollectiveKind kind, const std::vector<Sample>& samples) {
  std::vector<std::vector<double>> xs;
  std::vector<double> t;
  for (const Sample& s : samples) {
    xs.push_back({1.0, ring_steps(kind, s.n), s.bytes * collective_bandwidth_factor(kind, s.n)});
    t.push_back(s.seconds);
  }
  const std::vector<double> all = relative_least_squares(xs, t, {true, kind != CollectiveKind::alltoall, true});
  TORCH_CHECK(!all.empty(), "calibrate: the ", to_string(kind), " times do not grow with size; no fit (run on a quiet machine)");
  CollectiveFit f{true, all[0], all[1], 1.0 / all[2], {}};
  std::map<int, std::pair<std::vector<std::vector<double>>, std::vector<double>>> by_n;
  for (const Sample& s : samples) {
    by_n[s.n].first.push_back({1.0, s.bytes * collective_bandwidth_factor(kind, s.n)});
    by_n[s.n].second.push_back(s.seconds);
  }
  for (const auto& [n, data] : by_n) {
    const std::vector<double> one = relative_least_squares(data.first, data.second, {true, true});
    if (!one.empty()) f.at_ranks[n] = {one[0], 1.0 / one[1]};  // else the fit across world sizes prices n
  }
  return f;
}

double matmul_flops(at::ScalarType dtype, int64_t n) {
  const at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  (void)at::mm(a, b);
  std::vector<double> t;
  const int reps = n >= 256 ? 5 : 25;  // small products: each time a batch of calls
  const int batch = static_cast<int>(std::max<int64_t>(1, (int64_t{256} * 256 * 256) / (n * n * n)));
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < batch; ++k) (void)at::mm(a, b);
    t.push_back(seconds_since(t0) / batch);
  }
  std::sort(t.begin(), t.end());
  return 2.0 * n * n * n / t[t.size() / 2];
}

// The tiny model's forward and backward on one intra-op thread, as a rank computes.
struct TinyPass {
  TransformerModel model{preset_config("tiny")};
  ParamMap params = model.init(0);
  at::Tensor tokens = at::randint(0, model.config().vocab, {4, 32}, at::TensorOptions().dtype(at::kLong));
  at::Tensor targets = at::randint(0, model.config().vocab, {4, 32}, at::TensorOptions().dtype(at::kLong));
  TinyPass() {
    for (auto& [_, t] : params) t.requires_grad_(true);
  }
  void operator()() {
    for (auto& [_, t] : params) t.mutable_grad() = at::Tensor();
    model.loss(tokens, targets, params).backward();
  }
};

// The median seconds of one pass with `threads` threads each running passes at once.
double tiny_pass_seconds(int threads, int passes) {
  std::vector<std::vector<double>> t(threads);
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      TinyPass pass;
      for (int i = 0; i < 3; ++i) pass();
      for (int i = 0; i < passes; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        pass();
        t[k].push_back(seconds_since(t0));
      }
    });
  }
  for (std::thread& th : pool) th.join();
  std::vector<double> all;
  for (const auto& v : t) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  return all[all.size() / 2];
}

// Host seconds per dispatched ATen operator: the tiny model's forward and backward on one thread,
// its operators and matrix-product FLOPs counted by the simulator's observer (sim/trace.h), and
// what the products at the measured rates do not explain, spread over the operators.
double op_overhead(const HardwareProfile& p, double one_pass_s, int64_t& ops_out) {
  TinyPass pass;
  pass();
  std::array<StageCompute, kNumStages> stages;
  {
    ComputeCounter counter;
    pass();
    stages = counter.stages();
  }
  int64_t ops = 0;
  double flop_s = 0;  // the products at the measured rates, without any per-operator cost
  HardwareProfile rates = p;
  rates.op_overhead_s = 0;
  for (const StageCompute& s : stages) ops += s.ops, flop_s += compute_seconds(s, rates, Stage::forward);
  TORCH_CHECK(ops > 0, "calibrate: the operator observer counted nothing (RecordFunction disabled?)");
  ops_out = ops;
  return std::max(0.0, (one_pass_s - flop_s) / static_cast<double>(ops));
}

// Host seconds per dispatched ATen operator of an optimizer step: AdamW steps of every tiny-model
// parameter on one thread, without autograd, as an optimizer stage runs its element-wise
// operators. AdamW issues no matrix product, so its time is its operators' alone (counted by the
// same observer); an estimate from a Muon step would be a small difference of two noisy numbers
// (the step less its products at the measured rates). Median of `passes`.
double optimizer_op_overhead(int passes, int64_t& ops_out) {
  const TransformerModel model{preset_config("tiny")};
  const OptimizerOptions options = training_defaults();
  ParamMap params = model.init(0);
  std::vector<std::unique_ptr<TensorOptimizer>> optimizers;
  std::vector<at::Tensor*> stepped;
  std::vector<at::Tensor> grads;
  for (const ParamSpec& spec : model.spec().params) {
    at::Tensor& t = params.at(spec.name);
    optimizers.push_back(make_optimizer(options, spec.name, /*hidden_matrix=*/false, t.sizes().vec()));
    stepped.push_back(&t);
    grads.push_back(at::randn(t.sizes()).mul_(1e-2).to(t.scalar_type()));
  }
  const at::NoGradGuard no_grad;
  auto step = [&] {
    for (size_t i = 0; i < optimizers.size(); ++i) optimizers[i]->step(*stepped[i], grads[i]);
  };
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> t;
  for (int i = 0; i < passes; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  int64_t ops = 0;
  {
    ComputeCounter counter;
    step();
    for (const StageCompute& s : counter.stages()) {
      TORCH_CHECK(s.flops_bf16 == 0 && s.flops_fp32 == 0, "calibrate: the AdamW step issued a matrix product");
      ops += s.ops;
    }
  }
  TORCH_CHECK(ops > 0, "calibrate: the operator observer counted no optimizer operator (RecordFunction disabled?)");
  ops_out = ops;
  return t[t.size() / 2] / static_cast<double>(ops);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

int64_t memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    in.ignore(1 << 10, '\n');
  }
  return int64_t{1} << 30;
}

int run_calibrate(const CalibrateArgs& a) {
  TORCH_CHECK(!a.world_sizes.empty() && a.sizes.size() >= 2, "calibrate: need world sizes and at least two sizes");
  HardwareProfile p;
  p.name = a.name;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.description = "This machine (" + cpu_model() + ", " + std::to_string(cores) + " cores): Gloo between thread ranks";
  p.ranks_per_node = 1 << 16;  // every rank on this one machine
  p.device_memory_bytes = memory_bytes();
  std::string sizes, ws;
  for (int64_t s : a.sizes) sizes += (sizes.empty() ? "" : ", ") + human_bytes(static_cast<double>(s), 0);
  for (int w : a.world_sizes) ws += (ws.empty() ? "" : ", ") + std::to_string(w);
  std::printf("calibrate: %s; Gloo over thread ranks W = %s, sizes %s, median of %d\n", p.description.c_str(), ws.c_str(),
              sizes.c_str(), a.reps);
  std::string misfits;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    std::vector<Sample> samples;
    for (int W : a.world_sizes)
      for (const Sample& s : measure(kind, W, a.sizes, a.reps)) samples.push_back(s);
    p.fits[k] = fit(kind, samples);
    double worst = 0;
    for (const Sample& s : samples) {
      std::vector<int> group(s.n);
      std::iota(group.begin(), group.end(), 0);
      const double model = collective_seconds(CollectiveCall{kind, group, static_cast<int64_t>(s.bytes)}, p);
      worst = std::max(worst, std::fabs(model - s.seconds) / s.seconds);
      if (a.verbose)
        std::printf("    W=%d %10.0f B  measured %9.1f us  model %9.1f us\n", s.n, s.bytes, s.seconds * 1e6, model * 1e6);
    }
    misfits += std::string(misfits.empty() ? "" : ", ") + to_string(kind) + " " + std::to_string(static_cast<int>(100 * worst)) + "%";
    std::printf("  %-15s base %8.1f us  hop %8.1f us  busbw %8.3f GB/s  (largest misfit %.0f%%)\n", to_string(kind),
                p.fits[k].base_latency_s * 1e6, p.fits[k].hop_latency_s * 1e6, p.fits[k].busbw_Bps / 1e9, 100 * worst);
  }
  const CollectiveFit& ag = p.fits[static_cast<int>(CollectiveKind::allgather)];
  p.base_latency_s = ag.base_latency_s;
  p.intra = {ag.hop_latency_s, ag.busbw_Bps};
  p.inter = p.intra;  // one machine: no network
  const int threads = at::get_num_threads();
  at::set_num_threads(1);  // as each deterministic rank runs
  for (int64_t n : {16, 32, 64, 128, 256, 512}) {
    p.matmul_curve_fp32.emplace_back(n, matmul_flops(at::kFloat, n));
    p.matmul_curve_bf16.emplace_back(n, matmul_flops(at::kBFloat16, n));
  }
  p.matmul_fp32_flops = p.matmul_curve_fp32.back().second;
  p.matmul_bf16_flops = p.matmul_curve_bf16.back().second;
  int64_t ops = 0;
  const double one = tiny_pass_seconds(1, 15);
  p.op_overhead_s = op_overhead(p, one, ops);
  int64_t optimizer_ops = 0;
  p.optimizer_op_overhead_s = optimizer_op_overhead(15, optimizer_ops);

  // What the cores achieve together: the same passes on every core at once, against one alone
  // (cores that share a physical core or its caches do less than their count).
  const double together = tiny_pass_seconds(cores, 15);
  p.compute_slots_per_node = std::clamp(cores * one / together, 1.0, static_cast<double>(cores));
  at::set_num_threads(threads);
  for (size_t i = 0; i < p.matmul_curve_fp32.size(); ++i)
    std::printf("  matmul %3lld^3 on one thread: fp32 %7.1f GFLOP/s, bf16 %7.1f GFLOP/s\n",
                static_cast<long long>(p.matmul_curve_fp32[i].first), p.matmul_curve_fp32[i].second / 1e9,
                p.matmul_curve_bf16[i].second / 1e9);
  std::printf("  per ATen operator: %.1f us (tiny model forward + backward, %lld operators)\n", p.op_overhead_s * 1e6,
              static_cast<long long>(ops));
  std::printf("  per ATen operator of an optimizer step: %.1f us (AdamW on every tiny-model parameter, %lld operators)\n",
              p.optimizer_op_overhead_s * 1e6, static_cast<long long>(optimizer_ops));
  std::printf("  compute slots: %.2f of %d cores (the tiny pass on every core at once: %.2f ms, alone %.2f ms)\n",
              p.compute_slots_per_node, cores, together * 1e3, one * 1e3);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  p.sources = {std::string("measured by mfsdp calibrate on ") + date + ": " + p.description + "; W = " + ws + ", sizes " +
                   sizes + ", median of " + std::to_string(a.reps) + " interleaved rounds per point, least-squares fits of the relative error " +
                   "per collective, across world sizes and at each (at_ranks); largest misfit: " + misfits,
               "matmul: at::mm n x n x n for n = 16 ... 512 on one intra-op thread (each deterministic rank runs one), the "
               "median per n (the flat rate: n = 512)",
               "op_overhead_s: median of 15 forward + backward passes of the tiny model on one thread, less its "
               "matrix products at those rates, per ATen operator dispatched",
               "optimizer_op_overhead_s: median of 15 AdamW steps of every tiny-model parameter on one thread without autograd "
               "(no matrix product), per ATen operator dispatched",
               "compute_slots_per_node: cores x (the tiny pass alone) / (the tiny pass on every core at once), medians of 15"};
  write_file_atomic(a.out, hardware_profile_to_json(p));
  std::printf("calibrate: wrote %s\n", a.out.c_str());
  return kExitOk;
}

}  // namespace

void add_calibrate_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("calibrate", "Measure this machine's collectives and matmul rate; write a hardware profile for simulate");
  auto a = std::make_shared<CalibrateArgs>();
  cmd->add_option("--out", a->out, "Profile file to write (atomically)");
  cmd->add_option("--name", a->name, "The profile's name");
  cmd->add_option("--world-sizes", a->world_sizes, "Thread ranks to measure at")->check(CLI::Range(2, 64));
  cmd->add_option("--sizes", a->sizes, "Collective sizes in bytes")->check(CLI::Range(int64_t{64}, int64_t{1} << 30));
  cmd->add_flag("--verbose", a->verbose, "Print every measured point beside the fit");
  cmd->add_option("--reps", a->reps, "Timed calls per point (the median is kept)")->check(CLI::Range(1, 1000));
  cmd->callback([&run, a] { run = [a] { return run_calibrate(*a); }; });
}

}  // namespace mfsdp::cli
