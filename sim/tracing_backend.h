// A c10d backend for `mfsdp simulate` (sim/simulate.h): it completes every collective at once and
// moves nothing, so one rank can run its real step alone, on `meta` tensors, and its
// RecordingBackend log is the ordered list of collectives that step issues.
//
// Tensors that hold data (the runtime's control tensors: plan hashes, non-finite flags, losses)
// get what they would hold if every rank had contributed the same values as this one: an
// all-gather repeats the input, a SUM all-reduce or reduce multiplies by the group size, a
// reduce-scatter takes this rank's chunk times the group size. Meta tensors are left alone.
//
// Beside each call it keeps the size the collective model prices (sim/collective_model.h):
// the tensor for broadcast, reduce and all-reduce; the gathered output for all-gather; one rank's
// input for reduce-scatter; for an all-to-all, the most bytes one rank of the group sends or
// receives, assuming every rank's splits are shaped like this rank's (true of the runtime's
// all-to-alls, where each rank sends the same amount to a given destination).
#pragma once

#include "sim/hardware.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace mfsdp {

// Which of a rank's groups a collective went to: the world or, on an HSDP mesh
// (core/dist/mesh.h), its shard group or its replicate group.
enum class TraceGroup { world, shard, replicate };
const char* to_string(TraceGroup group);

struct TracedCall {
  CollectiveKind kind = CollectiveKind::broadcast;
  int64_t bytes = 0;  // as the collective model reads it (above)
  TraceGroup group = TraceGroup::world;
};

class TracingBackend final : public c10d::Backend {
 public:
  // `log`: shared by the backends of one rank's groups, so that their calls keep one issue order
  // (a new log when none is given).
  TracingBackend(int rank, int size, TraceGroup group = TraceGroup::world,
                 std::shared_ptr<std::vector<TracedCall>> log = nullptr)
      : c10d::Backend(rank, size), group_(group), log_(log ? std::move(log) : std::make_shared<std::vector<TracedCall>>()) {}

  const std::vector<TracedCall>& calls() const { return *log_; }
  const std::shared_ptr<std::vector<TracedCall>>& log() const { return log_; }

  const std::string getBackendName() const override { return "trace"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  c10::intrusive_ptr<c10d::Work> done(CollectiveKind kind, int64_t bytes);
  TraceGroup group_;
  std::shared_ptr<std::vector<TracedCall>> log_;
};

}  // namespace mfsdp
