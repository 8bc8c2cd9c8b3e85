#include "harness/verify.h"

#include "core/dist/rank_agreement.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <algorithm>

namespace mfsdp {

VerifyVerdict verify_against_oracle(RankContext& ctx, const TrainConfig& config) {
  const Trajectory oracle = run_oracle(ctx, config);
  const Trajectory owner = run_recorded(ctx, config);
  VerifyVerdict v;
  v.mine = compare(oracle, owner);
  // Fast mode is judged by its tolerance model over the steps the model covers.
  const FastDeviation dev = fast_deviation(oracle, owner, kFastToleranceSteps);
  Communicator comm(ctx.backend);
  PhaseScope phase(comm, Phase::other);
  // Every rank's verdict and worst differences, on every rank.
  constexpr int kFields = 5;
  at::Tensor mine = at::tensor({v.mine.bitwise_equal ? 1.0 : 0.0, v.mine.max_abs_diff, static_cast<double>(v.mine.max_ulp),
                                dev.max_param_abs, dev.max_loss_rel},
                               at::TensorOptions().dtype(at::kDouble));
  at::Tensor all = at::empty({kFields * ctx.world_size}, at::TensorOptions().dtype(at::kDouble));
  comm.allgather(all, mine)->wait();
  const double* f = all.const_data_ptr<double>();
  for (int r = 0; r < ctx.world_size; ++r, f += kFields) {
    v.bitwise_equal = v.bitwise_equal && f[0] == 1.0;
    v.max_abs_diff = std::max(v.max_abs_diff, f[1]);
    v.max_ulp = std::max(v.max_ulp, f[2]);
    v.fast.max_param_abs = std::max(v.fast.max_param_abs, f[3]);
    v.fast.max_loss_rel = std::max(v.fast.max_loss_rel, f[4]);
  }
  v.loss_runtime = mean_over_ranks(comm, owner.local_losses);
  v.loss_oracle = mean_over_ranks(comm, oracle.local_losses);
  v.grad_norm_runtime = owner.grad_norms;
  v.grad_norm_oracle = oracle.grad_norms;
  v.qk_max_logit_runtime = owner.qk_max_logits, v.qk_max_logit_oracle = oracle.qk_max_logits;
  v.qk_clipped_runtime = owner.qk_clipped_heads, v.qk_clipped_oracle = oracle.qk_clipped_heads;
  v.tolerance = fast_tolerance(config.runtime.optimizer, config.runtime.precision.reduce_dtype);
  v.runtime_bytes = owner.last_step_bytes;
  v.oracle_bytes = oracle.last_step_bytes;
  return v;
}

}  // namespace mfsdp
