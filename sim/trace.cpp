#include "sim/trace.h"

#include "harness/placements.h"
#include "sim/tracing_backend.h"

#include <ATen/ops/empty.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/record_function.h>
#include <torch/library.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <mutex>

namespace mfsdp {

const char* to_string(Stage stage) {
  switch (stage) {
    case Stage::forward: return "forward";
    case Stage::backward: return "backward";
    case Stage::optimizer: return "optimizer";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown Stage");
}

namespace {

// Meta (shape-only) kernels for the operators the step runs that libtorch's C++ build has none
// for (PyTorch registers them from Python): without them a traced step stops at the first one.
at::Tensor index_select_meta(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) sizes[at::maybe_wrap_dim(dim, self.dim())] = index.numel();
  return at::empty(sizes, self.options());
}

at::Tensor embedding_dense_backward_meta(const at::Tensor& grad, const at::Tensor&, c10::SymInt num_weights, c10::SymInt, bool) {
  return at::empty({num_weights.expect_int(), grad.size(-1)}, grad.options());
}

// SOAP's eigenbasis (eigenvalues ascending, flipped to descending).
at::Tensor flip_meta(const at::Tensor& self, at::IntArrayRef) { return at::empty(self.sizes(), self.options()); }

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("flip", flip_meta);
  m.impl("index_select", index_select_meta);
  m.impl("embedding_dense_backward", embedding_dense_backward_meta);
}

std::atomic<ComputeCounter*> g_counter{nullptr};
thread_local int t_depth = 0;  // operators entered and not yet left on this thread

double dim(const c10::IValue& v, int64_t d) { return static_cast<double>(v.toTensor().size(d)); }

// FLOPs of a matrix product and whether its operands are 16-bit; 0 for any other operator.
double product_flops(const at::RecordFunction& fn, bool& half) {
  const std::string_view name = fn.name();
  const auto in = fn.inputs();
  auto operands = [&](size_t a, size_t b) -> std::pair<const c10::IValue*, const c10::IValue*> {
    if (in.size() <= b || !in[a].isTensor() || !in[b].isTensor()) return {nullptr, nullptr};
    return {&in[a], &in[b]};
  };
  std::pair<const c10::IValue*, const c10::IValue*> ab{nullptr, nullptr};
  bool batched = false;
  if (name == "aten::mm") ab = operands(0, 1);
  else if (name == "aten::addmm") ab = operands(1, 2);
  else if (name == "aten::bmm") ab = operands(0, 1), batched = true;
  else if (name == "aten::baddbmm") ab = operands(1, 2), batched = true;
  if (!ab.first) return 0;
  const at::ScalarType t = ab.first->toTensor().scalar_type();
  half = t == at::kBFloat16 || t == at::kHalf;
  const int o = batched ? 1 : 0;
  const double batch = batched ? dim(*ab.first, 0) : 1.0;
  return 2.0 * batch * dim(*ab.first, o) * dim(*ab.first, o + 1) * dim(*ab.second, o + 1);
}

// Activation checkpointing's backward node (core/runtime/owner_runtime.cpp, Recompute) re-runs a
// block's forward and evaluates that block's backward graph inside itself: it is a container, not
// an operator, so what it runs counts as the step's own operators (the forward's aten calls and the
// nested graph's node evaluations), as they count without recompute.
bool is_container(const at::RecordFunction& fn) {
  return std::string_view(fn.name()).find("::Recompute>") != std::string_view::npos;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  if (is_container(fn)) return nullptr;
  const int depth = t_depth++;
  if (ComputeCounter* c = g_counter.load()) {
    bool half = false;
    const double flops = product_flops(fn, half);
    c->count(depth == 0, flops, half);
  }
  return nullptr;
}

void on_leave(const at::RecordFunction& fn, at::ObserverContext*) {
  if (!is_container(fn)) --t_depth;
}

}  // namespace

ComputeCounter::ComputeCounter(std::vector<const RecordingBackend*> backends) : backends_(std::move(backends)) {
  ComputeCounter* none = nullptr;
  TORCH_CHECK(g_counter.compare_exchange_strong(none, this), "trace: compute is already being counted");
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(on_enter, on_leave).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
}

ComputeCounter::~ComputeCounter() {
  at::removeCallback(handle_);
  g_counter.store(nullptr);
}

void ComputeCounter::backward_begins() {
  std::lock_guard<std::mutex> lock(mutex_);
  backward_ = true;
}

void ComputeCounter::forward_begins() {
  std::lock_guard<std::mutex> lock(mutex_);
  backward_ = false;
}

void ComputeCounter::count(bool outermost, double flops, bool half) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool optimizer = std::any_of(backends_.begin(), backends_.end(), [](const RecordingBackend* b) {
    return b->phase() == Phase::optimizer_step || b->phase() == Phase::update_broadcast;
  });
  const Stage stage = optimizer ? Stage::optimizer : backward_ ? Stage::backward : Stage::forward;
  StageCompute& s = stages_[static_cast<int>(stage)];
  if (outermost) ++s.ops;
  if (flops <= 0) return;
  (half ? s.flops_bf16 : s.flops_fp32) += flops;
  const int bucket = std::clamp(static_cast<int>(std::lround(std::log2(flops / 2) / 3 * kProductSizeBucketsPerOctave)), 0,
                                kProductSizeBuckets - 1);
  (half ? s.bf16_by_size : s.fp32_by_size)[bucket] += flops;
}

StepTrace trace_step(const TrainConfig& config_in, int world_size, int rank) {
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "simulate: rank ", rank, " is not in a world of ",
              world_size);
  TORCH_CHECK(config_in.model.experts == 0, "simulate: MoE models are not traced yet (the dispatch reads token counts)");
  const auto t0 = std::chrono::steady_clock::now();
  TrainConfig config = config_in;
  config.runtime.device = at::kMeta;
  TransformerModel model(config.model, config.runtime.precision.output_dtype);
  ParamMap init;
  for (const ParamSpec& p : model.spec().params)
    init.emplace(p.name, at::empty(p.shape, at::TensorOptions().dtype(p.dtype).device(at::kMeta)));

  auto tracer = c10::make_intrusive<TracingBackend>(rank, world_size);
  Communicator comm(tracer);
  comm.backend().record_events(true);
  // HSDP: the mesh's shard and replicate groups trace into the world's log.
  RankContext ctx;
  ctx.rank = rank;
  ctx.world_size = world_size;
  ctx.backend = tracer;
  ctx.make_group = [&](const std::string& group, int r, int n) -> c10::intrusive_ptr<c10d::Backend> {
    return c10::make_intrusive<TracingBackend>(r, n, group == "shard" ? TraceGroup::shard : TraceGroup::replicate, tracer->log());
  };
  std::unique_ptr<PlacementRunner> runner = make_runner(model, comm, config, init, &ctx);
  // The rank's groups, in TraceGroup order: the world, then (HSDP) shard and replicate.
  std::vector<RecordingBackend*> groups{&comm.backend()};
  for (Communicator* g : runner->communicators()) groups.push_back(&g->backend());
  TORCH_INTERNAL_ASSERT(groups.size() == 1 || groups.size() == 3, "trace: a runner with ", groups.size() - 1, " sub-groups");
  for (RecordingBackend* g : groups) {
    g->record_events(true);
    g->clear_events();
  }
  const size_t before = tracer->calls().size();

  const auto ids = at::TensorOptions().dtype(at::kLong).device(at::kMeta);
  at::Tensor tokens = at::empty({config.batch, config.seq}, ids), targets = at::empty({config.batch, config.seq}, ids);
  StepTrace trace;
  // Gradient accumulation: the K micro-batches of the step, each a forward then a backward (its
  // collectives from `backward_from[m]` on are backward's, until the next micro-batch begins).
  const int K = std::max(1, config.grad_accum);
  std::vector<size_t> forward_from, backward_from;
  {
    ComputeCounter counter(std::vector<const RecordingBackend*>(groups.begin(), groups.end()));
    for (int m = 0; m < K; ++m) {
      forward_from.push_back(tracer->calls().size());
      counter.forward_begins();
      runner->forward_backward(tokens, targets, [&] {
        backward_from.push_back(tracer->calls().size());
        counter.backward_begins();
      }, MicroBatch{m, K});
    }
    runner->update();
    trace.compute = counter.stages();
  }
  auto in_backward = [&](size_t k) {
    bool backward = false;
    for (int m = 0; m < K; ++m) {
      if (k >= forward_from[m]) backward = false;
      if (m < static_cast<int>(backward_from.size()) && k >= backward_from[m]) backward = true;
    }
    return backward;
  };

  trace.world_size = world_size;
  trace.rank = rank;
  // Each group's log holds its own collectives in order; the shared call log, every group's in
  // the order they were issued.
  std::vector<std::vector<const BackendEvent*>> logged(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    for (const BackendEvent& e : groups[g]->events())
      if (e.collective) logged[g].push_back(&e);
  std::vector<size_t> next(groups.size(), 0);
  for (size_t k = before; k < tracer->calls().size(); ++k) {
    const TracedCall& call = tracer->calls()[k];
    const size_t g = static_cast<size_t>(call.group);
    TORCH_INTERNAL_ASSERT(g < groups.size() && next[g] < logged[g].size(), "trace: the tracer saw a collective on the ",
                          to_string(call.group), " group that its recording backend did not log");
    const BackendEvent& e = *logged[g][next[g]++];
    const Stage stage = e.phase == Phase::optimizer_step || e.phase == Phase::update_broadcast ? Stage::optimizer
                        : in_backward(k)                                                       ? Stage::backward
                                                                                               : Stage::forward;
    trace.collectives.push_back(
        TracedCollective{e.what, call.kind, e.phase, e.unit, stage, e.root, e.bytes, call.bytes, call.group, e.group});
  }
  for (size_t g = 0; g < groups.size(); ++g)
    TORCH_INTERNAL_ASSERT(next[g] == logged[g].size(), "trace: the ", to_string(static_cast<TraceGroup>(g)),
                          " group's recording backend logged a collective the tracer never saw");
  trace.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return trace;
}

}  // namespace mfsdp
