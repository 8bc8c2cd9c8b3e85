// `mfsdp simulate` (docs/simulate.md): one training step of a placement at a world size, priced on
// a hardware profile.
//   collectives  the placement's own, in order, from a traced step (sim/trace.h), each priced by
//                the α-β model (sim/collective_model.h) over the world's ranks (node-major); a group
//                (Communicator::group: a unit's segment broadcasts) as one call of its parts' bytes
//   compute      from the same traced step: the matrix-product FLOPs it dispatched, per stage and
//                dtype, over the profile's matmul rates, plus its ATen operators times the
//                profile's per-operator cost; the rank traced is the one the cost model
//                (core/plan/optimizer_cost.h) gives the most optimizer work
//   memory       the memory model (core/plan/memory_model.h) plus activations
// Phases add up: nothing overlaps (the deterministic runtime waits on each collective in turn).
#pragma once

#include "sim/hardware.h"
#include "core/train/trainer.h"
#include "sim/trace.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <string>
#include <vector>

namespace mfsdp {

struct SimConfig {
  TrainConfig train;  // model, planner, optimizer, precision, reduce mode, HSDP mesh (runtime.replicas,
                      // runtime.step_mode), batch and seq per rank
  Placement placement = Placement::owner;
  int world_size = 8;
  HardwareProfile profile;
  bool activation_checkpointing = false;
  bool fused_attention = false;  // activations without the S x S scores (the model keeps them)
  // The reconstruct placement's Newton–Schulz: `redundant` is reference/reconstruct.h as traced
  // (one all-gather of each matrix's update input, Newton–Schulz on every rank); `sharded` prices
  // Newton–Schulz on row-sharded tensors with implicit gathers (FSDP2 DTensor style), which no
  // placement here runs: per matrix an all-reduce of the norm, then per iteration an all-gather of
  // X (m·n) and of A = X·Xᵀ (m·m) in bf16, each rank computing its rows of every product (1/W).
  enum class ReconstructNs { redundant, sharded } reconstruct_ns = ReconstructNs::redundant;
};

struct StageTime {
  int64_t calls = 0;        // a group of collectives (Communicator::group) counts once
  int64_t parts = 0;        // collectives inside groups
  int64_t bytes = 0;        // priced bytes of its collectives
  double comm_s = 0;
  double compute_s = 0;
  double flops = 0;  // matrix products of the traced rank
  int64_t ops = 0;   // ATen operators it dispatched
  double seconds() const { return comm_s + compute_s; }
};

struct SimResult {
  std::string placement;
  int world_size = 0;
  int replicas = 1;       // HSDP: R replica groups of world_size / R ranks
  std::string step_mode;  // HSDP's step mode (replicated, dedup)
  int nodes = 0;
  std::string profile;
  std::array<StageTime, kNumStages> stages{};
  double step_s = 0;
  // How long the rank that finishes its optimizer step first waits at the next step's first
  // collective for the last one (0 when the optimizer stage issues collectives, whose last brings
  // the ranks together). A per-rank timer of the next forward counts it (bench_step's forward is
  // the slowest rank's); the step time does not add it (the busiest rank does not wait).
  double optimizer_wait_s = 0;
  double optimizer_flops_busiest_rank = 0;
  // Per rank, the largest: parameters + gradients + optimizer state between steps; the gathered
  // buffers at their peak; activations of one micro-batch; their sum, and whether it fits.
  int64_t resident_bytes = 0, transient_bytes = 0, activation_bytes = 0, peak_bytes = 0;
  bool fits = true;
  int traced_rank = 0;
  int64_t traced_collectives = 0;
  double trace_s = 0;  // time to trace and price (the simulator's own cost)
  std::vector<std::string> assumptions;
  bool traced_optimizer = true;  // false: the optimizer stage's collectives were priced from a formula
};

SimResult simulate(const SimConfig& config);

// Forward FLOPs of one rank's micro-batch (batch x seq tokens) by formula: 2·N·tokens over the
// weights every token multiplies with, plus attention 4·L·B·S²·(heads·head_dim). The traced
// forward dispatches exactly these (a test checks it).
double forward_flops(const TransformerConfig& model, int64_t batch, int64_t seq);
// Activation bytes of one rank's micro-batch: what this model's autograd graph keeps (docs/recompute.md;
// bench_recompute checks it against the allocator's count).
int64_t activation_bytes(const TransformerConfig& model, int64_t batch, int64_t seq, c10::ScalarType dtype,
                         bool checkpointing, bool fused_attention);

nlohmann::json to_json(const SimResult& result);

// Seconds one rank spends on a stage's compute alone: each matrix product at the profile's rate for
// its dtype and size (HardwareProfile::matmul_rate), plus its operators at the per-operator cost
// (the optimizer stage's own where the profile has one).
double compute_seconds(const StageCompute& compute, const HardwareProfile& profile, Stage stage);

// When the last of jobs of the given seconds of work, started together on `slots` processors
// shared equally among the unfinished ones, finishes (a CPU's thread ranks sharing its cores).
double processor_sharing_finish(const std::vector<double>& work, double slots);
// Each job's finishing time, in the order given.
std::vector<double> processor_sharing_finishes(const std::vector<double>& work, double slots);

}  // namespace mfsdp
