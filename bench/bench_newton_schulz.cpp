// Newton–Schulz throughput next to the raw matmul throughput of the same machine, so the ratio to
// the machine's own limit shows. FLOPs counted as 2 x multiply-adds: per iteration X X^T
// (2 s^2 l), the quintic's gram * gram (2 s^3) and update * X (2 s^2 l), s the short side, l the
// long one; matmul n x n x n counts 2 n^3. Inputs fp32 or bf16 (Newton–Schulz itself runs in bf16,
// as torch.optim.Muon). CPU sizes by default; on a CUDA machine 1024..8192 on the GPU as well.
//
//   build/bench/bench_newton_schulz                      # every case
//   build/bench/bench_newton_schulz --benchmark_filter=NewtonSchulz/1024/1024
#include "core/optim/optim.h"

#include <ATen/Context.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <benchmark/benchmark.h>

namespace mfsdp {
namespace {

at::ScalarType dtype_of(int64_t code) { return code == 0 ? at::kFloat : at::kBFloat16; }
at::Device device_of(int64_t code) { return code == 0 ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0); }
void sync(const at::Tensor& t) { (void)t.flatten()[0].item<float>(); }  // waits for the device

void BM_NewtonSchulz(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const auto opts = at::TensorOptions().dtype(dtype_of(state.range(2))).device(device_of(state.range(3)));
  const at::Tensor g = at::randn({rows, cols}, opts);
  const MuonOptions o;
  sync(newton_schulz(g, o));  // warm-up
  for (auto _ : state) {
    at::Tensor x = newton_schulz(g, o);
    sync(x);
  }
  const double s = static_cast<double>(std::min(rows, cols)), l = static_cast<double>(std::max(rows, cols));
  const double flops = o.ns_steps * (4 * s * s * l + 2 * s * s * s);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(state.range(3) ? "cuda " : "cpu ") + (state.range(2) ? "bf16 input" : "fp32 input"));
}

void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto opts = at::TensorOptions().dtype(dtype_of(state.range(1))).device(device_of(state.range(2)));
  const at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
  sync(at::matmul(a, b));
  for (auto _ : state) sync(at::matmul(a, b));
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(state.range(2) ? "cuda " : "cpu ") + (state.range(1) ? "bf16" : "fp32"));
}

void register_all() {
  // CPU sizes stay small: without native bf16 (no AVX512-BF16/AMX) bf16 matmuls are emulated.
  std::vector<std::pair<int64_t, int64_t>> cpu_shapes{{256, 256}, {512, 512}, {256, 768}, {768, 256}};
  for (auto [r, c] : cpu_shapes)
    for (int64_t dt : {0, 1})
      benchmark::RegisterBenchmark("NewtonSchulz", BM_NewtonSchulz)->Args({r, c, dt, 0})->Unit(benchmark::kMillisecond);
  for (int64_t n : {256, 512})
    for (int64_t dt : {0, 1}) benchmark::RegisterBenchmark("Matmul", BM_Matmul)->Args({n, dt, 0})->Unit(benchmark::kMillisecond);
  if (!at::globalContext().hasCUDA()) return;
  for (int64_t n : {1024, 2048, 4096, 8192}) {
    for (int64_t dt : {0, 1}) {
      benchmark::RegisterBenchmark("NewtonSchulz", BM_NewtonSchulz)->Args({n, n, dt, 1})->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark("Matmul", BM_Matmul)->Args({n, dt, 1})->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RegisterBenchmark("NewtonSchulz", BM_NewtonSchulz)->Args({4096, 12288, 1, 1})->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace mfsdp

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  mfsdp::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
