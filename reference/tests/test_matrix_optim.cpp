// Matrix optimizers: Newton–Schulz invariants, matrix roots by residual, Shampoo and SOAP against
// their float64 references (reference/matrix_optim_ref.h), a behavioural check on a quadratic,
// state sizes equal to the memory model's, and bad input.
#include "core/util/errors.h"
#include "core/optim/optim.h"
#include "core/optim/optimizer_routing.h"
#include "core/plan/optimizer_cost.h"
#include "reference/matrix_optim_ref.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/diag.h>
#include <ATen/ops/linalg_inv.h>
#include <ATen/ops/linalg_qr.h>
#include <ATen/ops/linalg_svd.h>
#include <ATen/ops/linalg_svdvals.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

namespace mfsdp {
namespace {

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype = at::kDouble) {
  return at::randn(shape, gen(seed), at::TensorOptions().dtype(dtype));
}

// A rows x cols matrix with the given singular values (min(rows, cols) of them), float64.
at::Tensor with_singular_values(int64_t rows, int64_t cols, const at::Tensor& sigma, uint64_t seed) {
  const int64_t k = std::min(rows, cols);
  at::Tensor u = std::get<0>(at::linalg_qr(randn({rows, k}, seed)));
  at::Tensor v = std::get<0>(at::linalg_qr(randn({cols, k}, seed + 1)));
  return at::matmul(u * sigma.unsqueeze(0), v.t());
}

// ---- Newton–Schulz ---------------------------------------------------------------------------

// After Frobenius normalisation a singular value x becomes p(p(...p(x))) with p(x) = a x + b x^3 +
// c x^5, 5 times. Scanning x over the input's range in float64 gives the band the output's
// singular values must lie in; bf16 arithmetic adds a little on either side.
TEST(NewtonSchulz, SingularValuesStayInTheBandItsCoefficientsGuarantee) {
  const MuonOptions o;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{64, 64}, {32, 96}, {96, 32}, {1, 50}, {50, 1}}) {
    const int64_t k = std::min(rows, cols);
    at::Tensor sigma = at::linspace(0.1, 1.0, k, at::TensorOptions().dtype(at::kDouble));
    at::Tensor g = with_singular_values(rows, cols, sigma, 7 + rows);
    const double fro = sigma.norm().item<double>();
    const double x_lo = sigma.min().item<double>() / fro, x_hi = sigma.max().item<double>() / fro;
    double lo = 1e9, hi = -1e9;
    for (int i = 0; i <= 10000; ++i) {
      double x = x_lo + (x_hi - x_lo) * i / 10000.0;
      for (int s = 0; s < o.ns_steps; ++s) x = o.ns_a * x + o.ns_b * x * x * x + o.ns_c * x * x * x * x * x;
      lo = std::min(lo, x), hi = std::max(hi, x);
    }
    at::Tensor out = at::linalg_svdvals(newton_schulz(g.to(at::kFloat), o).to(at::kDouble));
    const double got_lo = out.min().item<double>(), got_hi = out.max().item<double>();
    const double slack = 0.03;  // bf16: 8 significant bits, five iterations
    EXPECT_GE(got_lo, lo - slack) << rows << "x" << cols << ": band [" << lo << ", " << hi << "]";
    EXPECT_LE(got_hi, hi + slack) << rows << "x" << cols << ": band [" << lo << ", " << hi << "]";
  }
}

// With the classic cubic coefficients (1.5, -0.5, 0), more iterations converge to the polar factor
// U V^T of the SVD (to bf16 resolution).
TEST(NewtonSchulz, ConvergesToTheSvdPolarFactorWithMoreIterations) {
  MuonOptions o;
  o.ns_a = 1.5, o.ns_b = -0.5, o.ns_c = 0.0;
  at::Tensor sigma = at::linspace(0.3, 1.0, 24, at::TensorOptions().dtype(at::kDouble));
  at::Tensor g = with_singular_values(24, 40, sigma, 3);
  auto [u, s, vh] = at::linalg_svd(g, /*full_matrices=*/false);
  const at::Tensor polar = at::matmul(u, vh);
  double previous = 1e9;
  for (int steps : {2, 6, 30}) {
    o.ns_steps = steps;
    const double err = (newton_schulz(g.to(at::kFloat), o).to(at::kDouble) - polar).norm().item<double>() / polar.norm().item<double>();
    EXPECT_LT(err, previous) << steps << " iterations did not get closer";
    previous = err;
  }
  EXPECT_LT(previous, 0.01) << "30 cubic iterations should reach the polar factor to bf16 resolution";
}

// ---- matrix roots ----------------------------------------------------------------------------

TEST(MatrixInverseRoot, ResidualOfTheFourthRoot) {
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    at::Tensor b = randn({20, 30}, 11);
    at::Tensor a = at::matmul(b, b.t()).to(dtype);  // SPD, condition ~1e2
    const double eps = 1e-12;
    at::Tensor x = matrix_inverse_root(a, 4, eps).to(at::kDouble);
    at::Tensor xinv = at::linalg_inv(x);
    at::Tensor back = at::matmul(at::matmul(xinv, xinv), at::matmul(xinv, xinv));
    const at::Tensor a64 = a.to(at::kDouble) + at::eye(20, at::TensorOptions().dtype(at::kDouble)) * eps;
    const double residual = (back - a64).norm().item<double>() / std::max(1.0, a64.norm().item<double>());
    EXPECT_LT(residual, dtype == at::kDouble ? 1e-10 : 1e-5) << c10::toString(dtype);
  }
}

// ---- Shampoo and SOAP against their float64 references ---------------------------------------

double relative_gap(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

TEST(Shampoo, MatchesTheFloat64Reference) {
  struct Case {
    int64_t rows, cols;
    ShampooOptions o;
  };
  std::vector<Case> cases;
  ShampooOptions base;
  base.lr = 0.01;
  base.precondition_frequency = 3;
  base.weight_decay = 0.01;
  base.epsilon = 1e-6;  // float32 roots of near-singular running sums are noise below ~1e-6
  ShampooOptions blocked = base;
  blocked.max_preconditioner_dim = 8;
  ShampooOptions ema = base;
  ema.beta2 = 0.99;
  ema.adam_grafting = false;
  cases.push_back({16, 16, base});
  cases.push_back({12, 20, blocked});
  cases.push_back({20, 6, ema});
  for (const Case& c : cases) {
    auto opt = make_shampoo(c.o, {c.rows, c.cols});
    reference::ShampooRef ref(c.o, {c.rows, c.cols});
    at::Tensor p = randn({c.rows, c.cols}, 1, at::kFloat);
    at::Tensor want = p.to(at::kDouble);
    for (int t = 0; t < 12; ++t) {
      at::Tensor g = randn({c.rows, c.cols}, 100 + t, at::kFloat);
      opt->step(p, g);
      want = ref.step(want, g);
      EXPECT_LT(relative_gap(p, want), 2e-4) << c.rows << "x" << c.cols << " step " << t + 1;
    }
  }
}

TEST(Soap, MatchesTheFloat64Reference) {
  // Square matrices rotate both sides; in the others the long side exceeds max_precond_dim and is
  // not rotated. (Rotating the long side of a non-square matrix is not comparable across
  // precisions: its factor starts rank-deficient, the eigenvectors of its null space are
  // arbitrary, so float32 and float64 pick different bases, in which Adam's per-coordinate
  // normalisation then differs. Both are valid SOAP steps.)
  for (auto [rows, cols, max_dim] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {16, 16, 25}, {12, 20, 15}, {20, 12, 15}, {1, 16, 10}, {30, 6, 25}}) {
    SoapOptions o;
    o.precondition_frequency = 3;
    o.max_precond_dim = max_dim;
    auto opt = make_soap(o, {rows, cols});
    reference::SoapRef ref(o, {rows, cols});
    at::Tensor p = randn({rows, cols}, 2, at::kFloat);
    at::Tensor want = p.to(at::kDouble);
    for (int t = 0; t < 12; ++t) {
      at::Tensor g = randn({rows, cols}, 200 + t, at::kFloat);
      opt->step(p, g);
      want = ref.step(want, g);
      EXPECT_LT(relative_gap(p, want), 2e-4) << rows << "x" << cols << " step " << t + 1;
    }
    // The first call only builds the preconditioner.
    auto fresh = make_soap(o, {rows, cols});
    at::Tensor q = randn({rows, cols}, 2, at::kFloat), before = q.clone();
    fresh->step(q, randn({rows, cols}, 9, at::kFloat));
    EXPECT_TRUE(at::equal(q, before)) << "SOAP changed the parameter on its first call";
  }
}

// ---- behaviour on an ill-conditioned quadratic ------------------------------------------------

// f(W) = 1/2 ||A W - C||^2 with A's singular values spread over 10^2: SGD at a stable lr crawls
// along the small directions; Shampoo and SOAP precondition them away. Same lr for all three.
TEST(MatrixOptimizers, ShampooAndSoapBeatSgdOnAnIllConditionedQuadratic) {
  at::Tensor sigma = at::linspace(1.0, 0.01, 16, at::TensorOptions().dtype(at::kDouble)).sqrt();
  const at::Tensor A = with_singular_values(16, 16, sigma, 21).to(at::kFloat);
  const at::Tensor C = randn({16, 8}, 22, at::kFloat);
  const at::Tensor W0 = at::zeros({16, 8}, at::TensorOptions().dtype(at::kFloat));
  auto loss = [&](const at::Tensor& W) { return 0.5 * (at::matmul(A, W) - C).pow(2).sum().item<double>(); };
  auto grad = [&](const at::Tensor& W) { return at::matmul(A.t(), at::matmul(A, W) - C); };
  const double lr = 0.05;
  const int steps = 300;
  at::Tensor w_sgd = W0.clone();
  for (int t = 0; t < steps; ++t) w_sgd.add_(grad(w_sgd), -lr);
  ShampooOptions so;
  so.lr = lr, so.precondition_frequency = 5, so.epsilon = 1e-6;
  SoapOptions po;
  po.lr = lr, po.weight_decay = 0, po.precondition_frequency = 5;
  for (auto& opt : {make_shampoo(so, {16, 8}), make_soap(po, {16, 8})}) {
    at::Tensor w = W0.clone();
    for (int t = 0; t < steps; ++t) opt->step(w, grad(w));
    std::printf("quadratic after %d steps at lr %.2g: %s %.4g vs SGD %.4g (start %.4g)\n", steps, lr,
                to_string(opt->kind()), loss(w), loss(w_sgd), loss(W0));
    EXPECT_LT(loss(w), 0.5 * loss(w_sgd)) << to_string(opt->kind());
  }
}

// ---- state equals the memory model -----------------------------------------------------------

TEST(MatrixOptimizers, StateBytesEqualTheMemoryModel) {
  OptimizerCostConfig cfg;
  cfg.shampoo_max_preconditioner_dim = 8;
  cfg.soap_max_precond_dim = 25;
  ShampooOptions so;
  so.max_preconditioner_dim = 8;
  so.precondition_frequency = 1;
  SoapOptions po;
  po.max_precond_dim = 25;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{12, 20}, {30, 6}, {1, 16}}) {
    std::vector<std::unique_ptr<TensorOptimizer>> opts;
    opts.push_back(make_muon(MuonOptions{}, {rows, cols}));
    opts.push_back(make_shampoo(so, {rows, cols}));
    opts.push_back(make_soap(po, {rows, cols}));
    opts.push_back(make_adamw(AdamWOptions{}));
    for (auto& opt : opts) {
      at::Tensor p = randn({rows, cols}, 5, at::kFloat);
      for (int t = 0; t < 2; ++t) opt->step(p, randn({rows, cols}, 50 + t, at::kFloat));
      EXPECT_EQ(opt->state_bytes(), 4 * optimizer_state_elements(opt->kind(), {rows, cols}, cfg))
          << to_string(opt->kind()) << " " << rows << "x" << cols;
    }
  }
}

// ---- bad input -------------------------------------------------------------------------------

TEST(MatrixOptimizers, BadInputGivesClearErrors) {
  EXPECT_NE(error_of([] { make_shampoo(ShampooOptions{}, {4}); }).find("shampoo: needs a 2-D parameter, got 1-D"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_soap(SoapOptions{}, {2, 3, 4}); }).find("soap: needs a 2-D parameter"), std::string::npos);
  EXPECT_NE(error_of([] {
              auto o = make_muon(MuonOptions{}, {3, 3});
              at::Tensor p = at::zeros({3, 3}, at::TensorOptions().dtype(at::kLong));
              o->step(p, p);
            }).find("muon: needs a real floating-point tensor, got Long"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              auto o = make_soap(SoapOptions{}, {3, 3});
              at::Tensor p = at::zeros({3, 3}, at::TensorOptions().dtype(at::kComplexFloat));
              o->step(p, p);
            }).find("soap: needs a real floating-point tensor, got ComplexFloat"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              auto o = make_shampoo(ShampooOptions{}, {3, 3});
              at::Tensor p = at::zeros({3, 3}), g = at::zeros({3});
              o->step(p, g);
            }).find("shampoo: parameter and gradient must be the same 2-D shape"),
            std::string::npos);
  ShampooOptions nan_lr;
  nan_lr.lr = std::nan("");
  EXPECT_NE(error_of([&] { make_shampoo(nan_lr, {3, 3}); }).find("shampoo: lr must be finite, got nan"), std::string::npos);
  SoapOptions bad_beta;
  bad_beta.beta2 = 1.5;
  EXPECT_NE(error_of([&] { make_soap(bad_beta, {3, 3}); }).find("soap: beta2 must be in [0, 1), got 1.5"), std::string::npos);
  MuonOptions inf_wd;
  inf_wd.weight_decay = INFINITY;
  EXPECT_NE(error_of([&] { make_muon(inf_wd, {3, 3}); }).find("muon: weight_decay must be finite"), std::string::npos);
  AdamWOptions neg_eps;
  neg_eps.eps = -1;
  EXPECT_NE(error_of([&] { make_adamw(neg_eps); }).find("adamw: eps must be >= 0, got -1"), std::string::npos);
  EXPECT_NE(error_of([] { optimizer_kind_from_string("lion"); }).find("unknown optimizer 'lion' (expected muon, adamw, shampoo, soap, normuon or adamuon)"),
            std::string::npos);
}

// ---- Experts: a 3-D tensor stepped slice by slice ----------------------------------------------

// make_optimizer on [n, out, in] is bitwise n independent 2-D optimizers of [out, in], one per
// expert (Muon's lr adjusted from the slice's shape, not the tensor's); its state stacks theirs
// and loads back into an optimizer that continues identically.
TEST(MatrixOptimizers, ExpertTensorsStepEachSliceAsItsOwnMatrix) {
  for (OptimizerKind kind : {OptimizerKind::muon, OptimizerKind::shampoo, OptimizerKind::soap}) {
    OptimizerOptions o = training_defaults();
    o.optimizer = kind;
    o.shampoo.precondition_frequency = o.soap.precondition_frequency = 2;
    const int64_t n = 3, rows = 12, cols = 8;
    auto experts = make_optimizer(o, "layers.0.moe.experts.up", true, {n, rows, cols});
    std::vector<std::unique_ptr<TensorOptimizer>> slices;
    for (int64_t e = 0; e < n; ++e) slices.push_back(make_optimizer(o, "layers.0.moe.experts.up", true, {rows, cols}));
    at::Tensor param = randn({n, rows, cols}, 5, at::kFloat);
    std::vector<at::Tensor> alone;
    for (int64_t e = 0; e < n; ++e) alone.push_back(param.select(0, e).clone());
    auto grad = [&](int step) { return randn({n, rows, cols}, 100 + step, at::kFloat); };
    for (int step = 0; step < 5; ++step) {
      const at::Tensor g = grad(step);
      experts->step(param, g);
      for (int64_t e = 0; e < n; ++e) slices[e]->step(alone[e], g.select(0, e).contiguous());
    }
    EXPECT_TRUE(param.equal(at::stack(alone))) << to_string(kind);
    for (const auto& [key, t] : experts->state()) {
      if (!t.defined()) continue;
      EXPECT_TRUE(t.equal(at::stack({slices[0]->state().at(key), slices[1]->state().at(key), slices[2]->state().at(key)})))
          << to_string(kind) << " " << key;
    }
    EXPECT_EQ(experts->scalars(), slices[0]->scalars());
    // A checkpoint's round trip: the state loaded into a fresh optimizer steps on identically.
    auto resumed = make_optimizer(o, "layers.0.moe.experts.up", true, {n, rows, cols});
    resumed->load_state(experts->state(), experts->scalars(), {n, rows, cols});
    at::Tensor copy = param.clone();
    experts->step(param, grad(9));
    resumed->step(copy, grad(9));
    EXPECT_TRUE(param.equal(copy)) << to_string(kind);
    EXPECT_NE(error_of([&] { resumed->load_state(experts->state(), experts->scalars(), {n + 1, rows, cols}); })
                  .find("per-slice state of 3 experts loaded for a parameter of shape [4, 12, 8]"),
              std::string::npos);
  }
}

// --batched-ns: one bmm chain per expert tensor. Not claimed bitwise (batched kernels may block the
// products differently; bench_newton_schulz measures the difference, 0 on this project's CPUs): the
// bound is bf16's resolution, 2^-8 relative in Frobenius norm. Its state is the per-slice Muon's, so
// either mode resumes the other's checkpoint.
TEST(MatrixOptimizers, BatchedNewtonSchulzStaysWithinBf16OfThePerSliceOne) {
  const MuonOptions o;
  for (auto [n, rows, cols] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{4, 24, 16}, {3, 16, 40}}) {
    const at::Tensor g = randn({n, rows, cols}, 7, at::kFloat);
    const at::Tensor batched = newton_schulz_batched(g, o).to(at::kFloat);
    for (int64_t e = 0; e < n; ++e) {
      const at::Tensor one = newton_schulz(g.select(0, e), o).to(at::kFloat);
      EXPECT_LE((batched.select(0, e) - one).norm().item<double>(), std::ldexp(1.0, -8) * one.norm().item<double>());
    }
  }
  OptimizerOptions opts = training_defaults();
  auto per_slice = make_optimizer(opts, "experts", true, {3, 12, 8});
  opts.muon.batched_ns = true;
  auto batched = make_optimizer(opts, "experts", true, {3, 12, 8});
  at::Tensor a = randn({3, 12, 8}, 3, at::kFloat), b = a.clone();
  per_slice->step(a, randn({3, 12, 8}, 4, at::kFloat));
  batched->load_state(per_slice->state(), per_slice->scalars(), {3, 12, 8});
  EXPECT_TRUE(batched->state().at("momentum_buffer").equal(per_slice->state().at("momentum_buffer")));
  batched->step(b, randn({3, 12, 8}, 5, at::kFloat));
  EXPECT_EQ(batched->kind(), OptimizerKind::muon);
}


// The batched step, lr adjustment and weight decay included, against per-slice Muon on each
// expert: the adjustment comes from each expert's (out, in), never from (experts, out). Shapes
// where both adjustments differ between the two readings; the bound is the Newton–Schulz one.
TEST(MatrixOptimizers, BatchedMuonStepsEachExpertLikeThePerSliceOneLrAdjustmentIncluded) {
  for (MuonLrAdjustment adjust : {MuonLrAdjustment::original, MuonLrAdjustment::match_rms_adamw}) {
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{24, 16, 8}, {6, 4, 2}, {3, 8, 12}}) {
      MuonOptions o;
      o.adjust_lr = adjust;
      o.weight_decay = 0.1;
      const at::Tensor p0 = randn(shape, 11, at::kFloat), g = randn(shape, 12, at::kFloat);
      at::Tensor batched = p0.clone();
      make_batched_muon(o, shape)->step(batched, g);
      for (int64_t e = 0; e < shape[0]; ++e) {
        at::Tensor one = p0.select(0, e).clone();
        make_muon(o, {shape[1], shape[2]})->step(one, g.select(0, e).contiguous());
        const at::Tensor decayed = p0.select(0, e) * (1 - o.lr * o.weight_decay);
        const at::Tensor want = decayed - one, got = decayed - batched.select(0, e);
        EXPECT_LE((got - want).norm().item<double>(), std::ldexp(1.0, -8) * want.norm().item<double>())
            << "expert " << e << " of shape [" << shape[0] << ", " << shape[1] << ", " << shape[2] << "], "
            << (adjust == MuonLrAdjustment::original ? "original" : "match_rms_adamw") << ": update norm "
            << got.norm().item<double>() << ", per-slice " << want.norm().item<double>();
      }
    }
  }
}

}  // namespace
}  // namespace mfsdp
