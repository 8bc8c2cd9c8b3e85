#include "core/util/tensor_compare.h"

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace mfsdp {
namespace {

at::Tensor cpu_contiguous(const at::Tensor& t) { return t.cpu().contiguous(); }

// Maps a float's bits onto a monotone unsigned line so |ordered(a) - ordered(b)| counts ULPs.
template <typename Bits>
std::uint64_t ordered(Bits bits) {
  constexpr Bits sign = Bits(1) << (sizeof(Bits) * 8 - 1);
  return (bits & sign) ? static_cast<std::uint64_t>(static_cast<Bits>(~bits))
                       : static_cast<std::uint64_t>(bits | sign);
}

template <typename T, typename Bits>
void diff_floating(const at::Tensor& a, const at::Tensor& b, TensorDiff& d) {
  const T* pa = a.const_data_ptr<T>();
  const T* pb = b.const_data_ptr<T>();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) {
    Bits ba, bb;
    std::memcpy(&ba, &pa[i], sizeof(Bits));
    std::memcpy(&bb, &pb[i], sizeof(Bits));
    if (ba == bb) continue;
    if (d.first_mismatch < 0) d.first_mismatch = i;
    ++d.mismatches;
    double fa = static_cast<double>(pa[i]), fb = static_cast<double>(pb[i]);
    if (std::isfinite(fa) && std::isfinite(fb)) d.max_abs_diff = std::max(d.max_abs_diff, std::fabs(fa - fb));
    else d.max_abs_diff = INFINITY;
    std::uint64_t oa = ordered(ba), ob = ordered(bb);
    d.max_ulp = std::max(d.max_ulp, oa > ob ? oa - ob : ob - oa);
  }
}

void diff_bytes(const at::Tensor& a, const at::Tensor& b, TensorDiff& d) {
  const size_t item = a.element_size();
  const auto* pa = static_cast<const unsigned char*>(a.const_data_ptr());
  const auto* pb = static_cast<const unsigned char*>(b.const_data_ptr());
  for (int64_t i = 0, n = a.numel(); i < n; ++i) {
    if (std::memcmp(pa + i * item, pb + i * item, item) == 0) continue;
    if (d.first_mismatch < 0) d.first_mismatch = i;
    ++d.mismatches;
  }
}

}  // namespace

TensorDiff diff(const at::Tensor& a_in, const at::Tensor& b_in) {
  TensorDiff d;
  d.same_shape_and_dtype = a_in.scalar_type() == b_in.scalar_type() && a_in.sizes() == b_in.sizes();
  if (!d.same_shape_and_dtype) return d;
  at::Tensor a = cpu_contiguous(a_in), b = cpu_contiguous(b_in);
  switch (a.scalar_type()) {
    case at::kFloat: diff_floating<float, std::uint32_t>(a, b, d); break;
    case at::kDouble: diff_floating<double, std::uint64_t>(a, b, d); break;
    case at::kBFloat16: diff_floating<c10::BFloat16, std::uint16_t>(a, b, d); break;
    case at::kHalf: diff_floating<c10::Half, std::uint16_t>(a, b, d); break;
    default: diff_bytes(a, b, d); break;
  }
  d.bitwise_equal = d.mismatches == 0;
  return d;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) { return diff(a, b).bitwise_equal; }

std::string describe(const TensorDiff& d, const at::Tensor& a, const at::Tensor& b) {
  std::ostringstream out;
  if (!d.same_shape_and_dtype) {
    out << "shape/dtype differ: " << a.sizes() << " " << a.scalar_type() << " vs " << b.sizes()
        << " " << b.scalar_type();
    return out.str();
  }
  if (d.bitwise_equal) return "equal";
  out << d.mismatches << " of " << a.numel() << " elements differ, max |a-b| = " << d.max_abs_diff
      << ", max ULP = " << d.max_ulp;
  if (d.first_mismatch >= 0) {
    auto fa = a.reshape({-1})[d.first_mismatch].item<double>();
    auto fb = b.reshape({-1})[d.first_mismatch].item<double>();
    out << ", first at flat index " << d.first_mismatch << ": " << fa << " vs " << fb;
  }
  return out.str();
}

}  // namespace mfsdp
