// Newton–Schulz orthogonalisation in each variant of core/plan/ns_variant.h, on a matrix (mm,
// addmm) or on a stack of matrices [n, out, in] (bmm, baddbmm), each op spelled as its source
// spells it so that the roundings are the source's (docs/optimizers.md, "Newton–Schulz variants").
#include "core/optim/optim.h"

#include <ATen/ops/abs.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/sum.h>
#include <ATen/TensorOperators.h>

#include <algorithm>

namespace mfsdp {
namespace {

bool stacked(const at::Tensor& x) { return x.dim() == 3; }
at::Tensor transposed(const at::Tensor& x) { return stacked(x) ? x.transpose(1, 2) : x.t(); }
at::Tensor product(const at::Tensor& a, const at::Tensor& b) { return stacked(a) ? at::bmm(a, b) : at::mm(a, b); }
at::Tensor gram(const at::Tensor& x) { return product(x, transposed(x)); }
// beta * input + alpha * (m1 @ m2)
at::Tensor addmm(const at::Tensor& input, const at::Tensor& m1, const at::Tensor& m2, double beta, double alpha = 1.0) {
  return stacked(input) ? at::baddbmm(input, m1, m2, beta, alpha) : at::addmm(input, m1, m2, beta, alpha);
}
at::Tensor frobenius(const at::Tensor& x) { return at::linalg_vector_norm(x, 2, at::IntArrayRef{-2, -1}, /*keepdim=*/true); }
bool reset_at(const NsVariantInfo& v, int i) { return std::find(v.reset_steps.begin(), v.reset_steps.end(), i) != v.reset_steps.end(); }

// Gram Newton–Schulz (pytorch-optimizer 4.1.0's zero_power_via_gram_newton_schulz, Dao-AILab's
// _gram_newton_schulz): iterate on R = X X^T; the polynomial Z = b R + c R^2 accumulates into
// Q = a I + Z (then Q <- a Q + Q Z) and R <- Q R Q (as a R + R Z, then a (RZ) + Z (RZ)); at a reset
// step X <- Q X and R is formed anew; at the end X <- Q X.
at::Tensor gram_newton_schulz(at::Tensor x, const NsVariantInfo& v, int steps, NsTriple torch_triple) {
  if (steps <= 0) return x;
  at::Tensor R = gram(x), Q;
  for (int i = 0; i < steps; ++i) {
    if (reset_at(v, i) && Q.defined()) {
      x = product(Q, x);
      R = gram(x);
      Q = at::Tensor();
    }
    const NsTriple t = ns_coefficients(v, i, torch_triple);
    at::Tensor Z = addmm(R, R, R, t.b, t.c);
    if (Q.defined()) Q = addmm(Q, Q, Z, t.a);
    if (i + 1 < steps && !reset_at(v, i + 1)) {
      const at::Tensor RZ = addmm(R, R, Z, t.a);
      R = addmm(RZ, Z, RZ, t.a);
    }
    if (!Q.defined()) {
      if (v.id == NsVariant::gram_dao) {
        Q = Z + at::eye(Z.size(-1), Z.options()) * t.a;  // Z + a * I, with I in the iteration dtype
      } else {
        Q = Z;
        Q.diagonal(0, -2, -1).add_(t.a);  // factor.diagonal().add_(w0)
      }
    }
  }
  return product(Q, x);
}

}  // namespace

at::Tensor orthogonalize(const at::Tensor& grad, const MuonOptions& o) {
  TORCH_CHECK(grad.dim() == 2 || grad.dim() == 3, "muon: Newton–Schulz needs a 2-D matrix or a 3-D stack [n, out, in], got ",
              grad.dim(), "-D");
  const NsVariantInfo& v = ns_variant_info(o.ns_variant);
  const at::ScalarType dtype = v.dtype == NsDtype::bf16 ? at::kBFloat16 : at::kHalf;
  const bool tall = grad.size(-2) > grad.size(-1);
  const double eps = v.eps < 0 ? o.eps : v.eps;
  const int steps = ns_steps_of(v, o.ns_steps);
  const at::Tensor oriented = tall ? transposed(grad) : grad;
  // The cast (and, for a source that transposes by a copy, the contiguous copy); always a new tensor,
  // so the in-place normalisations never write into `grad`.
  auto cast = [&](const at::Tensor& t, at::ScalarType to) {
    return t.to(to, /*non_blocking=*/false, /*copy=*/true,
                v.transpose_copy ? at::MemoryFormat::Contiguous : at::MemoryFormat::Preserve);
  };
  at::Tensor x, aol_gram;
  switch (v.normalisation) {
    case NsNormalisation::clamp_in_dtype:
      if (v.id == NsVariant::torch) {  // torch.optim.Muon: cast, transpose (a view), X / max(||X||, eps)
        x = grad.to(dtype);
        if (tall) x = transposed(x);
        x = x.div(stacked(x) ? frobenius(x).clamp_min(eps) : at::linalg_vector_norm(x, 2).clamp_min(eps));
      } else {
        x = cast(oriented, dtype);
        at::Tensor norm = frobenius(x);
        if (v.safety != 1.0) norm.mul_(v.safety);
        x.div_(norm.clamp_min_(eps));
      }
      break;
    case NsNormalisation::clamp_in_fp32: {
      const at::Tensor f = oriented.to(at::kFloat);
      x = cast(f / frobenius(f).clamp_min(eps), dtype);
      break;
    }
    case NsNormalisation::add_in_dtype:
      x = cast(oriented, dtype);
      x = x / (frobenius(x) * v.safety + eps);
      break;
    case NsNormalisation::add_in_fp32: {
      const at::Tensor f = oriented.to(at::kFloat);
      x = cast(f / (frobenius(f) + eps), dtype);
      break;
    }
    case NsNormalisation::aol: {
      x = cast(oriented, dtype);
      aol_gram = gram(x);
      const at::Tensor s = at::rsqrt(at::sum(at::abs(aol_gram), -1).clamp_min(eps));
      x = x * s.unsqueeze(-1);
      aol_gram = aol_gram * s.unsqueeze(-1) * s.unsqueeze(-2);
      break;
    }
  }
  const NsTriple torch_triple{o.ns_a, o.ns_b, o.ns_c};
  const bool square = grad.size(-2) == grad.size(-1);
  if (v.spelling == NsSpelling::gram && !(v.square_fallback && square)) {
    x = gram_newton_schulz(x, v, steps, torch_triple);
  } else {
    for (int i = 0; i < steps; ++i) {
      const NsTriple t = ns_coefficients(v, i, torch_triple);
      const at::Tensor A = i == 0 && aol_gram.defined() ? aol_gram : gram(x);
      if (v.spelling == NsSpelling::horner) {  // (c A + b I) A + a I, then times X
        at::Tensor Y = A * t.c;
        Y.diagonal(0, -2, -1).add_(t.b);
        Y = product(Y, A);
        Y.diagonal(0, -2, -1).add_(t.a);
        x = product(Y, x);
      } else if (v.spelling == NsSpelling::elementwise) {
        const at::Tensor B = A * t.b + product(A, A) * t.c;
        x = x * t.a + product(B, x);
      } else if (t.c == 0 && v.cubic_when_c_is_zero) {
        x = addmm(x, A, x, t.a, t.b);
      } else {
        const at::Tensor B = addmm(A, A, A, t.b, t.c);
        x = addmm(x, B, x, t.a);
      }
    }
  }
  if (tall) x = transposed(x);
  return stacked(x) ? x.contiguous() : x;
}

at::Tensor newton_schulz(const at::Tensor& grad, const MuonOptions& o) {
  TORCH_CHECK(grad.dim() == 2, "muon: Newton–Schulz needs a 2-D tensor, got ", grad.dim(), "-D");
  return orthogonalize(grad, o);
}

at::Tensor newton_schulz_batched(const at::Tensor& grad, const MuonOptions& o) {
  TORCH_CHECK(grad.dim() == 3, "muon: batched Newton–Schulz needs a 3-D tensor [n, out, in], got ", grad.dim(), "-D");
  return orthogonalize(grad, o);
}

}  // namespace mfsdp
