// Bit-level tensor comparison: the only equality the determinism contract accepts.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace mfsdp {

// True when dtype and shape agree and the element bytes are memcmp-equal (so -0.0 != +0.0 and
// NaNs compare by payload). Works on non-contiguous tensors and any device (copies to CPU).
bool bitwise_equal(const at::Tensor& a, const at::Tensor& b);

struct TensorDiff {
  bool bitwise_equal = false;
  bool same_shape_and_dtype = false;
  double max_abs_diff = 0.0;     // over finite elements, in float64
  std::uint64_t max_ulp = 0;     // largest distance in units in the last place (floating dtypes)
  std::int64_t mismatches = 0;   // elements whose bits differ
  std::int64_t first_mismatch = -1;  // flat index of the first differing element, or -1
};

TensorDiff diff(const at::Tensor& a, const at::Tensor& b);

// One line for messages: "equal" or "3 of 128 elements differ, max |a-b| = ..., max ULP = ...,
// first at [17]: a=... b=...".
std::string describe(const TensorDiff& d, const at::Tensor& a, const at::Tensor& b);

}  // namespace mfsdp
