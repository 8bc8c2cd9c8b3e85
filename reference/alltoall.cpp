#include "reference/alltoall.h"

#include "core/optim/optim.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <numeric>

namespace mfsdp {
namespace {

// The all-to-all baseline. Round k handles matrices k*W .. k*W+W-1 of `shards`; matrix k*W+j is
// assigned to rank j. Every rank sends its rows of each round matrix to that matrix's rank (one
// uneven all-to-all), the assigned rank runs Newton–Schulz on the whole matrix once, and a second
// all-to-all returns to every rank its rows of each update.
class AlltoallMuonStep final : public EvenMatrixStep {
 public:
  const char* name() const override { return "alltoall"; }
  void step(const EvenMatrixView& rt, const std::vector<int>& shards) override {
    const MuonOptions& o = rt.options().muon;
    const int W = rt.comm().world_size(), me = rt.comm().rank();
    auto rows_of = [&](const MatrixShard& s, int rank) -> const ShardSlice& {
      const ShardSlice* sl = s.slice_on(rank);
      TORCH_INTERNAL_ASSERT(sl, "no slice of ", s.name, " for rank ", rank);
      return *sl;
    };
    const c10::ScalarType dtype = rt.plan().shards()[shards[0]].dtype;
    const at::TensorOptions opts = rt.segment_options(shards[0]);
    for (size_t start = 0; start < shards.size(); start += W) {
      const int n = static_cast<int>(std::min<size_t>(W, shards.size() - start));
      std::vector<at::Tensor> inputs(n);
      std::vector<int64_t> send(W, 0), recv(W, 0);
      for (int j = 0; j < n; ++j) {
        const MatrixShard& s = rt.plan().shards()[shards[start + j]];
        TORCH_CHECK(s.dtype == dtype, "runtime: all-to-all Muon needs one dtype for every even matrix ('", s.name, "' is ",
                    c10::toString(s.dtype), ", not ", c10::toString(dtype), ")");
        inputs[j] = update_input(rt, shards[start + j]);
        send[j] = rows_of(s, me).rows * s.shape[1];
      }
      const MatrixShard* mine = me < n ? &rt.plan().shards()[shards[start + me]] : nullptr;
      for (int r = 0; r < W && mine; ++r) recv[r] = rows_of(*mine, r).rows * mine->shape[1];
      std::vector<at::Tensor> flat;
      for (const at::Tensor& t : inputs)
        if (t.defined()) flat.push_back(t.reshape({-1}));
      at::Tensor out_rows = at::empty({std::accumulate(recv.begin(), recv.end(), int64_t{0})}, opts);
      at::Tensor in_rows = flat.empty() ? at::empty({0}, opts) : at::cat(flat);
      if (W > 1) rt.comm().alltoall(out_rows, in_rows, recv, send)->wait();
      else out_rows = in_rows;

      // The assigned matrix, whole (rows in rank order are rows in order), orthogonalised once.
      // Updates travel in Newton–Schulz's output dtype (bf16; fp16 for the Gram variants), as the
      // optimizer produces them.
      const at::ScalarType update_dtype = ns_variant_info(o.ns_variant).dtype == NsDtype::fp16 ? at::kHalf : at::kBFloat16;
      const at::TensorOptions update_opts = opts.dtype(update_dtype);
      at::Tensor back_in = at::empty({0}, update_opts);
      if (mine) {
        at::Tensor full = at::empty(mine->shape, opts);
        int64_t cursor = 0;
        for (int r = 0; r < W; ++r) {
          const ShardSlice& sl = rows_of(*mine, r);
          TORCH_INTERNAL_ASSERT(sl.rows == 0 || sl.row_begin * mine->shape[1] == cursor, "even slices out of rank order");
          full.narrow(0, sl.row_begin, sl.rows).view({-1}).copy_(out_rows.narrow(0, cursor, recv[r]));
          cursor += recv[r];
        }
        back_in = newton_schulz(full, o).contiguous().view({-1});  // rank r's rows are contiguous, in rank order
        TORCH_INTERNAL_ASSERT(back_in.scalar_type() == update_dtype, "Newton–Schulz output is not ", update_dtype);
      }
      at::Tensor back_out = at::empty({std::accumulate(send.begin(), send.end(), int64_t{0})}, update_opts);
      if (W > 1) rt.comm().alltoall(back_out, back_in, send, recv)->wait();
      else back_out = back_in;
      int64_t cursor = 0;
      for (int j = 0; j < n; ++j) {
        if (send[j] == 0) continue;
        const int i = shards[start + j];
        const MatrixShard& s = rt.plan().shards()[i];
        const MuonOptions& mo = muon_for(rt, i);
        at::Tensor param = rt.local_param(i);
        param.mul_(1 - mo.lr * mo.weight_decay);
        param.add_(back_out.narrow(0, cursor, send[j]).view(param.sizes()),
                   -muon_adjusted_lr(mo.lr, mo.adjust_lr, s.shape[0], s.shape[1]));
        cursor += send[j];
      }
    }
  }
};

}  // namespace

std::unique_ptr<EvenMatrixStep> make_alltoall_step() { return std::make_unique<AlltoallMuonStep>(); }

}  // namespace mfsdp
