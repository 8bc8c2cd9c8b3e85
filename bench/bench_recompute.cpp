// Activation checkpointing measured (docs/recompute.md): step time and peak memory of one rank
// with and without recompute, at two model sizes where activations dominate, against the
// simulator's activation model (sim/simulate.h, activation_bytes).
//
//   build/bench/bench_recompute [--steps N] [--json FILE]
//
// Memory is the CPU allocator's own count: every tensor byte the process allocates goes through a
// counting allocator installed before anything is allocated, so its peak is exact (no malloc
// slack, no empty-process baseline to subtract). Per step, the peak over the step minus the bytes
// held between steps (parameters, gradients, optimizer state) is the step's transient memory:
// activations plus the gathered unit and the step's temporaries. One rank (W = 1, the owner
// runtime's full path: unshard, pinned buffers, revive, reduce), Muon, fp32.
#include "core/dist/ranks.h"
#include "core/util/files.h"
#include "harness/placements.h"
#include "sim/simulate.h"

#include <c10/core/CPUAllocator.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <string>
#include <vector>

namespace mfsdp {
namespace {

// Counts every CPU tensor byte: the default allocator underneath, each block's size kept beside it
// (libtorch wants a CPU DataPtr's context to be its data, so the blocks are found by address).
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) { g_self = this; }
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      now_ += static_cast<int64_t>(n);
      peak_ = std::max(peak_, now_);
      blocks_.emplace(data, Block{std::move(inner), n});
    }
    return {data, data, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  int64_t now() {
    std::lock_guard<std::mutex> lock(mutex_);
    return now_;
  }
  int64_t peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = now_;
  }

 private:
  struct Block {
    c10::DataPtr inner;
    size_t bytes;
  };
  static void release(void* data) {
    if (!data) return;
    Block block;
    {
      std::lock_guard<std::mutex> lock(g_self->mutex_);
      auto it = g_self->blocks_.find(data);
      if (it == g_self->blocks_.end()) return;
      block = std::move(it->second);
      g_self->blocks_.erase(it);
      g_self->now_ -= static_cast<int64_t>(block.bytes);
    }
  }  // the inner DataPtr frees the memory here
  static inline CountingAllocator* g_self = nullptr;
  c10::Allocator* base_;
  std::mutex mutex_;
  int64_t now_ = 0, peak_ = 0;
  std::unordered_map<void*, Block> blocks_;
};

CountingAllocator* g_counting = nullptr;

struct Model {
  std::string name;
  int64_t hidden, layers, heads, intermediate, batch, seq;
  bool bf16 = false;  // bf16 compute copies over fp32 masters
};

struct Measured {
  double step_ms = 0, backward_ms = 0;
  int64_t between_steps = 0;  // bytes held between steps
  int64_t transient = 0;      // the step's peak above them (max over the measured steps)
  int64_t unshard_bytes = 0;  // received in the last step
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Measured run(const Model& m, bool recompute, int steps) {
  TrainConfig c;
  c.model = preset_config("tiny");
  c.model.name = m.name, c.model.hidden = m.hidden, c.model.layers = m.layers, c.model.heads = m.heads;
  c.model.kv_heads = m.heads, c.model.intermediate = m.intermediate;
  c.batch = m.batch, c.seq = m.seq, c.steps = 2 + steps;
  c.runtime.activation_checkpointing = recompute;
  if (m.bf16) c.runtime.precision.param_dtype = c10::kBFloat16;
  apply_placement(Placement::owner, c);
  Measured out;
  std::vector<double> step_ms, backward_ms;
  RanksOptions one;
  one.world_size = 1;
  one.timeout = std::chrono::seconds(600);
  run_ranks_as_threads(one, [&](RankContext& ctx) {
    train_placement(ctx, c, [&](const StepMetrics& s) {
      // Called after each step (the parameters recorded nowhere): what is held now, and the peak
      // since the previous step ended.
      const int64_t held = g_counting->now(), peak = g_counting->peak();
      if (s.step > 2) {
        out.transient = std::max(out.transient, peak - held);
        out.between_steps = held;
        step_ms.push_back(1e3 * (s.forward_s + s.backward_s + s.optimizer_s));
        backward_ms.push_back(1e3 * s.backward_s);
        out.unshard_bytes = s.bytes[phase_index(Phase::unshard)].bytes_recv;
      }
      g_counting->reset_peak();
    });
  });
  out.step_ms = median(step_ms), out.backward_ms = median(backward_ms);
  return out;
}

}  // namespace
}  // namespace mfsdp

int main(int argc, char** argv) {
  using namespace mfsdp;
  static CountingAllocator counting(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&counting);
  g_counting = &counting;
  int steps = 4;
  double check = 0;  // --check X: exit 1 unless every case's model is within X (relative) of the count
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--check" && i + 1 < argc) check = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--steps N] [--json FILE] [--check RELATIVE]\n", argv[0]);
      return 2;
    }
  }
  // Activations dominate: long sequences and batches over narrow models.
  const std::vector<Model> models{{"h64_L4_s256_b8", 64, 4, 4, 256, 8, 256},
                                  {"h128_L8_s256_b8", 128, 8, 8, 512, 8, 256},
                                  {"h64_L4_s256_b8_bf16", 64, 4, 4, 256, 8, 256, true}};
  double worst = 0;
  bool recompute_saves = true;
  nlohmann::json cases = nlohmann::json::array();
  std::printf("%-18s %-10s %10s %10s %14s %14s %14s %10s\n", "model", "recompute", "step ms", "bwd ms", "held B", "transient B",
              "model act. B", "unshard B");
  for (const Model& m : models) {
    int64_t stored = 0;
    for (bool recompute : {false, true}) {
      const Measured r = run(m, recompute, steps);
      if (!recompute) stored = r.transient;
      else recompute_saves = recompute_saves && r.transient < stored;
      TransformerConfig tc = preset_config("tiny");
      tc.hidden = m.hidden, tc.layers = m.layers, tc.heads = m.heads, tc.kv_heads = m.heads, tc.intermediate = m.intermediate;
      const int64_t predicted = activation_bytes(tc, m.batch, m.seq, m.bf16 ? c10::kBFloat16 : c10::kFloat, recompute, false);
      worst = std::max(worst, std::abs(static_cast<double>(predicted) / static_cast<double>(r.transient) - 1));
      std::printf("%-18s %-10s %10.1f %10.1f %14lld %14lld %14lld %10lld\n", m.name.c_str(), recompute ? "yes" : "no", r.step_ms,
                  r.backward_ms, static_cast<long long>(r.between_steps), static_cast<long long>(r.transient),
                  static_cast<long long>(predicted), static_cast<long long>(r.unshard_bytes));
      cases.push_back({{"model", m.name}, {"hidden", m.hidden}, {"layers", m.layers}, {"heads", m.heads},
                       {"intermediate", m.intermediate}, {"batch", m.batch}, {"seq", m.seq}, {"recompute", recompute},
                       {"step_ms", r.step_ms}, {"backward_ms", r.backward_ms}, {"held_bytes", r.between_steps},
                       {"transient_bytes", r.transient}, {"model_activation_bytes", predicted},
                       {"unshard_bytes", r.unshard_bytes}, {"compute_dtype", m.bf16 ? "bf16" : "fp32"}});
    }
  }
  std::printf("the activation model against the allocator's count: largest relative difference %.1f %%; recompute %s\n",
              100 * worst, recompute_saves ? "lowers the transient memory in every case" : "DOES NOT lower the transient memory");
  if (!json_path.empty()) {
    const nlohmann::json out{{"benchmark", "bench_recompute"}, {"steps", steps}, {"world_size", 1}, {"cases", cases}};
    write_file_atomic(json_path, out.dump(1) + "\n");
    std::printf("wrote %s\n", json_path.c_str());
  }
  if (check > 0 && (worst > check || !recompute_saves)) {
    std::printf("bench_recompute: FAILED: the model is off by %.1f %% (bound %.0f %%)\n", 100 * worst, 100 * check);
    return 1;
  }
  if (check > 0) std::printf("bench_recompute: the activation model is within %.0f %% of the count\n", 100 * check);
  return 0;
}
