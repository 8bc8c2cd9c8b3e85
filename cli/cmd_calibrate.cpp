// `mfsdp calibrate`: this machine's collectives and matmul rate, measured and written as a hardware
// profile for `mfsdp simulate` (docs/simulate.md). Collectives run over Gloo between thread ranks
// (as bench_step's ranks do); each kind is timed at every world size and size given, the median of
// --reps calls after a warm-up, and fitted by least squares to the model of collective_model.h:
// t = base + ring steps x hop + S x g / busbw (g: (n-1)/n for all-gather and reduce-scatter,
// 2(n-1)/n for all-reduce, 1 for broadcast, reduce and all-to-all, whose one step folds into base).
#include "cli/commands.h"
#include "core/dist/communicator.h"
#include "core/dist/ranks.h"
#include "core/sim/hardware.h"
#include "core/train/model.h"
#include "core/util/files.h"
#include "sim/trace.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <thread>

namespace mfsdp::cli {
namespace {

struct CalibrateArgs {
  std::string out = std::string(MFSDP_PROFILE_DIR) + "/cpu-local.json";
  std::string name = "cpu-local";
  std::vector<int> world_sizes{2, 4, 8};
  std::vector<int64_t> sizes{4 << 10, 64 << 10, 512 << 10, 4 << 20};
  int reps = 7;
  bool verbose = false;
};

struct Sample {
  int n;
  double bytes, seconds;
};

// The median time of one collective of `kind` moving `bytes` (CollectiveCall's meaning) on W ranks.
Sample measure(CollectiveKind kind, int W, int64_t bytes, int reps) {
  const int64_t n = std::max<int64_t>(W, bytes / 4 / W * W);  // fp32 elements, a multiple of W
  std::vector<double> times;
  RanksOptions ranks;
  ranks.world_size = W;
  ranks.timeout = std::chrono::seconds(60);
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    Communicator comm(ctx.backend);
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    at::Tensor a = at::empty({n}, opts).fill_(1), b = at::empty({kind == CollectiveKind::allgather ? n * W : n}, opts);
    at::Tensor chunk = at::empty({n / W}, opts);
    auto once = [&] {
      switch (kind) {
        case CollectiveKind::broadcast: comm.broadcast(a, 0)->wait(); break;
        case CollectiveKind::reduce: comm.reduce_sum(a, 0)->wait(); break;
        case CollectiveKind::allreduce: comm.allreduce_sum(a)->wait(); break;
        case CollectiveKind::allgather: comm.allgather(b, a)->wait(); break;
        case CollectiveKind::reduce_scatter: comm.reduce_scatter_sum(chunk, a)->wait(); break;
        case CollectiveKind::alltoall: comm.alltoall(b, a, std::vector<int64_t>(W, n / W), std::vector<int64_t>(W, n / W))->wait(); break;
      }
    };
    for (int i = 0; i < 2; ++i) once();
    for (int i = 0; i < reps; ++i) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      once();
      comm.barrier();  // the slowest rank's end
      if (ctx.rank == 0) times.push_back(seconds_since(t0));
    }
  });
  std::sort(times.begin(), times.end());
  const double elem = 4.0 * static_cast<double>(n);
  const double S = kind == CollectiveKind::allgather ? elem * W : kind == CollectiveKind::alltoall ? elem * (W - 1) / W : elem;
  return {W, S, times[times.size() / 2]};
}

// Least squares of the relative error for t = base + steps * hop + x / busbw, refitted without a
// negative coefficient.
CollectiveFit fit(CollectiveKind kind, const std::vector<Sample>& samples) {
  auto steps = [&](int n) { return kind == CollectiveKind::alltoall ? 0.0 : (kind == CollectiveKind::allreduce ? 2.0 : 1.0) * (n - 1); };
  auto g = [&](int n) {
    switch (kind) {
      case CollectiveKind::allgather:
      case CollectiveKind::reduce_scatter: return (n - 1.0) / n;
      case CollectiveKind::allreduce: return 2.0 * (n - 1) / n;
      default: return 1.0;
    }
  };
  std::vector<bool> use{true, kind != CollectiveKind::alltoall, true};
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<int> cols;
    for (int c = 0; c < 3; ++c)
      if (use[c]) cols.push_back(c);
    const size_t m = cols.size();
    std::vector<std::vector<double>> A(m, std::vector<double>(m + 1, 0.0));
    for (const Sample& s : samples) {  // relative residuals: the times span orders of magnitude
      const double w = 1.0 / (s.seconds * s.seconds);
      const double x[3] = {1.0, steps(s.n), s.bytes * g(s.n)};
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < m; ++j) A[i][j] += w * x[cols[i]] * x[cols[j]];
        A[i][m] += w * x[cols[i]] * s.seconds;
      }
    }
    for (size_t i = 0; i < m; ++i) {  // Gauss-Jordan on the normal equations
      size_t piv = i;
      for (size_t r = i + 1; r < m; ++r)
        if (std::fabs(A[r][i]) > std::fabs(A[piv][i])) piv = r;
      std::swap(A[i], A[piv]);
      TORCH_CHECK(std::fabs(A[i][i]) > 0, "calibrate: the ", to_string(kind), " samples do not determine a fit");
      for (size_t r = 0; r < m; ++r) {
        if (r == i) continue;
        const double f = A[r][i] / A[i][i];
        for (size_t c = i; c <= m; ++c) A[r][c] -= f * A[i][c];
      }
    }
    double coef[3] = {0, 0, 0};
    for (size_t i = 0; i < m; ++i) coef[cols[i]] = A[i][m] / A[i][i];
    bool negative = false;
    for (int c : cols)
      if (coef[c] < 0 && c != 2) use[c] = false, negative = true;
    if (negative) continue;
    TORCH_CHECK(coef[2] > 0, "calibrate: the ", to_string(kind), " times do not grow with size (fit ", coef[2], " s/B)");
    return {true, coef[0], coef[1], 1.0 / coef[2]};
  }
  TORCH_CHECK(false, "calibrate: no non-negative fit for ", to_string(kind));
}

double matmul_flops(at::ScalarType dtype) {
  const int64_t n = 512;
  const at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  (void)at::mm(a, b);
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)at::mm(a, b);
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return 2.0 * n * n * n / t[t.size() / 2];
}

// Host seconds per dispatched ATen operator: the tiny model's forward and backward on one thread,
// its operators and matrix-product FLOPs counted by the simulator's observer (sim/trace.h), and
// what the FLOPs at the measured matmul rates do not explain, spread over the operators.
double op_overhead(const HardwareProfile& p, int64_t& ops_out) {
  const TransformerModel model(preset_config("tiny"));
  ParamMap params = model.init(0);
  for (auto& [_, t] : params) t.requires_grad_(true);
  const at::Tensor tokens = at::randint(0, model.config().vocab, {4, 32}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor targets = at::randint(0, model.config().vocab, {4, 32}, at::TensorOptions().dtype(at::kLong));
  auto once = [&] {
    for (auto& [_, t] : params) t.mutable_grad() = at::Tensor();
    model.loss(tokens, targets, params).backward();
  };
  for (int i = 0; i < 3; ++i) once();
  std::vector<double> t;
  for (int i = 0; i < 9; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  StageCompute all;
  {
    ComputeCounter counter;
    once();
    for (const StageCompute& s : counter.stages()) {
      all.ops += s.ops;
      all.flops_bf16 += s.flops_bf16;
      all.flops_fp32 += s.flops_fp32;
    }
  }
  TORCH_CHECK(all.ops > 0, "calibrate: the operator observer counted nothing (RecordFunction disabled?)");
  ops_out = all.ops;
  const double flop_s = all.flops_fp32 / p.matmul_fp32_flops + all.flops_bf16 / p.matmul_bf16_flops;
  return std::max(0.0, (t[t.size() / 2] - flop_s) / static_cast<double>(all.ops));
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
  const int slots = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.description = "This machine (" + cpu_model() + ", " + std::to_string(slots) + " cores): Gloo between thread ranks";
  p.ranks_per_node = 1 << 16;  // every rank on this one machine
  p.compute_slots_per_node = slots;
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
      for (int64_t s : a.sizes) samples.push_back(measure(kind, W, s, a.reps));
    p.fits[k] = fit(kind, samples);
    double worst = 0;
    for (const Sample& s : samples) {
      const double steps = kind == CollectiveKind::alltoall ? 0 : (kind == CollectiveKind::allreduce ? 2.0 : 1.0) * (s.n - 1);
      const double g = kind == CollectiveKind::allgather || kind == CollectiveKind::reduce_scatter ? (s.n - 1.0) / s.n
                       : kind == CollectiveKind::allreduce                                          ? 2.0 * (s.n - 1) / s.n
                                                                                                    : 1.0;
      const double model = p.fits[k].base_latency_s + steps * p.fits[k].hop_latency_s + s.bytes * g / p.fits[k].busbw_Bps;
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
  p.matmul_fp32_flops = matmul_flops(at::kFloat);
  p.matmul_bf16_flops = matmul_flops(at::kBFloat16);
  int64_t ops = 0;
  p.op_overhead_s = op_overhead(p, ops);
  at::set_num_threads(threads);
  std::printf("  matmul 512^3 on one thread: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", p.matmul_fp32_flops / 1e9,
              p.matmul_bf16_flops / 1e9);
  std::printf("  per ATen operator: %.1f us (tiny model forward + backward, %lld operators)\n", p.op_overhead_s * 1e6,
              static_cast<long long>(ops));
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  p.sources = {std::string("measured by mfsdp calibrate on ") + date + ": " + p.description + "; W = " + ws + ", sizes " +
                   sizes + ", median of " + std::to_string(a.reps) + " calls per point, least-squares fit of the relative error per " +
                   "collective; largest misfit: " + misfits,
               "matmul: median of 5 at::mm 512 x 512 x 512 on one intra-op thread (each deterministic rank runs one)",
               "op_overhead_s: median of 9 forward + backward passes of the tiny model on one thread, less its "
               "matrix-product FLOPs at those rates, per ATen operator dispatched"};
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
