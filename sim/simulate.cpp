#include "sim/simulate.h"

#include "core/dist/mesh.h"
#include "core/plan/memory_model.h"
#include "core/plan/planner.h"
#include "sim/collective_model.h"
#include "harness/placements.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <vector>

namespace mfsdp {
namespace {

// Multiply-adds of the optimizer step on each rank: which rank steps which tensor, per placement.
//   owner   the plan's owners (the memory model's per-rank cost)
//   zero1   the same, on ZeRO-1's whole-tensor plan
//   reconstruct, ddp   every rank steps every tensor (Newton–Schulz redundantly on each; AdamW
//           on its rows only under reconstruct)
//   alltoall  matrix k of the even matrices on rank k mod W (the rounds of reference/alltoall.h);
//           AdamW on every rank's rows
//   HSDP (R replica groups of S): owner from the memory model over all R x S ranks (dedup: each
//           shard stepped by one replica); reconstruct and alltoall as at S, on every replica
std::vector<double> optimizer_macs_per_rank(const SimConfig& c, const ModelSpec& spec, const PlanUsage& owner_usage,
                                            const MemoryModelOptions& mm) {
  const int R = c.train.runtime.replicas;
  if (R > 1 && c.placement != Placement::owner && c.placement != Placement::ddp) {
    SimConfig shard = c;
    shard.world_size = c.world_size / R;
    shard.train.runtime.replicas = 1;
    const std::vector<double> per_shard_rank = optimizer_macs_per_rank(shard, spec, owner_usage, mm);
    std::vector<double> macs(c.world_size);
    for (int g = 0; g < c.world_size; ++g) macs[g] = per_shard_rank[g % shard.world_size];
    return macs;
  }
  const int W = c.world_size;
  std::vector<double> macs(W, 0.0);
  const OptimizerKind matrix_opt = c.train.runtime.optimizer;
  auto cost_of = [&](const ParamSpec& p, OptimizerKind kind) {
    const int64_t rows = p.shape.size() >= 2 ? p.shape[p.shape.size() - 2] : 1, cols = p.shape.back();
    const int64_t slices = p.shape.size() == 3 ? p.shape[0] : 1;
    return slices * optimizer_step_cost(kind, rows, cols, mm.cost);
  };
  auto is_matrix = [](const ParamSpec& p) { return matrix_kind(p.kind); };
  switch (c.placement) {
    case Placement::owner:
      for (const RankUsage& r : owner_usage.ranks) macs[r.rank] = r.optimizer_cost;
      break;
    case Placement::zero1: {
      const OwnershipPlan plan = make_plan(spec, W, planner_options_for(Placement::zero1, c.train.planner));
      const PlanUsage usage = plan_usage(plan, mm);
      for (const RankUsage& r : usage.ranks) macs[r.rank] = r.optimizer_cost;
      break;
    }
    case Placement::ddp:
      for (const ParamSpec& p : spec.params)
        for (double& m : macs) m += cost_of(p, is_matrix(p) ? matrix_opt : OptimizerKind::adamw);
      break;
    case Placement::reconstruct:
    case Placement::alltoall: {
      int k = 0;
      for (const ParamSpec& p : spec.params) {
        if (!is_matrix(p)) {
          for (double& m : macs) m += cost_of(p, OptimizerKind::adamw) / W;
          continue;
        }
        const double cost = cost_of(p, OptimizerKind::muon);
        if (c.placement == Placement::reconstruct && c.reconstruct_ns == SimConfig::ReconstructNs::sharded) {
          for (double& m : macs) m += cost / W;  // each rank its rows of every product
        } else if (c.placement == Placement::reconstruct) {
          for (double& m : macs) m += cost;
        } else {
          macs[k++ % W] += cost;
        }
      }
      break;
    }
  }
  return macs;
}

// Ranks traced one by one when they share a node's compute slots (a CPU's thread ranks).
constexpr int kShareTracedRanks = 64;

const char* memory_placement_name(Placement p) {
  switch (p) {
    case Placement::owner: return "owner";
    case Placement::reconstruct:
    case Placement::alltoall: return "zero3";
    case Placement::zero1: return "zero1";
    case Placement::ddp: return "ddp";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown Placement");
}

}  // namespace

double compute_seconds(const StageCompute& sc, const HardwareProfile& hw, Stage stage) {
  const double per_op = stage == Stage::optimizer && hw.optimizer_op_overhead_s > 0 ? hw.optimizer_op_overhead_s : hw.op_overhead_s;
  double t = static_cast<double>(sc.ops) * per_op;
  for (int b = 0; b < kProductSizeBuckets; ++b) {
    const double n = std::exp2(static_cast<double>(b) / kProductSizeBucketsPerOctave);
    if (sc.bf16_by_size[b] > 0) t += sc.bf16_by_size[b] / hw.matmul_rate(true, n);
    if (sc.fp32_by_size[b] > 0) t += sc.fp32_by_size[b] / hw.matmul_rate(false, n);
  }
  return t;
}

std::vector<double> processor_sharing_finishes(const std::vector<double>& work, double slots) {
  TORCH_CHECK(slots > 0, "processor sharing over ", slots, " slots");
  std::vector<size_t> order(work.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return work[a] < work[b]; });
  std::vector<double> finish(work.size());
  double t = 0, done = 0;  // every unfinished job has done `done` seconds of its work by time t
  const size_t n = work.size();
  for (size_t i = 0; i < n; ++i) {
    const double rate = std::min(1.0, slots / static_cast<double>(n - i));
    t += (work[order[i]] - done) / rate;
    done = work[order[i]];
    finish[order[i]] = t;
  }
  return finish;
}

double processor_sharing_finish(const std::vector<double>& work, double slots) {
  const std::vector<double> f = processor_sharing_finishes(work, slots);
  return f.empty() ? 0 : *std::max_element(f.begin(), f.end());
}

double forward_flops(const TransformerConfig& m, int64_t batch, int64_t seq) {
  const TransformerModel model(m);
  double weights = 0;  // elements of the weights every token multiplies with
  for (const ParamSpec& p : model.spec().params) {
    if (p.shape.size() != 2 || p.kind == ParamKind::embedding) continue;
    weights += static_cast<double>(p.numel());
  }
  if (m.tie_embeddings) weights += static_cast<double>(m.vocab * m.hidden);  // the head's matmul
  const double tokens = static_cast<double>(batch * seq);
  const double attention = 4.0 * static_cast<double>(m.layers) * batch * static_cast<double>(seq) * seq *
                           static_cast<double>(m.heads * m.head_dim());
  return 2.0 * weights * tokens + attention;
}

int64_t activation_bytes(const TransformerConfig& m, int64_t batch, int64_t seq, c10::ScalarType dtype, bool checkpointing,
                         bool fused_attention) {
  // What this model's autograd graph keeps (core/train/model.cpp; docs/recompute.md derives it and
  // bench_recompute measures it), per layer, with e the compute dtype's bytes and no dropout:
  //   each RMSNorm: its input as float32 (in fp32 the input itself), the normalised x in the
  //     compute dtype and the output the projections read: 3·sbh·e in fp32, (4 + 2·e)·sbh in bf16;
  //   q, k, v and the attention output before the o projection: 4·sbh·e (kv_heads taken as heads);
  //   the softmax output a·s²·b in float32, and in bf16 also its cast the value product reads
  //     (fused attention keeps neither);
  //   the MLP: gate, SiLU(gate), up and their product (ungated: the two ups concatenated and
  //     GELU's output, the same count): 4·sbI·e.
  // Plus the head (its RMSNorm and the log-softmax of the logits in float32: 3·sbh·e + sbV·4) and
  // the backward's largest temporary, the softmax's gradient (a·s²·b·4; none when fused). With
  // checkpointing only each block's input stays (L·sbh·e) and one block's graph exists at a time.
  const double s = static_cast<double>(seq), b = static_cast<double>(batch), h = static_cast<double>(m.hidden);
  const double I = static_cast<double>(m.intermediate), a = static_cast<double>(m.heads), V = static_cast<double>(m.vocab);
  const double e = static_cast<double>(c10::elementSize(dtype));
  const bool fp32 = e == 4;
  const double norm = (fp32 ? 3 * e : 4 + 2 * e) * s * b * h;
  const double scores = fused_attention ? 0 : a * s * s * b * (fp32 ? 4 : 4 + e);
  const double per_layer = 2 * norm + 4 * s * b * h * e + scores + 4 * s * b * I * e;
  const double head = norm + s * b * V * 4;
  const double temporary = fused_attention ? 0 : a * s * s * b * 4;
  const double L = static_cast<double>(m.layers);
  const double total = (checkpointing ? L * s * b * h * e + per_layer : L * per_layer) + head + temporary;
  return static_cast<int64_t>(total);
}

namespace {

// The simulator's stages, in the order simulate() runs them.

// 1. Where the work is: the HSDP mesh, the owner plan's usage and every rank's optimizer work;
// the rank traced is the one with the most (every rank issues the same collectives and computes
// the same forward and backward; the optimizer step is what differs).
struct Layout {
  MeshShape mesh;
  MemoryModelOptions memory;
  PlanUsage usage;
  std::vector<double> macs;  // per rank
  int busiest = 0;
};

Layout lay_out(const SimConfig& c, const ModelSpec& spec) {
  Layout l;
  // HSDP: R replica groups of S ranks (core/dist/mesh.h), the plan made for S.
  l.mesh = mesh_shape(c.world_size, c.train.runtime.replicas);
  l.memory.optimizer = c.train.runtime.optimizer;
  l.memory.cost = OptimizerCostConfig(c.train.runtime);
  l.memory.precision = c.train.runtime.precision;
  l.memory.replicas = l.mesh.replicas;
  l.memory.step_mode = c.train.runtime.step_mode;
  l.memory.grad_accum = c.train.grad_accum;
  l.memory.deferred = c.train.runtime.grad_reduce == GradReduce::deferred;
  l.memory.whole_model_gathered = c.train.runtime.comm_groups == CommGroups::model;
  l.usage = plan_usage(make_plan(spec, l.mesh.shard, c.train.planner), l.memory);
  l.macs = optimizer_macs_per_rank(c, spec, l.usage, l.memory);
  l.busiest = static_cast<int>(std::max_element(l.macs.begin(), l.macs.end()) - l.macs.begin());
  return l;
}

bool sharded_newton_schulz(const SimConfig& c) {
  return c.placement == Placement::reconstruct && c.reconstruct_ns == SimConfig::ReconstructNs::sharded;
}

void price(StageTime& st, CollectiveKind kind, int64_t bytes, const GroupShape& shape, const HardwareProfile& hw,
           double slowdown = 1.0) {
  ++st.calls;
  st.bytes += bytes;
  st.comm_s += slowdown * collective_seconds(kind, bytes, shape, hw);
}

// 3. The traced collectives, each over its group's shape. The traced rank's groups, node-major:
// the world; on a mesh its shard group (replica r: ranks r·S … r·S + S − 1) and its replicate
// group (shard rank s: s, S + s, …).
std::array<GroupShape, 3> group_shapes(const MeshShape& mesh, int W, int rank, const HardwareProfile& hw) {
  std::array<GroupShape, 3> shapes;
  std::vector<int> world(W), shard(mesh.shard), replicate(mesh.replicas);
  std::iota(world.begin(), world.end(), 0);
  const int r = rank / mesh.shard, s = rank % mesh.shard;
  for (int i = 0; i < mesh.shard; ++i) shard[i] = r * mesh.shard + i;
  for (int i = 0; i < mesh.replicas; ++i) replicate[i] = i * mesh.shard + s;
  shapes[static_cast<int>(TraceGroup::world)] = group_shape(world, hw);
  shapes[static_cast<int>(TraceGroup::shard)] = group_shape(shard, hw);
  shapes[static_cast<int>(TraceGroup::replicate)] = group_shape(replicate, hw);
  return shapes;
}

void price_collectives(const SimConfig& c, const StepTrace& trace, const std::array<GroupShape, 3>& shapes, SimResult& r) {
  const HardwareProfile& hw = c.profile;
  // A node whose ranks share its compute slots (a CPU's thread ranks): every group of a mesh runs
  // its collective at the same time as the others, so the node's ranks, not only the group's,
  // contend for the cores. A group's fit was measured with its own ranks alone (each running at
  // slots / n of a core); with all the node's ranks running, each runs at slots / ranks, so the
  // group's collective takes ranks / max(n, slots) times as long.
  const int node_ranks = std::min(c.world_size, hw.ranks_per_node);
  std::array<double, 3> contention{};
  for (size_t g = 0; g < shapes.size(); ++g)
    contention[g] = node_ranks <= hw.compute_slots_per_node || shapes[g].ranks >= node_ranks
                        ? 1.0
                        : node_ranks / std::max(static_cast<double>(shapes[g].ranks), hw.compute_slots_per_node);
  const bool sharded_ns = sharded_newton_schulz(c);
  const auto& all = trace.collectives;
  for (size_t i = 0, j = 0; i < all.size(); i = j) {
    const TracedCollective& t = all[i];
    // A group of collectives (Communicator::group, its parts consecutive) is one call.
    for (j = i + 1; t.coalesced >= 0 && j < all.size() && all[j].coalesced == t.coalesced;) ++j;
    if (sharded_ns && t.stage == Stage::optimizer) continue;  // priced by price_sharded_newton_schulz
    const int g = static_cast<int>(t.group);
    StageTime& st = r.stages[static_cast<int>(t.stage)];
    if (t.coalesced < 0) {
      price(st, t.kind, t.bytes, shapes[g], hw, contention[g]);
      continue;
    }
    // A group of broadcasts: one broadcast_group of their bytes together (its own fit where
    // calibrate measured one; else one broadcast's latency, the parts' bytes over the links). Any
    // other group: its largest part's latency once, plus every part's bandwidth term.
    bool broadcasts = true;
    int64_t bytes = 0;
    double latency = 0, bandwidth = 0;
    for (size_t k = i; k < j; ++k) {
      broadcasts = broadcasts && all[k].kind == CollectiveKind::broadcast;
      bytes += all[k].bytes;
      const double l = collective_seconds(all[k].kind, 0, shapes[g], hw);
      latency = std::max(latency, l);
      bandwidth += collective_seconds(all[k].kind, all[k].bytes, shapes[g], hw) - l;
    }
    ++st.calls;
    st.parts += static_cast<int64_t>(j - i);
    st.bytes += bytes;
    st.comm_s += contention[g] * (broadcasts ? collective_seconds(CollectiveKind::broadcast_group, bytes, shapes[g], hw)
                                             : latency + bandwidth);
  }
}

// 4. Compute: the traced rank's matrix-product FLOPs at the matmul rate of their dtype, plus its
// dispatched operators at the profile's per-operator cost. Ranks of a node beyond its compute
// slots share them (a CPU: ranks are threads): up to kShareTracedRanks ranks, every rank of the
// node is traced and the stage ends when the busiest rank's work does under processor sharing;
// beyond, each rank's compute takes ranks / slots times its own. Returns the assumption it made
// about sharing ("" when the node's ranks do not share).
std::string price_compute(const SimConfig& c, const TrainConfig& traced_config, const StepTrace& trace, const Layout& l,
                          SimResult& r) {
  const HardwareProfile& hw = c.profile;
  const int W = c.world_size;
  const int ranks_here = std::min(W, hw.ranks_per_node);
  const bool sharing = ranks_here > hw.compute_slots_per_node;
  const double share = sharing ? static_cast<double>(ranks_here) / hw.compute_slots_per_node : 1.0;
  std::array<std::vector<double>, kNumStages> node_work;  // every rank's compute alone, when traced
  char slots[32];
  std::snprintf(slots, sizeof(slots), "%.3g", hw.compute_slots_per_node);
  std::string sharing_note =
      sharing ? std::string("compute: ranks beyond the node's ") + slots + " compute slots share them, each taking ranks / slots times longer"
              : "";
  if (sharing && ranks_here <= kShareTracedRanks) {
    for (int rank = 0; rank < ranks_here; ++rank) {
      const StepTrace t = rank == l.busiest ? trace : trace_step(traced_config, W, rank);
      for (int s = 0; s < kNumStages; ++s) node_work[s].push_back(compute_seconds(t.compute[s], hw, static_cast<Stage>(s)));
    }
    sharing_note = "compute: the node's " + std::to_string(ranks_here) + " ranks traced, sharing its " +
                   slots + " compute slots (processor sharing)";
  }
  const int opt = static_cast<int>(Stage::optimizer);
  const bool optimizer_without_collectives = r.stages[opt].calls == 0 && !(sharded_newton_schulz(c) && W > 1);
  for (int s = 0; s < kNumStages; ++s) {
    const double own = compute_seconds(trace.compute[s], hw, static_cast<Stage>(s));
    if (node_work[s].empty()) {
      r.stages[s].compute_s = own * share;
      // An optimizer stage without collectives lets each rank go on to the next step as soon as
      // its own update is done; the first to leave waits at the next step's first collective for
      // the last (with one rank traced: its work scaled by the least-busy rank's share of it).
      if (s == opt && optimizer_without_collectives && l.macs[l.busiest] > 0)
        r.optimizer_wait_s = own * share * (1 - *std::min_element(l.macs.begin(), l.macs.end()) / l.macs[l.busiest]);
    } else {
      const std::vector<double> f = processor_sharing_finishes(node_work[s], hw.compute_slots_per_node);
      const auto [first, last] = std::minmax_element(f.begin(), f.end());
      r.stages[s].compute_s = *last;
      if (s == opt && optimizer_without_collectives) r.optimizer_wait_s = *last - *first;
    }
    r.stages[s].flops = trace.compute[s].flops_bf16 + trace.compute[s].flops_fp32;
    r.stages[s].ops = trace.compute[s].ops;
  }
  if (c.activation_checkpointing && !traced_config.runtime.activation_checkpointing) {  // a replica: by formula
    r.stages[1].compute_s += r.stages[0].compute_s;
    r.stages[1].flops += r.stages[0].flops;
    r.stages[1].ops += r.stages[0].ops;
  }
  r.optimizer_flops_busiest_rank = r.stages[2].flops;
  return sharing_note;
}

// 5. reconstruct's sharded Newton–Schulz, which no placement runs: its optimizer stage from a
// formula instead of the trace.
void price_sharded_newton_schulz(const SimConfig& c, const ModelSpec& spec, const Layout& l, const GroupShape& world,
                                 SimResult& r) {
  const HardwareProfile& hw = c.profile;
  r.traced_optimizer = false;
  StageTime& st = r.stages[static_cast<int>(Stage::optimizer)];
  for (const ParamSpec& p : spec.params) {
    if (!matrix_kind(p.kind) || p.shape.size() != 2) continue;
    const int64_t m = std::min(p.shape[0], p.shape[1]), n = std::max(p.shape[0], p.shape[1]);
    price(st, CollectiveKind::allreduce, 4, world, hw);
    const MuonOptions& mo = c.train.runtime.muon;
    for (int it = 0; it < ns_steps_of(ns_variant_info(mo.ns_variant), mo.ns_steps); ++it) {
      price(st, CollectiveKind::allgather, m * n * 2, world, hw);
      price(st, CollectiveKind::allgather, m * m * 2, world, hw);
    }
  }
  // Each rank its rows of every product: the cost model's multiply-adds over W, in bf16.
  const int ranks_here = std::min(c.world_size, hw.ranks_per_node);
  const double share = ranks_here > hw.compute_slots_per_node ? static_cast<double>(ranks_here) / hw.compute_slots_per_node : 1.0;
  r.optimizer_flops_busiest_rank = 2 * l.macs[l.busiest];
  st.flops = r.optimizer_flops_busiest_rank;
  st.compute_s = r.optimizer_flops_busiest_rank / hw.matmul_bf16_flops * share;
}

// 6. Memory per rank: the memory model's resident and transient bytes plus activations.
void price_memory(const SimConfig& c, const Layout& l, SimResult& r) {
  const std::string mem_name = memory_placement_name(c.placement);
  for (const PlacementMemory& pm : l.usage.placements) {
    if (pm.placement != mem_name) continue;
    r.resident_bytes = pm.max_resident_bytes;
    r.transient_bytes = pm.max_peak_bytes - pm.max_resident_bytes;
  }
  r.activation_bytes = activation_bytes(c.train.model, c.train.batch, c.train.seq, c.train.runtime.precision.param_dtype,
                                        c.activation_checkpointing, c.fused_attention);
  r.peak_bytes = r.resident_bytes + r.transient_bytes + r.activation_bytes;
  r.fits = r.peak_bytes <= c.profile.device_memory_bytes;
}

// 7. What the numbers assume, in words.
std::vector<std::string> assumptions(const SimConfig& c, const MeshShape& mesh, const std::string& sharing_note) {
  const bool sharded_ns = sharded_newton_schulz(c);
  std::vector<std::string> a = {
      "collectives: the traced step's own, in order, priced one after another (no overlap with compute)",
      "ranks node-major, " + std::to_string(c.profile.ranks_per_node) + " per node",
      "uneven all-to-alls priced at their busiest rank, every rank's splits shaped like rank 0's",
      "compute: the traced rank's matrix-product FLOPs at the profile's matmul rate for their dtype, plus its ATen "
      "operators at the profile's per-operator cost" +
          std::string(!c.activation_checkpointing ? ""
                      : runs_on_owner_runtime(c.placement)
                          ? "; checkpointing: the traced backward recomputes each block on its revived buffer"
                          : "; checkpointing: the replicas do not recompute here, one forward added to the backward"),
      "the traced rank: the one with the most optimizer work by the cost model",
      std::string("activations: what this model's autograd graph keeps (docs/recompute.md, measured by bench_recompute), ") +
          (c.fused_attention ? "fused attention (no S² scores kept)" : "scores and softmax kept (the model's attention)"),
  };
  if (!sharing_note.empty()) a.push_back(sharing_note);
  if (scheduled(c.train.lr_schedule))
    a.push_back("learning-rate schedule " + describe(c.train.lr_schedule) +
                ": it changes no collective and no kernel, so it is not priced");
  if (mesh.replicas > 1 && c.placement == Placement::ddp)
    a.push_back("ddp on a mesh: the oracle's world all-gathers, summed in the mesh's order");
  else if (mesh.replicas > 1)
    a.push_back("HSDP: " + std::to_string(mesh.replicas) + " replica groups of " + std::to_string(mesh.shard) +
                " ranks (the plan made for " + std::to_string(mesh.shard) + "), step mode " +
                to_string(c.train.runtime.step_mode) +
                "; shard groups are consecutive ranks (node-major), replicate groups every S-th rank");
  if (c.placement == Placement::reconstruct && !sharded_ns)
    a.push_back("reconstruct: one all-gather per matrix in the step, Newton–Schulz on every rank (reference/reconstruct.h, traced)");
  if (sharded_ns)
    a.push_back("reconstruct (sharded NS, priced from a formula, not traced): per matrix an all-reduce of the norm and per "
                "iteration all-gathers of X (m·n) and X·Xᵀ (m·m) in bf16; each rank computes 1/W of every product");
  if (c.placement == Placement::ddp)
    a.push_back("ddp: the oracle's gradient all-gather per parameter (summed in rank order), not an all-reduce");
  return a;
}

}  // namespace

SimResult simulate(const SimConfig& c) {
  const auto t0 = std::chrono::steady_clock::now();
  const HardwareProfile& hw = c.profile;
  const int W = c.world_size;
  TORCH_CHECK(W >= 1, "simulate: world size ", W, " (needs at least 1)");
  SimResult r;
  r.placement = to_string(c.placement);
  r.world_size = W;
  r.replicas = c.train.runtime.replicas;
  r.step_mode = r.replicas > 1 && c.placement != Placement::ddp ? to_string(c.train.runtime.step_mode) : "";
  r.nodes = (W + hw.ranks_per_node - 1) / hw.ranks_per_node;
  r.profile = hw.name;

  const TransformerModel model(c.train.model);
  const Layout l = lay_out(c, model.spec());  // 1. the rank to trace

  TrainConfig traced_config = c.train;  // 2. its real step, traced
  // Activation checkpointing: the owner runtime's placements trace their real recomputing step (the
  // blocks' forwards run again inside backward, counted there); the replicas do not recompute here,
  // so theirs is priced as one more forward of the blocks in the backward (price_compute).
  traced_config.runtime.activation_checkpointing = c.activation_checkpointing && runs_on_owner_runtime(c.placement);
  apply_placement(c.placement, traced_config);
  const StepTrace trace = trace_step(traced_config, W, l.busiest);
  r.traced_rank = l.busiest;
  r.traced_collectives = static_cast<int64_t>(trace.collectives.size());

  const bool sharded_ns = sharded_newton_schulz(c);
  TORCH_CHECK(!sharded_ns || l.mesh.replicas == 1, "simulate: --baseline-ns sharded is priced for a flat world only, not on an HSDP mesh (--replicas ",
              l.mesh.replicas, ")");
  if (sharded_ns) r.placement = "reconstruct/sharded-ns";
  const std::array<GroupShape, 3> shapes = group_shapes(l.mesh, W, l.busiest, hw);
  price_collectives(c, trace, shapes, r);                                // 3.
  const std::string sharing_note = price_compute(c, traced_config, trace, l, r);  // 4.
  if (sharded_ns && W > 1)                                               // 5.
    price_sharded_newton_schulz(c, model.spec(), l, shapes[static_cast<int>(TraceGroup::world)], r);
  for (const StageTime& st : r.stages) r.step_s += st.seconds();
  price_memory(c, l, r);                                                 // 6.
  r.assumptions = assumptions(c, l.mesh, sharing_note);                  // 7.
  r.trace_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

nlohmann::json to_json(const SimResult& r) {
  nlohmann::json j;
  j["placement"] = r.placement;
  j["world_size"] = r.world_size;
  j["replicas"] = r.replicas;
  if (!r.step_mode.empty()) j["step_mode"] = r.step_mode;
  j["nodes"] = r.nodes;
  j["profile"] = r.profile;
  for (int s = 0; s < kNumStages; ++s) {
    const StageTime& st = r.stages[s];
    j["stages"][to_string(static_cast<Stage>(s))] = {{"collectives", st.calls}, {"parts", st.parts}, {"bytes", st.bytes},
                                                     {"comm_s", st.comm_s},     {"compute_s", st.compute_s},
                                                     {"flops", st.flops},       {"ops", st.ops},
                                                     {"seconds", st.seconds()}};
  }
  j["step_s"] = r.step_s;
  j["optimizer_wait_s"] = r.optimizer_wait_s;
  j["optimizer_flops_busiest_rank"] = r.optimizer_flops_busiest_rank;
  j["memory"] = {{"resident_bytes", r.resident_bytes}, {"transient_bytes", r.transient_bytes},
                 {"activation_bytes", r.activation_bytes}, {"peak_bytes", r.peak_bytes}, {"fits", r.fits}};
  j["traced_rank"] = r.traced_rank;
  j["traced_collectives"] = r.traced_collectives;
  j["optimizer_collectives_traced"] = r.traced_optimizer;
  j["simulate_s"] = r.trace_s;
  j["assumptions"] = r.assumptions;
  return j;
}

}  // namespace mfsdp
