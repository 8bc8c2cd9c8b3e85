#include "core/dist/recording_backend.h"

#include <c10/util/Exception.h>

namespace mfsdp {
namespace {

int64_t nbytes(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const at::Tensor& t : ts) n += static_cast<int64_t>(t.nbytes());
  return n;
}

int64_t nbytes(const std::vector<std::vector<at::Tensor>>& tss) {
  int64_t n = 0;
  for (const auto& ts : tss) n += nbytes(ts);
  return n;
}

// The Work of a group coalesced here (not by NCCL): done when every part is; waiting waits for
// each in issue order and rethrows the first failure.
class GroupWork final : public c10d::Work {
 public:
  explicit GroupWork(std::vector<c10::intrusive_ptr<c10d::Work>> parts) : parts_(std::move(parts)) {}
  bool isCompleted() override {
    for (auto& p : parts_)
      if (!p->isCompleted()) return false;
    return true;
  }
  bool isSuccess() const override {
    for (const auto& p : parts_)
      if (!p->isSuccess()) return false;
    return true;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (auto& p : parts_) p->wait(timeout);
    return true;
  }
  void abort() override {
    for (auto& p : parts_) p->abort();
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> parts_;
};

// Tags of the point-to-point messages of Gloo groups: one per broadcast, cycling (a broadcast's
// messages complete long before the ranks could issue this many more). Tags below are the
// project's own.
constexpr int kGroupTagBase = 1 << 20;
constexpr int kGroupTags = 1 << 29;

}  // namespace

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::unshard: return "unshard";
    case Phase::grad_reduce: return "grad_reduce";
    case Phase::optimizer_step: return "optimizer_step";
    case Phase::checkpoint: return "checkpoint";
    case Phase::other: return "other";
    case Phase::update_broadcast: return "update_broadcast";
    case Phase::grad_norm: return "grad_norm";
    case Phase::qk_clip: return "qk_clip";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown Phase");
}

RecordingBackend::RecordingBackend(c10::intrusive_ptr<c10d::Backend> inner)
    : c10d::Backend(inner->getRank(), inner->getSize()), inner_(std::move(inner)),
      inner_coalesces_(inner_->supportsCoalescing()), gloo_(inner_->getBackendName() == "gloo") {}

void RecordingBackend::record(const char* what, int64_t bytes, int root) {
  BackendCounters& c = counters_[static_cast<int>(phase_)];
  if (group_ < 0 || group_parts_++ == 0) ++c.calls;  // a group counts once, at its first part
  if (group_ >= 0) ++c.parts;
  c.bytes += bytes;
  if (log_) events_.push_back(BackendEvent{true, what, phase_, unit_, root, bytes, group_});
}

// One part of an open group (not coalesced by the inner backend): kept for endCoalescing's Work.
c10::intrusive_ptr<c10d::Work> RecordingBackend::part(c10::intrusive_ptr<c10d::Work> work) {
  if (group_ >= 0 && !inner_coalesces_) group_works_.push_back(work);
  return work;
}

void RecordingBackend::startCoalescing() {
  TORCH_CHECK(group_ < 0, "recording backend: rank ", getRank(), ": a group of collectives opened inside another");
  group_ = next_group_++;
  group_works_.clear();
  group_parts_ = 0;
  if (inner_coalesces_) inner_->startCoalescing();
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::endCoalescing() {
  TORCH_CHECK(group_ >= 0, "recording backend: rank ", getRank(), ": endCoalescing with no group open");
  group_ = -1;
  if (inner_coalesces_) return inner_->endCoalescing();
  return c10::make_intrusive<GroupWork>(std::move(group_works_));
}

void RecordingBackend::mark(const std::string& what, int unit) {
  if (log_) events_.push_back(BackendEvent{false, what, phase_, unit, -1, 0});
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::broadcast(std::vector<at::Tensor>& ts, const c10d::BroadcastOptions& o) {
  const int root = static_cast<int>(o.rootRank);
  record("broadcast", nbytes(ts), root);
  if (group_ < 0 || !gloo_ || getSize() == 1 || ts.size() != 1 || !ts[0].device().is_cpu()) return part(inner_->broadcast(ts, o));
  // Gloo, in a group: the root's sends and the others' receive, under a tag of this broadcast's
  // own (every rank issues the same groups' broadcasts in the same order, so the counters agree).
  const int tag = kGroupTagBase + static_cast<int>(p2p_broadcasts_++ % kGroupTags);
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  if (getRank() == root) {
    for (int p = 0; p < getSize(); ++p)
      if (p != root) works.push_back(inner_->send(ts, p, tag));
  } else {
    works.push_back(inner_->recv(ts, root, tag));
  }
  for (auto& w : works) group_works_.push_back(w);
  return c10::make_intrusive<GroupWork>(std::move(works));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::allreduce(std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) {
  record("allreduce", nbytes(ts));
  return part(inner_->allreduce(ts, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::allreduce_coalesced(std::vector<at::Tensor>& ts,
                                                                     const c10d::AllreduceCoalescedOptions& o) {
  record("allreduce_coalesced", nbytes(ts));
  return part(inner_->allreduce_coalesced(ts, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::reduce(std::vector<at::Tensor>& ts, const c10d::ReduceOptions& o) {
  record("reduce", nbytes(ts), static_cast<int>(o.rootRank));
  return part(inner_->reduce(ts, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::allgather(std::vector<std::vector<at::Tensor>>& out,
                                                           std::vector<at::Tensor>& in, const c10d::AllgatherOptions& o) {
  record("allgather", nbytes(in));
  return part(inner_->allgather(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::_allgather_base(at::Tensor& out, at::Tensor& in,
                                                                 const c10d::AllgatherOptions& o) {
  record("allgather", static_cast<int64_t>(in.nbytes()));
  return part(inner_->_allgather_base(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& out,
                                                                     std::vector<at::Tensor>& in,
                                                                     const c10d::AllgatherOptions& o) {
  record("allgather_coalesced", nbytes(in));
  return part(inner_->allgather_coalesced(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                                 std::vector<at::Tensor>& in,
                                                                                 const c10d::AllgatherOptions& o) {
  record("allgather_into_tensor_coalesced", nbytes(in));
  return part(inner_->allgather_into_tensor_coalesced(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::gather(std::vector<std::vector<at::Tensor>>& out,
                                                        std::vector<at::Tensor>& in, const c10d::GatherOptions& o) {
  record("gather", nbytes(in), static_cast<int>(o.rootRank));
  return part(inner_->gather(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::scatter(std::vector<at::Tensor>& out,
                                                         std::vector<std::vector<at::Tensor>>& in,
                                                         const c10d::ScatterOptions& o) {
  record("scatter", nbytes(in), static_cast<int>(o.rootRank));
  return part(inner_->scatter(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::reduce_scatter(std::vector<at::Tensor>& out,
                                                                std::vector<std::vector<at::Tensor>>& in,
                                                                const c10d::ReduceScatterOptions& o) {
  record("reduce_scatter", nbytes(in));
  return part(inner_->reduce_scatter(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::_reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                                      const c10d::ReduceScatterOptions& o) {
  record("reduce_scatter", static_cast<int64_t>(in.nbytes()));
  return part(inner_->_reduce_scatter_base(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                                 std::vector<at::Tensor>& in,
                                                                                 const c10d::ReduceScatterOptions& o) {
  record("reduce_scatter_tensor_coalesced", nbytes(in));
  return part(inner_->reduce_scatter_tensor_coalesced(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::alltoall_base(at::Tensor& out, at::Tensor& in,
                                                               std::vector<int64_t>& out_splits,
                                                               std::vector<int64_t>& in_splits,
                                                               const c10d::AllToAllOptions& o) {
  record("alltoall", static_cast<int64_t>(in.nbytes()));
  return part(inner_->alltoall_base(out, in, out_splits, in_splits, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::alltoall(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                                          const c10d::AllToAllOptions& o) {
  record("alltoall", nbytes(in));
  return part(inner_->alltoall(out, in, o));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::send(std::vector<at::Tensor>& ts, int dst, int tag) {
  record("send", nbytes(ts), dst);
  return part(inner_->send(ts, dst, tag));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::recv(std::vector<at::Tensor>& ts, int src, int tag) {
  record("recv", nbytes(ts), src);
  return part(inner_->recv(ts, src, tag));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::recvAnysource(std::vector<at::Tensor>& ts, int tag) {
  record("recv", nbytes(ts));
  return part(inner_->recvAnysource(ts, tag));
}

c10::intrusive_ptr<c10d::Work> RecordingBackend::barrier(const c10d::BarrierOptions& o) {
  record("barrier", 0);
  return inner_->barrier(o);
}

void RecordingBackend::monitoredBarrier(const c10d::BarrierOptions& o, bool wait_all_ranks) {
  record("barrier", 0);
  inner_->monitoredBarrier(o, wait_all_ranks);
}

c10::intrusive_ptr<RecordingBackend> recording(c10::intrusive_ptr<c10d::Backend> backend) {
  TORCH_CHECK(backend, "recording: no backend");
  if (auto* r = dynamic_cast<RecordingBackend*>(backend.get()))
    return c10::intrusive_ptr<RecordingBackend>::reclaim_copy(r);
  return c10::make_intrusive<RecordingBackend>(std::move(backend));
}

}  // namespace mfsdp
