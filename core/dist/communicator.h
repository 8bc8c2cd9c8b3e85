// The one door every collective of the runtime goes through. It counts calls and bytes per rank
// per phase: those counters are the proof that the optimizer step communicates nothing.
//
// Bytes are logical point-to-point payload: a broadcast of n bytes counts n*(W-1) sent on the
// root and n received on every other rank; a reduce counts n sent on every non-root and n*(W-1)
// received on the root; an all-to-all counts its off-diagonal splits; an all-gather of n bytes per
// rank counts n*(W-1) each way; an all-reduce of n bytes counts n*(W-1) each way. A rank never
// counts what it keeps for itself.
#pragma once

#include "core/dist/recording_backend.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mfsdp {

struct PhaseCounters {
  int64_t calls = 0;  // a group (Communicator::group) counts once
  int64_t parts = 0;  // collectives issued inside groups
  int64_t bytes_sent = 0;
  int64_t bytes_recv = 0;
};

class Communicator {
 public:
  // Wraps `backend` in a RecordingBackend unless it is one (make_backend's always are).
  explicit Communicator(c10::intrusive_ptr<c10d::Backend> backend);

  int rank() const { return rank_; }
  // Where small control tensors (flags, hashes, losses) must live for this backend: the current
  // CUDA device for NCCL, the CPU for Gloo (which also takes CUDA tensors for data).
  at::Device control_device() const { return control_device_; }
  at::TensorOptions control_options(c10::ScalarType dtype) const {
    return at::TensorOptions().dtype(dtype).device(control_device_);
  }
  int world_size() const { return world_size_; }
  // The recording backend below: its counters see every collective, also those issued on it
  // directly, so comparing them with this class's counters shows whether anything bypassed it.
  RecordingBackend& backend() { return *backend_; }
  const RecordingBackend& backend() const { return *backend_; }

  Phase phase() const { return backend_->phase(); }
  void set_phase(Phase phase) { backend_->set_phase(phase); }
  // A compute event in the backend's log, between the collectives around it (recording_backend.h).
  void mark(const std::string& what, int unit) { backend_->mark(what, unit); }

  // Collectives (asynchronous: wait on the returned work). Tensors must be contiguous, which is
  // checked: Gloo reads raw pointers.
  c10::intrusive_ptr<c10d::Work> broadcast(at::Tensor& tensor, int root);
  c10::intrusive_ptr<c10d::Work> reduce_sum(at::Tensor& tensor, int root);
  c10::intrusive_ptr<c10d::Work> allreduce_sum(at::Tensor& tensor);
  // Elementwise largest over ranks (exact in any order for values without NaN: max is associative
  // and commutative; callers replace NaN first, since the order MAX compares them in is not defined).
  c10::intrusive_ptr<c10d::Work> allreduce_max(at::Tensor& tensor);
  c10::intrusive_ptr<c10d::Work> allgather(at::Tensor& output, at::Tensor& input);
  // `input` holds W equal chunks; rank r's `output` receives the sum of every rank's chunk r.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_sum(at::Tensor& output, at::Tensor& input);
  // Splits count elements of dim 0 (the tensors are 1-D in the runtime).
  c10::intrusive_ptr<c10d::Work> alltoall(at::Tensor& output, at::Tensor& input, std::vector<int64_t> output_splits,
                                          std::vector<int64_t> input_splits);
  void barrier();
  // A group: the collectives `issue` issues travel together (c10d coalescing, RecordingBackend:
  // one NCCL group; on Gloo in flight together, broadcasts as point-to-point messages) and count
  // as one call of the phase in force, with their bytes as usual and PhaseCounters::parts counting
  // them. Returns the one Work to wait on (undefined when `issue` issued nothing), which may be
  // waited on more than once (only the first wait waits); the parts' own Works need no waiting.
  // Groups do not nest; a barrier cannot be part of one.
  c10::intrusive_ptr<c10d::Work> group(const std::function<void()>& issue);
  // Inside group()'s `issue`: a caller that would open a group of its own issues its parts into
  // the open one instead (the runtime's model-wide groups: docs/architecture.md).
  bool grouping() const { return grouping_; }

  // Every rank must hold the same plan: compares hashes with one all-gather and throws on every
  // rank, naming the ranks that differ, instead of letting mismatched collectives hang.
  void check_same_plan(uint64_t plan_hash);

  const PhaseCounters& counters(Phase phase) const { return counters_[static_cast<int>(phase)]; }
  PhaseCounters total() const;
  // Both these counters and the backend's.
  void reset_counters() {
    counters_ = {};
    backend_->reset_counters();
  }

 private:
  PhaseCounters& current() { return counters_[static_cast<int>(phase())]; }
  void count_call(PhaseCounters& c);
  void require_contiguous(const at::Tensor& t, const char* what) const;
  c10::intrusive_ptr<c10d::Work> allreduce(at::Tensor& tensor, c10d::ReduceOp::RedOpType op);

  c10::intrusive_ptr<RecordingBackend> backend_;
  int rank_;
  int world_size_;
  at::Device control_device_ = at::kCPU;
  std::array<PhaseCounters, kNumPhases> counters_{};
  bool grouping_ = false;
  int64_t group_parts_ = 0;
};

// The unit the collectives issued in a scope belong to (in the backend's log), restored after.
class UnitScope {
 public:
  UnitScope(Communicator& comm, int unit) : backend_(comm.backend()), previous_(backend_.unit()) { backend_.set_unit(unit); }
  ~UnitScope() { backend_.set_unit(previous_); }
  UnitScope(const UnitScope&) = delete;
  UnitScope& operator=(const UnitScope&) = delete;

 private:
  RecordingBackend& backend_;
  int previous_;
};

// Sets the communicator's phase for a scope and restores the previous one.
class PhaseScope {
 public:
  PhaseScope(Communicator& comm, Phase phase) : comm_(comm), previous_(comm.phase()) { comm.set_phase(phase); }
  ~PhaseScope() { comm_.set_phase(previous_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Communicator& comm_;
  Phase previous_;
};

}  // namespace mfsdp
