// One rank's real training step, run alone on `meta` tensors over the TracingBackend
// (sim/tracing_backend.h): the placement's own runner (harness/placements.h) issues its
// collectives exactly as in training, nothing is allocated and no arithmetic is done. The result
// is the ordered list of those collectives with the phase and unit each was issued in, which
// `mfsdp simulate` prices.
//
// Every rank of a placement issues the same collectives in the same order (they must, or the real
// run would hang), so one rank's trace is the step's schedule; what differs between ranks is the
// sizes of uneven all-to-alls, which TracingBackend bounds from the traced rank's splits.
#pragma once

#include "core/dist/recording_backend.h"
#include "sim/hardware.h"
#include "core/train/trainer.h"
#include "sim/tracing_backend.h"

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mfsdp {

// Where in the step a collective was issued: before the loss (forward), from the loss until the
// gradients are ready (backward), or in the optimizer step (phases optimizer_step and
// update_broadcast).
enum class Stage { forward, backward, optimizer };
constexpr int kNumStages = 3;
const char* to_string(Stage stage);

struct TracedCollective {
  std::string op;  // as the RecordingBackend names it ("broadcast", "_allgather_base", ...)
  CollectiveKind kind = CollectiveKind::broadcast;
  Phase phase = Phase::other;
  int unit = -1;
  Stage stage = Stage::forward;
  int root = -1;            // broadcast / reduce root, else -1
  int64_t input_bytes = 0;  // as the RecordingBackend counts them (the tensors handed in)
  int64_t bytes = 0;        // the size the collective model prices (TracedCall::bytes)
  TraceGroup group = TraceGroup::world;  // HSDP: the shard or replicate group it went to
  int coalesced = -1;  // the group of collectives (Communicator::group) it is a part of: one id for its parts, else -1
};

// The compute a stage dispatched, counted by a RecordFunction observer while the step ran: ATen
// operators called from outside any other operator (what a CPU pays dispatch overhead for), and
// the FLOPs of every matrix product (mm, addmm, bmm, baddbmm: 2·m·k·n each) by operand dtype.
// The FLOPs are kept by size too: bucket b holds the products whose cube-equivalent side
// (m·k·n)^(1/3) is nearest 2^(b/4) (small products run far below a CPU's peak rate).
constexpr int kProductSizeBucketsPerOctave = 4;
constexpr int kProductSizeBuckets = 24 * kProductSizeBucketsPerOctave;
struct StageCompute {
  int64_t ops = 0;
  double flops_bf16 = 0;  // bf16 and fp16 operands
  double flops_fp32 = 0;  // fp32 and wider
  std::array<double, kProductSizeBuckets> bf16_by_size{}, fp32_by_size{};
};

// Counts, while alive, the compute this process dispatches (a RecordFunction observer; one at a
// time). The stage is optimizer while one of `backends` (a rank's groups) is in phase
// optimizer_step or update_broadcast, else backward from backward_begins() until forward_begins(), else
// forward.
class ComputeCounter {
 public:
  explicit ComputeCounter(std::vector<const RecordingBackend*> backends = {});
  ~ComputeCounter();
  ComputeCounter(const ComputeCounter&) = delete;
  ComputeCounter& operator=(const ComputeCounter&) = delete;
  void backward_begins();
  void forward_begins();  // the next micro-batch's forward (gradient accumulation)
  // Read after the counted work is done.
  const std::array<StageCompute, kNumStages>& stages() const { return stages_; }
  // Called by the observer.
  void count(bool outermost, double flops, bool half);  // flops: 2·m·k·n of a product, else 0

 private:
  std::vector<const RecordingBackend*> backends_;
  bool backward_ = false;
  std::array<StageCompute, kNumStages> stages_{};
  std::mutex mutex_;
  uint64_t handle_;
};

struct StepTrace {
  int world_size = 1;
  int rank = 0;
  std::vector<TracedCollective> collectives;  // in issue order
  std::array<StageCompute, kNumStages> compute{};
  double seconds = 0;                         // how long tracing took
};

// Traces one step of config.placement (set with apply_placement) at `world_size` on `rank`, with
// config.batch x config.seq tokens per rank. On an HSDP mesh (config.runtime.replicas > 1) the
// rank's shard and replicate groups are tracing backends too, and each collective names its group.
// Refuses what it cannot trace (MoE dispatch, which reads token counts), naming it.
StepTrace trace_step(const TrainConfig& config, int world_size, int rank = 0);

}  // namespace mfsdp
