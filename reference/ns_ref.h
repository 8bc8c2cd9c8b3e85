// The float64 reference of every Newton–Schulz variant (core/plan/ns_variant.h), written plainly:
// the variant's normalisation, then X <- a X + b (X X^T) X + c (X X^T)^2 X with its coefficients,
// every quantity in double. Gram Newton–Schulz is this same iteration rearranged (in exact
// arithmetic they are equal), so its reference is the standard one. core/optim's low-precision
// versions agree with it within the bound of their dtype (reference/tests/test_ns_variants.cpp).
#pragma once

#include "core/optim/optim.h"

#include <ATen/core/Tensor.h>

namespace mfsdp::reference {

// `grad`: 2-D, or 3-D [n, out, in] (each slice on its own). Returns float64.
at::Tensor newton_schulz_f64(const at::Tensor& grad, const MuonOptions& o);

}  // namespace mfsdp::reference
