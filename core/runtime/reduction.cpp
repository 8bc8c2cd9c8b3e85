#include "core/runtime/reduction.h"

#include <c10/util/Exception.h>

namespace mfsdp {

c10::ScalarType accumulation_dtype(c10::ScalarType param_dtype) {
  return (param_dtype == c10::kBFloat16 || param_dtype == c10::kHalf) ? c10::kFloat : param_dtype;
}

at::Tensor mean_in_rank_order(const std::vector<at::Tensor>& contributions, c10::ScalarType out_dtype) {
  TORCH_CHECK(!contributions.empty(), "reduction: no contributions");
  const c10::ScalarType acc_dtype = accumulation_dtype(out_dtype);
  at::Tensor acc = contributions[0].to(acc_dtype, /*non_blocking=*/false, /*copy=*/true);
  for (size_t r = 1; r < contributions.size(); ++r) acc.add_(contributions[r].to(acc_dtype));
  acc.div_(static_cast<double>(contributions.size()));
  return acc.to(out_dtype);
}

}  // namespace mfsdp
