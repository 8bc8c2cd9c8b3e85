// The one gradient-summation routine of deterministic mode, shared by the runtime and the oracle
// (docs/architecture.md, determinism): contributions are added in rank order 0..W-1 in one fixed accumulation dtype,
// then divided by W once, then cast to the parameter dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace mfsdp {

// float32 for bfloat16/float16 parameters, the parameter dtype otherwise.
c10::ScalarType accumulation_dtype(c10::ScalarType param_dtype);

// mean = (c[0] + c[1] + ... + c[W-1]) / W, accumulated left to right in accumulation_dtype, the
// result in `out_dtype`. All contributions have one shape.
at::Tensor mean_in_rank_order(const std::vector<at::Tensor>& contributions, c10::ScalarType out_dtype);

}  // namespace mfsdp
