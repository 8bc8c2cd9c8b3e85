// The one gradient-summation routine of deterministic mode, shared by the runtime and the oracle
// (docs/architecture.md, determinism): contributions are added in rank order 0..W-1 in one fixed accumulation dtype,
// then divided by W once, then cast to the parameter dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace mfsdp {

// float32 for bfloat16/float16 parameters, the parameter dtype otherwise.
c10::ScalarType accumulation_dtype(c10::ScalarType param_dtype);

// c[0] + c[1] + ... left to right in `acc_dtype` (a fresh tensor): no division.
at::Tensor sum_in_rank_order(const std::vector<at::Tensor>& contributions, c10::ScalarType acc_dtype);

// HSDP's order (docs/hsdp.md): `partial_sums` are the replicas' in-group sums (replica order);
// they are added left to right in the accumulation dtype of `out_dtype`, divided once by
// `world_size` (R x S), and cast to `out_dtype`. With one partial sum it is mean_in_rank_order's
// arithmetic exactly.
at::Tensor mean_of_partial_sums(const std::vector<at::Tensor>& partial_sums, int64_t world_size, c10::ScalarType out_dtype);

// The oracle's spelling of the same order: `contributions` of all W = R x S ranks in global rank
// order (g = replica * S + shard rank); each replica's S are summed in rank order, then the R
// partial sums as above. replicas = 1 is mean_in_rank_order.
at::Tensor mean_in_mesh_order(const std::vector<at::Tensor>& contributions, int replicas, c10::ScalarType out_dtype);

// mean = (c[0] + c[1] + ... + c[W-1]) / W, accumulated left to right in accumulation_dtype, the
// result in `out_dtype`. All contributions have one shape.
at::Tensor mean_in_rank_order(const std::vector<at::Tensor>& contributions, c10::ScalarType out_dtype);

}  // namespace mfsdp
