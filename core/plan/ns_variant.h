// The Newton–Schulz variants Muon can orthogonalise with (--ns-variant; docs/optimizers.md, "Newton–
// Schulz variants"): pure data, each pinned to one cited source (repository and commit, or paper),
// read by the optimizers (core/optim/newton_schulz.cpp), the cost model, checkpoints and the CLI.
// A variant fixes its coefficients, how they are indexed past the table's end, its step count (or
// takes --ns-steps), its normalisation, its dtype, its transposition and its spelling of the
// products. The tables are checked coefficient by coefficient against their sources
// (regression/optim_parity/check_ns.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp {

enum class NsVariant {
  torch,                      // torch.optim.Muon's quintic (the default)
  simple_eo,                  // Emerging-Optimizers "simple"
  cubic5_eo,                  // Emerging-Optimizers "cubic5" (c = 0: a cubic)
  polar_express_5,            // the 5-step Polar Express table of modded-nanogpt / nanochat / Dion
  polar_express_paper,        // Polar Express, Algorithm 1 of the paper
  polar_express_pyopt,        // pytorch-optimizer 4.1.0 "polar_express"
  polar_express_safer_pyopt,  // pytorch-optimizer 4.1.0 "polar_express_safer"
  polar_express_eo,           // Emerging-Optimizers "polar_express"
  aol,                        // flash-newton-schulz's AOL rescaling
  deepseek_v4,                // DeepSeek-V4's hybrid (8 + 2 steps)
  gram_pyopt,                 // pytorch-optimizer 4.1.0 zero_power_via_gram_newton_schulz
  gram_dao,                   // Dao-AILab gram-newton-schulz
  heavyball,                  // heavyball 3.2.1 zeropower_via_newtonschulz5 (its input rounded to nearest)
};

struct NsTriple {
  double a, b, c;  // X <- a X + (b A + c A^2) X, A = X X^T
};

// How the coefficient of step i is found when i passes the table's end.
enum class NsIndexing { repeat_last, cycle };

// The normalisation before the first step.
enum class NsNormalisation {
  clamp_in_dtype,  // cast, then X / max(||X||_F * safety, eps) in the iteration dtype (torch, pytorch-optimizer)
  clamp_in_fp32,   // X / max(||X||_F, eps) in float32, then cast (F.normalize: Emerging-Optimizers; pytorch-optimizer's Gram)
  add_in_dtype,    // cast, then X / (||X||_F * safety + eps) in the iteration dtype (Polar Express paper, modded-nanogpt)
  add_in_fp32,     // X / (||X||_F + eps) in float32, then cast (Dao-AILab)
  aol,             // no Frobenius step: A = X X^T, s = rsqrt(max(sum_j |A_ij|, eps)), X <- diag(s) X, A <- diag(s) A diag(s)
};

// How the products of a step are written (the roundings differ in low precision).
enum class NsSpelling {
  addmm,        // B = addmm(A, A, A, beta=b, alpha=c); X = addmm(X, B, X, beta=a)
  elementwise,  // B = b*A + c*(A@A); X = a*X + B@X, each op rounded
  gram,         // Gram Newton–Schulz: iterate on R = X X^T and Q, restart at reset_steps, X <- Q X at the end
  horner,       // Y = c*A; Y += b I; Y = Y@A; Y += a I; X = Y@X, each op rounded (heavyball)
};

enum class NsDtype { bf16, fp16 };

struct NsVariantInfo {
  NsVariant id;
  const char* name;     // the --ns-variant spelling
  const char* source;   // repository@commit path (or the paper), recorded in checkpoints as the version
  const char* url;
  std::vector<NsTriple> table;  // empty: MuonOptions' (ns_a, ns_b, ns_c) every step (torch)
  NsIndexing indexing;
  int fixed_steps;      // > 0: the step count the table pins (--ns-steps refused); 0: --ns-steps, default 5
  NsNormalisation normalisation;
  double safety;        // the norm's multiplier (1: none)
  double eps;           // < 0: MuonOptions::eps (torch)
  NsDtype dtype;
  bool transpose_copy;  // tall matrices transposed by a contiguous copy (else a view)
  NsSpelling spelling;
  std::vector<int> reset_steps;  // Gram: restart at the start of these 0-based steps
  bool square_fallback;          // Gram: square matrices take the standard iteration
  bool cubic_when_c_is_zero;     // a step with c = 0 is X = addmm(X, A, X, beta=a, alpha=b) (Emerging-Optimizers)
};

const std::vector<NsVariantInfo>& ns_variants();  // every variant, the default first
const NsVariantInfo& ns_variant_info(NsVariant v);
const char* to_string(NsVariant v);
NsVariant ns_variant_from_string(const std::string& name);  // throws naming the known variants
std::string ns_variant_names();                              // "torch, simple-eo, ..." for --help

// The steps a variant runs: its fixed count, else `ns_steps` (MuonOptions::ns_steps).
inline int ns_steps_of(const NsVariantInfo& v, int ns_steps) { return v.fixed_steps > 0 ? v.fixed_steps : ns_steps; }

// The coefficients of 0-based step `i` (`torch_triple` for a variant without a table).
NsTriple ns_coefficients(const NsVariantInfo& v, int i, NsTriple torch_triple);

// Multiply-adds of `steps` iterations of the variant on a rows x cols matrix (s the short side, l
// the long one): standard s^2 (2l + s) per step (AOL's too: its rescale's A is step 0's; a cubic
// step of Emerging-Optimizers' 2 s^2 l); Gram
// s^2 l for R, then per step s^3 for R^2, s^3 for Q (after the first), 2 s^3 for R (unless the last
// or before a restart), 2 s^2 l per restart and s^2 l for the final Q X.
double ns_multiply_adds(const NsVariantInfo& v, int steps, int64_t rows, int64_t cols);

}  // namespace mfsdp
