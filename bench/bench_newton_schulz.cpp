// Newton–Schulz throughput next to the raw matmul throughput of the same machine, so the ratio to
// the machine's own limit shows. FLOPs counted as 2 x multiply-adds: per iteration X X^T
// (2 s^2 l), the quintic's gram * gram (2 s^3) and update * X (2 s^2 l), s the short side, l the
// long one; matmul n x n x n counts 2 n^3. Inputs fp32 or bf16 (Newton–Schulz itself runs in bf16,
// as torch.optim.Muon). CPU sizes by default; on a CUDA machine 1024..8192 on the GPU as well.
//
//   build/bench/bench_newton_schulz                      # every case
//   build/bench/bench_newton_schulz --benchmark_filter=NewtonSchulz/1024/1024
//   build/bench/bench_newton_schulz --benchmark_filter=Experts   # per-slice vs batched (--batched-ns)
//   build/bench/bench_newton_schulz --benchmark_filter=NsVariant # every --ns-variant side by side
//
// NsVariant: each variant's time, FLOPs (2 x ns_multiply_adds, its own products: Gram's R and Q,
// AOL's reused A) and, after its steps on a Gaussian input, how orthogonal the result is: on the
// short side ||X X^T - I||_F / sqrt(s) and the singular values' smallest and largest (float64; for
// an expert stack, the worst slice).
#include "core/optim/optim.h"

#include <ATen/Context.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_svdvals.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/stack.h>
#include <ATen/TensorOperators.h>
#include <benchmark/benchmark.h>

#include <tuple>
#include <vector>

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

// Experts: Newton–Schulz over an expert tensor [E, out, in], once per slice (the per-matrix mode,
// bitwise 2-D Muon on each expert) or as one batched chain (--batched-ns). Counters: the batched
// mode's difference from the per-slice one on the same input (max |diff| and the Frobenius norm of
// the difference over the per-slice output's), and bitwise (1 when every element is equal).
void BM_ExpertsNewtonSchulz(benchmark::State& state) {
  const int64_t E = state.range(0), rows = state.range(1), cols = state.range(2);
  const bool batched = state.range(3) == 1;
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device_of(state.range(4)));
  const at::Tensor g = at::randn({E, rows, cols}, opts);
  const MuonOptions o;
  auto per_slice = [&] {
    std::vector<at::Tensor> out;
    for (int64_t e = 0; e < E; ++e) out.push_back(newton_schulz(g.select(0, e), o));
    return at::stack(out);
  };
  const at::Tensor a = per_slice().to(at::kFloat), b = newton_schulz_batched(g, o).to(at::kFloat);
  for (auto _ : state) sync(batched ? newton_schulz_batched(g, o) : per_slice());
  const double s = static_cast<double>(std::min(rows, cols)), l = static_cast<double>(std::max(rows, cols));
  state.counters["FLOP/s"] =
      benchmark::Counter(E * o.ns_steps * (4 * s * s * l + 2 * s * s * s), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["max_abs_diff"] = (a - b).abs().max().item<double>();
  state.counters["rel_fro_diff"] = ((a - b).norm() / a.norm()).item<double>();
  state.counters["bitwise"] = a.equal(b) ? 1 : 0;
  state.SetLabel(std::string(state.range(4) ? "cuda " : "cpu ") + (batched ? "batched" : "per-slice"));
}

void BM_NsVariant(benchmark::State& state) {
  const NsVariantInfo& v = ns_variants().at(static_cast<size_t>(state.range(0)));
  const int64_t E = state.range(1), rows = state.range(2), cols = state.range(3);
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device_of(state.range(4)));
  const at::Tensor g = E > 0 ? at::randn({E, rows, cols}, opts) : at::randn({rows, cols}, opts);
  MuonOptions o;
  o.ns_variant = v.id;
  o.ns_steps = ns_steps_of(v, o.ns_steps);
  const at::Tensor x = orthogonalize(g, o).to(at::kDouble).cpu();
  for (auto _ : state) sync(orthogonalize(g, o));
  const double flops = 2.0 * std::max<int64_t>(E, 1) * ns_multiply_adds(v, o.ns_steps, rows, cols);
  state.counters["GFLOP"] = flops / 1e9;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  double orth = 0, lo = 1e300, hi = 0;
  for (int64_t e = 0; e < std::max<int64_t>(E, 1); ++e) {
    at::Tensor m = E > 0 ? x.select(0, e) : x;
    if (rows > cols) m = m.t();
    const int64_t s = m.size(0);
    orth = std::max(orth, (at::matmul(m, m.t()) - at::eye(s, m.options())).norm().item<double>() / std::sqrt(double(s)));
    const at::Tensor sv = at::linalg_svdvals(m);
    lo = std::min(lo, sv.min().item<double>()), hi = std::max(hi, sv.max().item<double>());
  }
  state.counters["orth_err"] = orth;
  state.counters["sv_min"] = lo;
  state.counters["sv_max"] = hi;
  state.counters["steps"] = o.ns_steps;
  state.SetLabel(std::string(state.range(4) ? "cuda " : "cpu ") + v.name);
}

void register_variants(const std::vector<std::tuple<int64_t, int64_t, int64_t>>& shapes, int64_t device) {
  for (auto [E, r, c] : shapes)
    for (size_t i = 0; i < ns_variants().size(); ++i)
      benchmark::RegisterBenchmark("NsVariant", BM_NsVariant)
          ->Args({static_cast<int64_t>(i), E, r, c, device})
          ->Unit(benchmark::kMillisecond);
}

void register_all() {
  // Newton–Schulz variants on a 1024-wide model's matrices (attention square, MLP up and down) and
  // an expert stack, at CPU scale; on a GPU an 8B model's and Qwen3-30B-A3B's experts.
  register_variants({{0, 1024, 1024}, {0, 1024, 4096}, {0, 4096, 1024}, {8, 256, 512}}, 0);
  if (at::globalContext().hasCUDA())
    register_variants({{0, 4096, 4096}, {0, 4096, 14336}, {0, 14336, 4096}, {128, 768, 2048}}, 1);
  // Expert tensors: the tiny MoE model's, and slices of Mixtral/Qwen3-like aspect at CPU scale.
  for (auto [E, r, c] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{8, 128, 64}, {32, 192, 512}, {128, 96, 256}, {8, 512, 128}})
    for (int64_t batched : {0, 1})
      benchmark::RegisterBenchmark("ExpertsNewtonSchulz", BM_ExpertsNewtonSchulz)->Args({E, r, c, batched, 0})->Unit(benchmark::kMillisecond);
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
  for (int64_t batched : {0, 1})  // Qwen3-30B-A3B's 128 experts of [768, 2048]
    benchmark::RegisterBenchmark("ExpertsNewtonSchulz", BM_ExpertsNewtonSchulz)->Args({128, 768, 2048, batched, 1})->Unit(benchmark::kMillisecond);
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
