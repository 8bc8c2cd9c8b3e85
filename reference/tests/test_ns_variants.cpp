// Newton–Schulz variants (core/plan/ns_variant.h): each against its float64 reference
// (reference/ns_ref.h) within the bound of its dtype, on matrices and on expert stacks; fixed tables
// pin their step counts; the cost model counts each variant's products.
#include "core/optim/optim.h"
#include "core/plan/optimizer_cost.h"
#include "reference/ns_ref.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randn.h>
#include <ATen/TensorOperators.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

namespace mfsdp {
namespace {

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed) {
  return at::randn(shape, at::make_generator<at::CPUGeneratorImpl>(seed), at::TensorOptions().dtype(at::kFloat));
}

double relative_error(const at::Tensor& ours, const at::Tensor& ref) {
  return (ours.to(at::kDouble) - ref).norm().item<double>() / ref.norm().item<double>();
}

// ||ours - f64|| / ||f64|| over Gaussian inputs of the model's shapes (square, wide, tall, odd, a
// single row, expert stacks either way, batched). Measured on this project's CPUs: bf16 at most
// 0.273 (Polar Express in the paper's elementwise spelling; the Polar Express tables' steep first
// polynomials amplify bf16 rounding, most on a single row, whose one singular value sits where they
// are steepest), 0.044 without Polar Express; fp16 (Gram) at most 0.0142. The bounds leave room for
// other CPUs' roundings and still fail a variant that leaves its algorithm by far: a missed restart
// product and a rescale on the wrong side, planted, measured 1.45 and 4.5e22.
constexpr double kBf16Bound = 0.5, kFp16Bound = 0.05;

TEST(NsVariants, EachVariantStaysWithinItsDtypesBoundOfItsFloat64Reference) {
  const std::vector<std::vector<int64_t>> shapes{{64, 64}, {64, 256}, {256, 64}, {48, 16}, {7, 13}, {1, 40},
                                                 {3, 24, 40}, {3, 40, 24}};
  for (const NsVariantInfo& v : ns_variants()) {
    const double bound = v.dtype == NsDtype::fp16 ? kFp16Bound : kBf16Bound;
    double worst = 0;
    for (size_t k = 0; k < shapes.size(); ++k) {
      for (uint64_t seed = 0; seed < 3; ++seed) {
        MuonOptions o;
        o.ns_variant = v.id;
        o.ns_steps = ns_steps_of(v, o.ns_steps);
        const at::Tensor g = randn(shapes[k], 100 * k + seed);
        const double e = relative_error(orthogonalize(g, o), reference::newton_schulz_f64(g, o));
        EXPECT_LE(e, bound) << v.name << " on " << at::IntArrayRef(shapes[k]) << " seed " << seed;
        worst = std::max(worst, e);
      }
    }
    std::printf("%-26s %s worst %.3e (bound %.2g)\n", v.name, v.dtype == NsDtype::fp16 ? "fp16" : "bf16", worst, bound);
  }
}

TEST(NsVariants, AFixedTablePinsItsStepCount) {
  for (const NsVariantInfo& v : ns_variants()) {
    MuonOptions o;
    o.ns_variant = v.id;
    if (v.fixed_steps == 0) {
      o.ns_steps = 7;
      EXPECT_NO_THROW(validate(o)) << v.name;
      continue;
    }
    EXPECT_EQ(static_cast<size_t>(v.fixed_steps), v.table.size()) << v.name << ": its table runs once, whole";
    o.ns_steps = v.fixed_steps;
    EXPECT_NO_THROW(validate(o)) << v.name;
    o.ns_steps = v.fixed_steps + 1;
    try {
      validate(o);
      ADD_FAILURE() << v.name << " accepted " << o.ns_steps << " steps";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find(std::string(v.name) + " pins"), std::string::npos) << e.what();
    }
  }
}

TEST(NsVariants, TheCostModelCountsEachVariantsProducts) {
  const double s = 64, l = 256;
  // The standard iteration: s^2 (2l + s) per step, tall or wide.
  EXPECT_EQ(ns_multiply_adds(ns_variant_info(NsVariant::torch), 5, 64, 256), 5 * s * s * (2 * l + s));
  EXPECT_EQ(ns_multiply_adds(ns_variant_info(NsVariant::torch), 5, 256, 64), 5 * s * s * (2 * l + s));
  EXPECT_EQ(ns_multiply_adds(ns_variant_info(NsVariant::aol), 4, 64, 256), 4 * s * s * (2 * l + s));
  // heavyball's Horner form: X X^T, Y A and Y X, the same products.
  EXPECT_EQ(ns_multiply_adds(ns_variant_info(NsVariant::heavyball), 5, 256, 64), 5 * s * s * (2 * l + s));
  // cubic5: c = 0, no A^2: X X^T and A X.
  EXPECT_EQ(ns_multiply_adds(ns_variant_info(NsVariant::cubic5_eo), 5, 64, 256), 5 * 2 * s * s * l);
  // Gram, 5 steps, restart at 2: R (s^2 l); step 0 Z, R twice (3 s^3); step 1 Z, Q (2 s^3; R skipped
  // before the restart); step 2 X <- QX and R (2 s^2 l), Z, R twice (3 s^3); step 3 Z, Q, R twice
  // (4 s^3); step 4 Z, Q (2 s^3); the final Q X (s^2 l).
  EXPECT_EQ(ns_multiply_adds(ns_variant_info(NsVariant::gram_pyopt), 5, 64, 256), 4 * s * s * l + 14 * s * s * s);
  EXPECT_LT(ns_multiply_adds(ns_variant_info(NsVariant::gram_pyopt), 5, 64, 256),
            ns_multiply_adds(ns_variant_info(NsVariant::torch), 5, 64, 256));
  // Dao's Gram falls back to the standard iteration on a square matrix; pytorch-optimizer's does not.
  EXPECT_EQ(ns_multiply_adds(ns_variant_info(NsVariant::gram_dao), 5, 64, 64), 5 * 3 * s * s * s);
  EXPECT_EQ(ns_multiply_adds(ns_variant_info(NsVariant::gram_pyopt), 5, 64, 64), 4 * s * s * s + 14 * s * s * s);
  // Through the optimizer cost: the variant's steps (its fixed count) plus the momentum.
  OptimizerOptions opt = training_defaults();
  opt.muon.ns_variant = NsVariant::deepseek_v4;
  opt.muon.ns_steps = 10;
  EXPECT_EQ(optimizer_step_cost(OptimizerKind::muon, 64, 256, OptimizerCostConfig(opt)),
            10 * s * s * (2 * l + s) + s * l);
}

}  // namespace
}  // namespace mfsdp
