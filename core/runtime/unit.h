// One unit's buffers and lifecycle on one rank (docs/architecture.md: the step and the four mechanisms).
//
// Vocabulary of this file:
//   segment_   this rank's part of the unit's flat buffer (persistent; owned parameters and even
//              slices are views into it: an owned matrix's sharded storage *is* its slot)
//   gathered   one storage holding what this rank does not own while the unit is unsharded:
//              the other ranks' segments (rank order) and full copies of even-sharded parameters
//   full view  a parameter-shaped tensor over segment_ (own matrices) or gathered storage
//
// Precision (core/plan/precision.h): segment_ and segment_grad_ are masters (the plan's dtype).
// The gathered storage is in the policy's param dtype; when that differs from the master's, it
// also holds this rank's own segment, cast there before every fill, so every full view is a
// compute copy. Gradients reach reduce_to_owner in the param dtype, are cast to the reduce dtype
// for the wire, and arrive in segment_grad_ as masters.
//
// Pinning: releasing the gathered storage frees its memory but keeps its StorageImpl, so the
// views autograd saved during forward stay bound to it; revive() allocates new memory into the
// *same* StorageImpl and refills it, so those views read the same values again.
#pragma once

#include "core/dist/communicator.h"
#include "core/plan/ownership_plan.h"
#include "core/plan/precision.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <string>
#include <vector>

namespace mfsdp {

enum class UnitState {
  sharded,    // only segment_ resident; gathered storage holds 0 bytes
  unsharded,  // gathered storage resident and filled: every parameter has a full view
  pinned,     // after forward: gathered storage released (0 bytes), its StorageImpl and views kept
  revived,    // backward reached the unit: the same StorageImpl re-allocated and refilled
  reducing,   // gradient reduction to owners issued; gathered storage released again
};
const char* to_string(UnitState state);

// How unshard moves the segments (each moves only what this rank does not store, no padding
// beyond the even-shard rule, never this rank's own segment). A group is one collective of the
// unit (Communicator::group: one NCCL group, on Gloo point-to-point messages in flight together).
enum class UnshardStrategy {
  broadcast,          // one group: a broadcast per non-empty segment, rooted at its rank
  allgather_even,     // one group: an all-gather of the equal-size even-shard prefixes of all
                      // segments (the even tail) and a broadcast per rank whose owned remainder
                      // is non-empty
  per_segment,        // the broadcasts of `broadcast`, each a collective of its own (what ran
                      // before groups; kept to measure them against)
};
const char* to_string(UnshardStrategy strategy);

enum class ReduceMode {
  deterministic,  // contributions gathered on the owner, added in rank order 0..W-1, divided once
  fast,           // native, one group: a reduce-scatter of the equal-size even prefixes (the
                  // tail) and a reduce(SUM) per rank's owned remainder; then divided once
};
const char* to_string(ReduceMode mode);

class Unit {
 public:
  Unit(const OwnershipPlan& plan, int unit_index, Communicator& comm, at::Device device,
       UnshardStrategy strategy = UnshardStrategy::broadcast, PrecisionPolicy precision = {});

  const std::string& name() const;
  int index() const { return index_; }
  UnitState state() const { return state_; }
  // The one checked transition: throws "unit 'X': illegal lifecycle move A -> B" on an illegal
  // move, leaving the unit as it was.
  void transition(UnitState to);

  at::Tensor& segment() { return segment_; }
  at::Tensor& segment_grad() { return segment_grad_; }
  const std::vector<int>& shards() const;  // plan shard indices of this unit, parameter order

  // Lifecycle operations (each checks its transition first).
  void unshard();                                      // sharded -> unsharded
  void reshard(bool keep_for_backward);                // unsharded -> pinned | sharded
  void revive();                                       // pinned -> revived
  // Prefetch: the same moves, but only issued; the storage is allocated and the collectives are
  // in flight. wait_fill() completes them (a no-op when nothing is in flight); every reader of
  // the gathered storage calls it first.
  void unshard_async();                                // sharded -> unsharded (fill in flight)
  void revive_async();                                 // pinned -> revived (fill in flight)
  void wait_fill();
  // Issued inside another caller's Communicator::group (unshard_async, revive_async or
  // reduce_to_owner while comm.grouping()): the unit's parts joined that group, and `work`, the
  // group's one Work, is what wait_fill or finish_reduction waits for. Undefined: nothing moved.
  void adopt_group_work(const c10::intrusive_ptr<c10d::Work>& work);
  bool fill_in_flight() const { return !fill_works_.empty() || fill_pending_; }
  void release();                                      // pinned -> sharded (no backward will come)
  void reduce_to_owner(const std::vector<at::Tensor>& full_grads, ReduceMode mode);  // -> reducing
  // Deferred gradient accumulation, before the last micro-batch: the caller kept this backward's
  // gradients in its local sums; the unit moves to reducing with nothing in flight (gathered
  // storage released), and finish_reduction leaves segment_grad_ as it is.
  void keep_gradients_local();                                                        // -> reducing
  // reducing -> sharded; segment_grad_ set to the sum over this group's ranks divided once by
  // `divisor` (the group's size for the plain step's mean; W K under deferred accumulation), or,
  // with divisor 0, to the sum itself (in the master dtype: HSDP combines replicas' sums, and
  // per-micro-batch accumulation adds micro-batches' sums, before dividing).
  void finish_reduction(int64_t divisor);

  // Fresh full-view tensors of the unit's parameters (parameter order) over the current storage.
  // Valid to read while unsharded or revived.
  std::vector<at::Tensor> full_views() const;
  // This rank's stored part of shard `s` (the whole parameter when owned here; real rows of its
  // even slice otherwise) and the gradient for it. Undefined when this rank stores nothing of it.
  at::Tensor local_param(int shard) const;
  at::Tensor local_grad(int shard) const;

  int64_t gathered_bytes() const;   // resident now
  int64_t gathered_capacity() const { return gathered_numel_ * compute_elem_size(); }
  const c10::StorageImpl* gathered_storage_impl() const { return gathered_.unsafeGetStorageImpl(); }
  int64_t segment_bytes() const { return static_cast<int64_t>(segment_.nbytes()); }
  // Every parameter of the unit in full, as masters (CPU copies): every segment broadcast in the
  // master dtype once (phase as the caller set). Leaves the unit sharded.
  std::vector<at::Tensor> gather_masters();
  // The same for the gradients the segment holds (after a step's last reduction: the mean,
  // clipped when clipping is on): for trajectory dumps (--dump-grads).
  std::vector<at::Tensor> gather_grads();

 private:
  std::vector<at::Tensor> gather_segment(const at::Tensor& segment, const char* what);
  int64_t compute_elem_size() const;
  void allocate_gathered();
  void free_gathered();
  void begin_fill();  // issue the moves of every other segment here (per strategy_)
  void end_fill();    // wait for them; copy out even params
  at::Tensor gathered_view(int64_t offset, at::IntArrayRef sizes) const;
  at::Tensor segment_of(int rank) const;  // rank's segment: segment_ or its place in gathered

  const OwnershipPlan& plan_;
  const UnitLayout& layout_;
  int index_;
  Communicator& comm_;
  at::Device device_;
  int rank_;
  UnitState state_ = UnitState::sharded;

  at::Tensor segment_, segment_grad_;
  c10::Storage gathered_;
  int64_t gathered_numel_ = 0;
  std::vector<int64_t> other_segment_offset_;  // per rank: offset in gathered (-1 for self)
  std::vector<int64_t> even_full_offset_;      // per shard of the unit: offset in gathered, or -1
  // Per shard of the unit: where an even shard's slices sit in every segment's even prefix when
  // the plan lays them out regularly (slice r holds rows [r P, r P + P) at the same offset `at` of
  // every segment), so that all ranks' slices copy out of the gathered prefixes in two strided
  // copies; at = -1 otherwise.
  struct RegularEven {
    int64_t at = -1, padded_rows = 0;
  };
  std::vector<RegularEven> regular_even_;
  bool all_even_regular_ = true;  // every even shard of the unit is regular
  // Every segment is exactly its even prefix, rank after rank (a unit of even parameters alone):
  // the unit's layout is the packed prefixes.
  bool segments_are_prefixes_ = false;
  UnshardStrategy strategy_;
  PrecisionPolicy precision_;
  bool casts_ = false;  // the compute copy's dtype differs from the master's
  at::TensorOptions compute_options_, reduce_options_;
  int64_t even_prefix_ = 0;  // elements at the start of every segment holding even slices (equal on all ranks)

  // In-flight fill (unshard or revive).
  std::vector<c10::intrusive_ptr<c10d::Work>> fill_works_;
  at::Tensor fill_prefixes_;
  bool fill_pending_ = false;

  // In-flight reduction.
  ReduceMode reduce_mode_ = ReduceMode::deterministic;
  std::vector<c10::intrusive_ptr<c10d::Work>> pending_;
  at::Tensor grad_flat_, contributions_, prefix_sum_;
  bool kept_local_ = false;  // keep_gradients_local: nothing to finish but the state
};

}  // namespace mfsdp
