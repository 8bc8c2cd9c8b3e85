#include "sim/calibrate.h"

#include "core/dist/communicator.h"
#include "core/dist/ranks.h"
#include "core/optim/optim.h"
#include "core/optim/optimizer_routing.h"
#include "sim/collective_fit.h"
#include "sim/collective_model.h"
#include "core/train/model.h"
#include "core/train/placement.h"
#include "core/util/units.h"
#include "sim/simulate.h"
#include "sim/trace.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <thread>

namespace mfsdp {
namespace {

// Calls timed together between two barriers, so that the barriers' own cost is spread thin (a
// step's collectives follow one another too).
constexpr int kBackToBack = 4;
// 64 x 64 x 64 products before each call: about a quarter of a millisecond of one core.
constexpr int kBurstProducts = 40;

// The median times of one collective of `kind` moving each of `sizes` bytes (CollectiveCall's
// meaning) on W thread ranks: every round times each size once, in turn, so that what the machine
// does meanwhile falls on every size alike.
std::vector<CollectiveSample> measure(CollectiveKind kind, int W, const std::vector<int64_t>& sizes, int reps) {
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
        case CollectiveKind::broadcast_group:  // every rank the root of its n / W elements, as one group
          comm.group([&] {
                for (int r = 0; r < W; ++r) {
                  at::Tensor part = a.narrow(0, r * (n / W), n / W);
                  comm.broadcast(part, r);
                }
              })->wait();
          break;
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
  std::vector<CollectiveSample> out;
  for (size_t i = 0; i < elems.size(); ++i) {
    std::sort(times[i].begin(), times[i].end());
    const double elem = 4.0 * static_cast<double>(elems[i]);
    const double S = kind == CollectiveKind::allgather ? elem * W : kind == CollectiveKind::alltoall ? elem * (W - 1) / W : elem;
    out.push_back({W, S, times[i][times[i].size() / 2]});
  }
  return out;
}

// FLOP/s of an n x n x n product in `dtype` on the calling thread: the median of its timings.
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

// The CPU's name (/proc/cpuinfo), for the profile's description.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// The machine's memory (/proc/meminfo), the profile's device memory: ranks share it; 1 GiB unread.
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

}  // namespace

HardwareProfile calibrate_this_machine(const CalibrateOptions& a, const std::function<void(const std::string&)>& say) {
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
  say(format("calibrate: %s; Gloo over thread ranks W = %s, sizes %s, median of %d", p.description.c_str(), ws.c_str(),
                 sizes.c_str(), a.reps));
  std::string misfits;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    std::vector<CollectiveSample> samples;
    for (int W : a.world_sizes)
      for (const CollectiveSample& s : measure(kind, W, a.sizes, a.reps)) samples.push_back(s);
    p.fits[k] = fit_collective(kind, samples);
    double worst = 0;
    for (const CollectiveSample& s : samples) {
      const double model = modelled_seconds(kind, s, p);
      worst = std::max(worst, std::fabs(model - s.seconds) / s.seconds);
      if (a.verbose)
        say(format("    W=%d %10.0f B  measured %9.1f us  model %9.1f us", s.ranks, s.bytes, s.seconds * 1e6, model * 1e6));
    }
    misfits += std::string(misfits.empty() ? "" : ", ") + to_string(kind) + " " + std::to_string(static_cast<int>(100 * worst)) + "%";
    say(format("  %-15s base %8.1f us  hop %8.1f us  busbw %8.3f GB/s  (largest misfit %.0f%%)", to_string(kind),
               p.fits[k].base_latency_s * 1e6, p.fits[k].hop_latency_s * 1e6, p.fits[k].busbw_Bps / 1e9, 100 * worst));
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
    say(format("  matmul %3lld^3 on one thread: fp32 %7.1f GFLOP/s, bf16 %7.1f GFLOP/s",
               static_cast<long long>(p.matmul_curve_fp32[i].first), p.matmul_curve_fp32[i].second / 1e9,
               p.matmul_curve_bf16[i].second / 1e9));
  say(format("  per ATen operator: %.1f us (tiny model forward + backward, %lld operators)", p.op_overhead_s * 1e6,
             static_cast<long long>(ops)));
  say(format("  per ATen operator of an optimizer step: %.1f us (AdamW on every tiny-model parameter, %lld operators)",
             p.optimizer_op_overhead_s * 1e6, static_cast<long long>(optimizer_ops)));
  say(format("  compute slots: %.2f of %d cores (the tiny pass on every core at once: %.2f ms, alone %.2f ms)",
             p.compute_slots_per_node, cores, together * 1e3, one * 1e3));
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
  return p;
}

}  // namespace mfsdp
