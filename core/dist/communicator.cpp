#include "core/dist/communicator.h"

#include "core/dist/process_group.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <functional>
#include <sstream>

namespace mfsdp {

namespace {

// A group's Work, waited on at most once underneath: a Gloo send or receive Work waits for one
// more completion on each wait() (a second wait would hang until its timeout), and a model-wide
// group's one Work is waited on by every unit it fills or reduces.
class WaitOnceWork final : public c10d::Work {
 public:
  explicit WaitOnceWork(c10::intrusive_ptr<c10d::Work> inner) : inner_(std::move(inner)) {}
  bool isCompleted() override { return waited_ || inner_->isCompleted(); }
  bool isSuccess() const override { return inner_->isSuccess(); }
  bool wait(std::chrono::milliseconds timeout) override {
    if (!waited_) {
      inner_->wait(timeout);
      waited_ = true;
    }
    return true;
  }
  void abort() override { inner_->abort(); }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  bool waited_ = false;  // waits come from the rank's own thread only
};

}  // namespace

Communicator::Communicator(c10::intrusive_ptr<c10d::Backend> backend)
    : backend_(recording(std::move(backend))), rank_(backend_->getRank()), world_size_(backend_->getSize()) {
  if (backend_->getBackendName() == "nccl") control_device_ = current_cuda_device();
}

PhaseCounters Communicator::total() const {
  PhaseCounters t;
  for (const auto& c : counters_) {
    t.calls += c.calls;
    t.parts += c.parts;
    t.bytes_sent += c.bytes_sent;
    t.bytes_recv += c.bytes_recv;
  }
  return t;
}

void Communicator::require_contiguous(const at::Tensor& t, const char* what) const {
  TORCH_CHECK(t.is_contiguous(), "communicator: rank ", rank_, ": ", what, " needs a contiguous tensor (Gloo reads raw pointers)");
}

c10::intrusive_ptr<c10d::Work> Communicator::broadcast(at::Tensor& tensor, int root) {
  require_contiguous(tensor, "broadcast");
  const int64_t n = tensor.nbytes();
  auto& c = current();
  count_call(c);
  if (rank_ == root) c.bytes_sent += n * (world_size_ - 1);
  else c.bytes_recv += n;
  std::vector<at::Tensor> ts{tensor};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  return backend_->broadcast(ts, o);
}

c10::intrusive_ptr<c10d::Work> Communicator::reduce_sum(at::Tensor& tensor, int root) {
  require_contiguous(tensor, "reduce");
  const int64_t n = tensor.nbytes();
  auto& c = current();
  count_call(c);
  if (rank_ == root) c.bytes_recv += n * (world_size_ - 1);
  else c.bytes_sent += n;
  std::vector<at::Tensor> ts{tensor};
  c10d::ReduceOptions o;
  o.rootRank = root;
  o.reduceOp = c10d::ReduceOp::SUM;
  return backend_->reduce(ts, o);
}

c10::intrusive_ptr<c10d::Work> Communicator::allreduce(at::Tensor& tensor, c10d::ReduceOp::RedOpType op) {
  require_contiguous(tensor, "allreduce");
  auto& c = current();
  count_call(c);
  c.bytes_sent += tensor.nbytes() * (world_size_ - 1);
  c.bytes_recv += tensor.nbytes() * (world_size_ - 1);
  std::vector<at::Tensor> ts{tensor};
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  return backend_->allreduce(ts, o);
}

c10::intrusive_ptr<c10d::Work> Communicator::allreduce_sum(at::Tensor& tensor) { return allreduce(tensor, c10d::ReduceOp::SUM); }

c10::intrusive_ptr<c10d::Work> Communicator::allreduce_max(at::Tensor& tensor) { return allreduce(tensor, c10d::ReduceOp::MAX); }

c10::intrusive_ptr<c10d::Work> Communicator::allgather(at::Tensor& output, at::Tensor& input) {
  require_contiguous(output, "allgather");
  require_contiguous(input, "allgather");
  auto& c = current();
  count_call(c);
  c.bytes_sent += input.nbytes() * (world_size_ - 1);
  c.bytes_recv += input.nbytes() * (world_size_ - 1);
  return backend_->_allgather_base(output, input);
}

c10::intrusive_ptr<c10d::Work> Communicator::reduce_scatter_sum(at::Tensor& output, at::Tensor& input) {
  require_contiguous(output, "reduce_scatter");
  require_contiguous(input, "reduce_scatter");
  TORCH_CHECK(input.numel() == output.numel() * world_size_, "communicator: rank ", rank_, ": reduce_scatter input has ",
              input.numel(), " elements, expected world size x ", output.numel());
  auto& c = current();
  count_call(c);
  c.bytes_sent += output.nbytes() * (world_size_ - 1);  // every chunk but its own leaves the rank
  c.bytes_recv += output.nbytes() * (world_size_ - 1);
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return backend_->_reduce_scatter_base(output, input, o);
}

c10::intrusive_ptr<c10d::Work> Communicator::alltoall(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t> output_splits,
                                                      std::vector<int64_t> input_splits) {
  require_contiguous(output, "alltoall");
  require_contiguous(input, "alltoall");
  const int64_t row_bytes_in = input.dim() == 0 || input.size(0) == 0 ? 0 : input.nbytes() / input.size(0);
  const int64_t row_bytes_out = output.dim() == 0 || output.size(0) == 0 ? 0 : output.nbytes() / output.size(0);
  auto& c = current();
  count_call(c);
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    c.bytes_sent += input_splits[p] * row_bytes_in;
    c.bytes_recv += output_splits[p] * row_bytes_out;
  }
  return backend_->alltoall_base(output, input, output_splits, input_splits);
}

void Communicator::count_call(PhaseCounters& c) {
  if (!grouping_ || group_parts_++ == 0) ++c.calls;  // a group counts once, at its first part
  if (grouping_) ++c.parts;
}

c10::intrusive_ptr<c10d::Work> Communicator::group(const std::function<void()>& issue) {
  TORCH_CHECK(!grouping_, "communicator: rank ", rank_, ": a group of collectives opened inside another");
  backend_->startCoalescing();
  grouping_ = true;
  group_parts_ = 0;
  try {
    issue();
  } catch (...) {
    grouping_ = false;
    backend_->endCoalescing();  // the backend leaves its group; what was issued completes or fails there
    throw;
  }
  grouping_ = false;
  c10::intrusive_ptr<c10d::Work> work = backend_->endCoalescing();
  if (group_parts_ == 0 || !work) return c10::intrusive_ptr<c10d::Work>();
  return c10::make_intrusive<WaitOnceWork>(std::move(work));
}

void Communicator::barrier() {
  TORCH_CHECK(!grouping_, "communicator: rank ", rank_, ": a barrier inside a group of collectives");
  ++current().calls;
  backend_->barrier()->wait();
}

void Communicator::check_same_plan(uint64_t plan_hash) {
  at::Tensor mine = at::tensor({static_cast<int64_t>(plan_hash)}, at::TensorOptions().dtype(at::kLong)).to(control_device_);
  at::Tensor all = at::empty({world_size_}, control_options(at::kLong));
  allgather(all, mine)->wait();
  all = all.cpu();
  const auto* h = all.const_data_ptr<int64_t>();
  std::ostringstream differ;
  bool mismatch = false;
  for (int r = 0; r < world_size_; ++r) {
    if (h[r] != h[0]) mismatch = true;
  }
  if (!mismatch) return;
  for (int r = 0; r < world_size_; ++r) {
    differ << (r ? ", " : "") << "rank " << r << " " << std::hex << static_cast<uint64_t>(h[r]) << std::dec;
  }
  TORCH_CHECK(false, "runtime: rank ", rank_, ": the ranks hold different plans (plan hashes: ", differ.str(),
              "); every rank must plan the same model with the same world size, planner and tail policy");
}

}  // namespace mfsdp
