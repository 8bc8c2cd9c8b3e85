#include "core/runtime/reduction.h"

#include <c10/util/Exception.h>

namespace mfsdp {

c10::ScalarType accumulation_dtype(c10::ScalarType param_dtype) {
  return (param_dtype == c10::kBFloat16 || param_dtype == c10::kHalf) ? c10::kFloat : param_dtype;
}

at::Tensor sum_in_rank_order(const std::vector<at::Tensor>& contributions, c10::ScalarType acc_dtype) {
  TORCH_CHECK(!contributions.empty(), "reduction: no contributions");
  at::Tensor acc = contributions[0].to(acc_dtype, /*non_blocking=*/false, /*copy=*/true);
  for (size_t r = 1; r < contributions.size(); ++r) acc.add_(contributions[r].to(acc_dtype));
  return acc;
}

at::Tensor divide_sum(at::Tensor sum, int64_t divisor, c10::ScalarType out_dtype) {
  TORCH_CHECK(divisor >= 1, "reduction: divisor ", divisor, " must be >= 1");
  sum.div_(static_cast<double>(divisor));
  return sum.to(out_dtype);
}

void accumulate(at::Tensor& acc, const at::Tensor& x, bool first, c10::ScalarType acc_dtype) {
  if (first || !acc.defined()) {
    acc = x.to(acc_dtype, /*non_blocking=*/false, /*copy=*/true);
    return;
  }
  TORCH_CHECK(acc.sizes() == x.sizes(), "reduction: accumulating ", x.sizes(), " into ", acc.sizes());
  acc.add_(x.to(acc_dtype));
}

at::Tensor mean_in_rank_order(const std::vector<at::Tensor>& contributions, c10::ScalarType out_dtype) {
  return divide_sum(sum_in_rank_order(contributions, accumulation_dtype(out_dtype)),
                    static_cast<int64_t>(contributions.size()), out_dtype);
}

at::Tensor mean_of_partial_sums(const std::vector<at::Tensor>& partial_sums, int64_t divisor, c10::ScalarType out_dtype) {
  return divide_sum(sum_in_rank_order(partial_sums, accumulation_dtype(out_dtype)), divisor, out_dtype);
}

namespace {
std::vector<at::Tensor> replica_partial_sums(const std::vector<at::Tensor>& contributions, int replicas,
                                             c10::ScalarType acc_dtype) {
  const int64_t W = static_cast<int64_t>(contributions.size());
  TORCH_CHECK(replicas >= 1 && W % replicas == 0, "reduction: ", W, " contributions do not form ", replicas, " replicas");
  const int64_t S = W / replicas;
  std::vector<at::Tensor> partials;
  for (int r = 0; r < replicas; ++r)
    partials.push_back(sum_in_rank_order({contributions.begin() + r * S, contributions.begin() + (r + 1) * S}, acc_dtype));
  return partials;
}
}  // namespace

at::Tensor mean_in_mesh_order(const std::vector<at::Tensor>& contributions, int replicas, c10::ScalarType out_dtype,
                              int64_t divisor) {
  const int64_t W = static_cast<int64_t>(contributions.size());
  return mean_of_partial_sums(replica_partial_sums(contributions, replicas, accumulation_dtype(out_dtype)),
                              divisor > 0 ? divisor : W, out_dtype);
}

at::Tensor sum_in_mesh_order(const std::vector<at::Tensor>& contributions, int replicas, c10::ScalarType out_dtype) {
  const c10::ScalarType acc_dtype = accumulation_dtype(out_dtype);
  return sum_in_rank_order(replica_partial_sums(contributions, replicas, acc_dtype), acc_dtype);
}

}  // namespace mfsdp
