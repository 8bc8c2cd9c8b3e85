// The one gradient-summation routine of deterministic mode, shared by the runtime and the oracle
// (docs/architecture.md, determinism): contributions are added in rank order 0..W-1 in one fixed accumulation dtype,
// then divided by W once, then cast to the parameter dtype.
#pragma once

#include "core/util/enum_names.h"

#include <ATen/core/Tensor.h>

#include <vector>

namespace mfsdp {

// Gradient accumulation over K micro-batches (docs/accumulation.md): each micro-batch's loss is its
// own token mean, unscaled; the step's gradient is the float32 sum over micro-batches and ranks,
// divided once by W K. The two modes add in different orders:
//   per_microbatch  every micro-batch's gradients are reduced to their owners (summed over the
//                   ranks in the mode's mesh order) and the owners add those sums, micro-batch
//                   after micro-batch: sum_m (sum_r g[m][r])
//   deferred        every rank adds its own micro-batches' gradients locally (each upcast to
//                   float32 first), and the one reduction after the last micro-batch sums those:
//                   sum_r (sum_m g[m][r]) (FSDP2's set_requires_gradient_sync(False))
// With K = 1 both are the plain step's arithmetic exactly.
enum class GradReduce { per_microbatch, deferred };
constexpr NameTable<GradReduce, 2> kGradReduceNames{{{GradReduce::per_microbatch, "per-microbatch"},
                                                     {GradReduce::deferred, "deferred"}}};
inline const char* to_string(GradReduce mode) { return checked_name(kGradReduceNames, mode); }

// Micro-batch `index` of `count` in one step.
struct MicroBatch {
  int index = 0;
  int count = 1;
  bool first() const { return index == 0; }
  bool last() const { return index + 1 == count; }
};

// The accumulation of micro-batch sums: `acc` = `x` (a copy in `acc_dtype`) for the first one,
// else acc + x (x cast to acc_dtype), in place.
void accumulate(at::Tensor& acc, const at::Tensor& x, bool first, c10::ScalarType acc_dtype);

// float32 for bfloat16/float16 parameters, the parameter dtype otherwise.
c10::ScalarType accumulation_dtype(c10::ScalarType param_dtype);

// c[0] + c[1] + ... left to right in `acc_dtype` (a fresh tensor): no division.
at::Tensor sum_in_rank_order(const std::vector<at::Tensor>& contributions, c10::ScalarType acc_dtype);

// HSDP's order (docs/hsdp.md): `partial_sums` are the replicas' in-group sums (replica order);
// they are added left to right in the accumulation dtype of `out_dtype`, divided once by
// `divisor` (R x S, times K under deferred accumulation), and cast to `out_dtype`. With one
// partial sum and divisor W it is mean_in_rank_order's arithmetic exactly.
at::Tensor mean_of_partial_sums(const std::vector<at::Tensor>& partial_sums, int64_t divisor, c10::ScalarType out_dtype);

// The oracle's spelling of the same order: `contributions` of all W = R x S ranks in global rank
// order (g = replica * S + shard rank); each replica's S are summed in rank order, then the R
// partial sums as above, divided by `divisor` (0: by W). replicas = 1 is mean_in_rank_order.
at::Tensor mean_in_mesh_order(const std::vector<at::Tensor>& contributions, int replicas, c10::ScalarType out_dtype,
                              int64_t divisor = 0);
// The same sum, not divided, in the accumulation dtype of `out_dtype` (per-micro-batch
// accumulation adds these).
at::Tensor sum_in_mesh_order(const std::vector<at::Tensor>& contributions, int replicas, c10::ScalarType out_dtype);

// `sum` (in an accumulation dtype, consumed) divided once by `divisor`, cast to `out_dtype`: the
// last two operations of every mean above.
at::Tensor divide_sum(at::Tensor sum, int64_t divisor, c10::ScalarType out_dtype);

// mean = (c[0] + c[1] + ... + c[W-1]) / W, accumulated left to right in accumulation_dtype, the
// result in `out_dtype`. All contributions have one shape.
at::Tensor mean_in_rank_order(const std::vector<at::Tensor>& contributions, c10::ScalarType out_dtype);

}  // namespace mfsdp
