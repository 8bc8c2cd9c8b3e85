#include "reference/reconstruct.h"

#include "core/optim/optim.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

namespace mfsdp {
namespace {

// The reconstruction baseline (stock FSDP2 + Muon): momentum stays row-sharded; the Nesterov input
// of every rank's rows is all-gathered into the full matrix (a weight-sized all-gather in the
// optimizer step), Newton–Schulz runs redundantly on every rank, each rank keeps its rows.
class ReconstructMuonStep final : public EvenMatrixStep {
 public:
  const char* name() const override { return "allgather"; }
  void step(const EvenMatrixView& rt, const std::vector<int>& shards) override {
    for (int i : shards) step_one(rt, i);
  }

 private:
  void step_one(const EvenMatrixView& rt, int i) {
    const MatrixShard& s = rt.plan().shards()[i];
    const MuonOptions& o = muon_for(rt, i);
    const int W = rt.comm().world_size();
    const int64_t rows = s.shape[0], cols = s.shape[1], chunk = even_chunk_rows(rows, W);
    at::Tensor param = rt.local_param(i), grad = rt.local_grad(i);
    at::Tensor padded = at::zeros({chunk, cols}, rt.segment_options(i));
    int64_t my_rows = 0, my_begin = 0;
    if (param.defined()) {
      padded.narrow(0, 0, grad.size(0)).copy_(update_input(rt, i));
      my_rows = grad.size(0);
      my_begin = s.slice_on(rt.comm().rank())->row_begin;
    }
    at::Tensor gathered = at::empty({W * chunk, cols}, padded.options());
    rt.comm().allgather(gathered, padded)->wait();
    at::Tensor update = newton_schulz(gathered.narrow(0, 0, rows), o);
    if (my_rows == 0) return;
    param.mul_(1 - o.lr * o.weight_decay);
    param.add_(update.narrow(0, my_begin, my_rows), -muon_adjusted_lr(o.lr, o.adjust_lr, rows, cols));
  }
};

}  // namespace

std::unique_ptr<EvenMatrixStep> make_reconstruct_step() { return std::make_unique<ReconstructMuonStep>(); }

}  // namespace mfsdp
