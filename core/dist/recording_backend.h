// Every collective of a rank, recorded where it cannot be bypassed: a c10d::Backend wrapping the
// real one (Gloo or NCCL). make_backend returns one, so no backend in the project can be reached
// without it, and a collective issued on the backend directly (not through the Communicator) is
// recorded all the same, under the phase in force — the proof behind "the step makes 0
// collectives" counts here, not only in the Communicator.
//
// Per phase it counts calls and the bytes of the tensors handed in; on request it also keeps an
// ordered log of every call (operation, phase, unit) interleaved with compute marks (e.g. "unit 3
// forward begins"), from which tests read the order collectives were issued in (prefetch).
// Operations it does not forward fail as the base class does ("does not support ...").
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp {

// update_broadcast: HSDP's dedup step mode sending each stepped matrix to the other replicas
// (core/runtime/owner_runtime.h); last so the older phases keep their indices.
// grad_norm: the global gradient norm of clipping (core/runtime/clipping.h), between the reduction
// and the step.
// qk_clip: QK-clip's agreement on each head's largest attention logit (core/train/qk_clip.h),
// between the last micro-batch and the step.
enum class Phase { unshard, grad_reduce, optimizer_step, checkpoint, other, update_broadcast, grad_norm, qk_clip };
constexpr int kNumPhases = 8;
const char* to_string(Phase phase);
// Where `phase` sits in a per-phase array (std::array<..., kNumPhases>): arrays are indexed by name.
constexpr size_t phase_index(Phase phase) { return static_cast<size_t>(phase); }

struct BackendCounters {
  int64_t calls = 0;  // a group (coalesced collectives) counts once
  int64_t bytes = 0;  // of the tensors handed in (the input side), a group's parts' together
  int64_t parts = 0;  // collectives issued inside groups
};

// One entry of the log: a collective as issued, or a mark the runtime placed between them.
struct BackendEvent {
  bool collective = true;
  std::string what;  // the operation ("broadcast", "reduce", ...) or the mark ("forward", "backward", ...)
  Phase phase = Phase::other;
  int unit = -1;      // the unit it belongs to, -1 when none
  int root = -1;      // broadcast / reduce root, else -1
  int64_t bytes = 0;  // as in BackendCounters
  int group = -1;     // the group (coalesced collectives) it is a part of: the same id for each part, else -1
};

class RecordingBackend final : public c10d::Backend {
 public:
  explicit RecordingBackend(c10::intrusive_ptr<c10d::Backend> inner);

  Phase phase() const { return phase_; }
  void set_phase(Phase phase) { phase_ = phase; }
  int unit() const { return unit_; }
  void set_unit(int unit) { unit_ = unit; }

  const BackendCounters& counters(Phase phase) const { return counters_[static_cast<int>(phase)]; }
  void reset_counters() { counters_ = {}; }

  // The log, kept only while enabled (a long run would grow it without bound).
  void record_events(bool on) { log_ = on; }
  const std::vector<BackendEvent>& events() const { return events_; }
  void clear_events() { events_.clear(); }
  void mark(const std::string& what, int unit);

  const std::string getBackendName() const override { return inner_->getBackendName(); }
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  void abort() override { inner_->abort(); }
  void shutdown() override { inner_->shutdown(); }
  void waitForPendingWorks() override { inner_->waitForPendingWorks(); }
  // Coalescing, c10d's group of collectives: those issued between startCoalescing and
  // endCoalescing are one group, counted as one call (with their bytes; `parts` counts them), each
  // logged with the group's id; endCoalescing returns the one Work to wait on. NCCL coalesces
  // them itself (one NCCL group: one launch). On any other backend this class does: the parts are
  // issued as they come and the returned Work waits for every one of them; on Gloo a broadcast in
  // a group travels as point-to-point messages (the root sends its tensor to every other rank and
  // each of them receives it once), all in flight together, where Gloo's broadcasts would wait
  // their turn on the process group's worker threads (docs/runtime.md: grouped collectives).
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  bool coalescing() const { return group_ >= 0; }

  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

 private:
  void record(const char* what, int64_t bytes, int root = -1);
  c10::intrusive_ptr<c10d::Work> part(c10::intrusive_ptr<c10d::Work> work);

  c10::intrusive_ptr<c10d::Backend> inner_;
  bool inner_coalesces_ = false;  // NCCL: the inner backend groups what it is given itself
  bool gloo_ = false;
  int group_ = -1;                // the open group's id, -1 when none is open
  int next_group_ = 0;
  int64_t group_parts_ = 0;       // in the open group
  int64_t p2p_broadcasts_ = 0;    // Gloo broadcasts sent point to point in groups so far
  std::vector<c10::intrusive_ptr<c10d::Work>> group_works_;  // the open group's parts (not NCCL)
  Phase phase_ = Phase::other;
  int unit_ = -1;
  std::array<BackendCounters, kNumPhases> counters_{};
  bool log_ = false;
  std::vector<BackendEvent> events_;
};

// `backend` itself when it is a RecordingBackend, else a new one wrapping it.
c10::intrusive_ptr<RecordingBackend> recording(c10::intrusive_ptr<c10d::Backend> backend);

}  // namespace mfsdp
