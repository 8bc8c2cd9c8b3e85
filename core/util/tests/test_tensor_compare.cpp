// The bitwise comparison every differential test relies on must see one-bit differences.
#include "core/util/tensor_compare.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace mfsdp {
namespace {

TEST(TensorCompare, EqualTensorsAreEqual) {
  at::Tensor a = at::arange(10, at::kFloat);
  EXPECT_TRUE(bitwise_equal(a, a.clone()));
  EXPECT_TRUE(bitwise_equal(a.reshape({2, 5}).t(), a.reshape({2, 5}).t().contiguous()));
}

TEST(TensorCompare, SignedZeroDiffers) {
  EXPECT_FALSE(bitwise_equal(at::tensor({0.0f}), at::tensor({-0.0f})));
}

TEST(TensorCompare, OneUlpDiffersAndIsCounted) {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    at::Tensor a = at::full({3}, 1.0, at::TensorOptions().dtype(dtype));
    at::Tensor b = a.clone();
    // Next representable value above 1.0 in this dtype.
    b[1] = b[1].item<double>() + (dtype == at::kFloat ? std::ldexp(1.0, -23)
                                   : dtype == at::kDouble ? std::ldexp(1.0, -52) : std::ldexp(1.0, -7));
    TensorDiff d = diff(a, b);
    EXPECT_FALSE(d.bitwise_equal) << dtype;
    EXPECT_EQ(d.mismatches, 1) << dtype;
    EXPECT_EQ(d.first_mismatch, 1) << dtype;
    EXPECT_EQ(d.max_ulp, 1u) << dtype;
  }
}

TEST(TensorCompare, UlpDistanceCrossesZero) {
  float tiny = std::numeric_limits<float>::denorm_min();
  TensorDiff d = diff(at::tensor({tiny}), at::tensor({-tiny}));
  // +denorm_min -> +0 -> -0 -> -denorm_min: signed zeros are distinct bit patterns, one step apart.
  EXPECT_EQ(d.max_ulp, 3u);
}

TEST(TensorCompare, NaNsCompareByPayload) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(bitwise_equal(at::tensor({nan}), at::tensor({nan})));
  EXPECT_FALSE(bitwise_equal(at::tensor({nan}), at::tensor({-nan})));
}

TEST(TensorCompare, ShapeAndDtypeMustMatch) {
  EXPECT_FALSE(bitwise_equal(at::arange(6, at::kFloat), at::arange(6, at::kFloat).reshape({2, 3})));
  EXPECT_FALSE(bitwise_equal(at::arange(6, at::kFloat), at::arange(6, at::kDouble)));
  EXPECT_FALSE(bitwise_equal(at::arange(6, at::kLong), at::arange(6, at::kLong) + 1));
}

TEST(TensorCompare, DescribeNamesTheFirstDifference) {
  at::Tensor a = at::arange(4, at::kFloat);
  at::Tensor b = a.clone();
  b[2] = 7.0f;
  std::string s = describe(diff(a, b), a, b);
  EXPECT_NE(s.find("1 of 4 elements differ"), std::string::npos) << s;
  EXPECT_NE(s.find("flat index 2"), std::string::npos) << s;
}

}  // namespace
}  // namespace mfsdp
