// What each optimizer is configured with: pure data, read by the optimizers (core/optim), by the
// cost and memory models (core/plan) and recorded in checkpoints. The struct defaults of Muon and
// AdamW are torch.optim's own (the parity tests construct them bare); training_defaults()
// is the one set of training hyperparameters that train, verify, bench and the cost model share.
#pragma once

#include "core/plan/ns_variant.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

enum class OptimizerKind { muon, adamw, shampoo, soap, normuon, adamuon };
const char* to_string(OptimizerKind kind);
OptimizerKind optimizer_kind_from_string(const std::string& name);  // throws on unknown names
// Muon and its family (NorMuon, AdaMuon): the optimizers that orthogonalise with Newton–Schulz
// (MuonOptions' variant and steps).
bool uses_newton_schulz(OptimizerKind kind);

// torch.optim.Muon's adjust_lr_fn.
enum class MuonLrAdjustment {
  original,         // lr * sqrt(max(1, rows / cols))
  match_rms_adamw,  // lr * 0.2 * sqrt(max(rows, cols))
};
const char* to_string(MuonLrAdjustment adjustment);
MuonLrAdjustment muon_lr_adjustment_from_string(const std::string& name);  // throws on unknown names

struct MuonOptions {
  double lr = 1e-3;
  double weight_decay = 0.1;
  double momentum = 0.95;
  bool nesterov = true;
  double ns_a = 3.4445, ns_b = -4.7750, ns_c = 2.0315;  // the torch variant's triple
  double eps = 1e-7;                                    // the torch variant's normalisation floor
  int ns_steps = 5;  // a variant with a fixed table pins it (ns_variant_info(v).fixed_steps)
  // The Newton–Schulz variant (core/plan/ns_variant.h): its coefficients, normalisation, dtype and
  // spelling; torch.optim.Muon's by default.
  NsVariant ns_variant = NsVariant::torch;
  MuonLrAdjustment adjust_lr = MuonLrAdjustment::original;
  // Expert tensors [n, out, in]: one batched Newton–Schulz chain (bmm/baddbmm over the n slices)
  // instead of n per-slice chains. Not bitwise the per-slice mode (batched kernels block the
  // products differently); its difference is measured (bench_experts), never claimed zero.
  bool batched_ns = false;
};

// NorMuon as pytorch-optimizer 4.1.0's NorMuon (its defaults; docs/optimizers.md): Muon's momentum
// and Newton–Schulz, then a per-row second moment v (shape [rows, 1], the EMA of the mean square of
// each row of the orthogonalised update), the update divided by sqrt(v) + eps and rescaled.
enum class NorMuonScale {
  preserve_norm,  // back to the orthogonalised update's Frobenius norm; lr adjusted as Muon's adjust_lr
  match_rms,      // to RMS 0.2 (0.2 sqrt(rows cols) / ||U||); lr as given
};
struct NorMuonOptions {
  double lr = 2e-2;
  double weight_decay = 0.0;
  double momentum = 0.95;
  double beta2 = 0.95;
  bool nesterov = true;
  double eps = 1e-10;
  NorMuonScale update_scale = NorMuonScale::preserve_norm;
  MuonLrAdjustment adjust_lr = MuonLrAdjustment::original;  // pytorch-optimizer's use_adjusted_lr = False
};
const char* to_string(NorMuonScale s);
NorMuonScale normuon_scale_from_string(const std::string& name);  // throws on unknown names

// AdaMuon as pytorch-optimizer 4.1.0's AdaMuon (its defaults): an EMA m of the gradient,
// orthogonalised, an elementwise second moment v of the result (bias-corrected), the update divided
// by sqrt(v / (1 - beta2^t)) + eps and scaled to RMS 0.2 through the lr (sqrt(min(rows, cols)) / ||U||,
// lr 0.2 sqrt(max(rows, cols))).
struct AdaMuonOptions {
  double lr = 2e-2;
  double beta1 = 0.9, beta2 = 0.95;
  double weight_decay = 0.0;
  double eps = 1e-10;
  MuonLrAdjustment adjust_lr = MuonLrAdjustment::match_rms_adamw;  // pytorch-optimizer's use_adjusted_lr = True
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// Shampoo as in Meta's Distributed Shampoo (docs/optimizers.md has the exact step).
struct ShampooOptions {
  double lr = 1e-2;
  double beta1 = 0.9;         // EMA of the gradient (the preconditioned quantity), bias-corrected
  double beta2 = 1.0;         // factor statistics: 1 = running sums, else EMA
  double epsilon = 1e-12;     // added as epsilon * I before the root inverse
  double weight_decay = 0.0;  // decoupled: p *= 1 - lr * wd before the update
  int64_t max_preconditioner_dim = 1024;  // larger dimensions are split into blocks of at most this
  int precondition_frequency = 10;        // root inverses recomputed every this many steps
  int start_preconditioning_step = -1;    // grafted steps before it; -1 = precondition_frequency
  bool use_bias_correction = true;
  bool adam_grafting = true;  // Shampoo direction rescaled per block to the Adam direction's norm
  double grafting_beta2 = 0.999, grafting_epsilon = 1e-8;
};

// SOAP as in the SOAP paper's reference code (Adam in the eigenbasis of Shampoo's factors).
struct SoapOptions {
  double lr = 3e-3;
  double beta1 = 0.95, beta2 = 0.95;
  double shampoo_beta = -1;  // EMA of the factors; -1 = beta2
  double eps = 1e-8;
  double weight_decay = 0.01;  // after the update, on the updated parameter
  int precondition_frequency = 10;
  int64_t max_precond_dim = 10000;  // a side longer than this is not rotated
  bool correct_bias = true;
};

// A parameter group as torch.optim users know them: parameters whose name matches `pattern` (a
// glob: * ? [..]) use these hyperparameters instead of their optimizer's. The first matching group
// wins; a group that matches no parameter is an error.
struct ParamGroup {
  std::string pattern;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

// Every optimizer's hyperparameters and which one steps the hidden matrices (everything else:
// AdamW).
struct OptimizerOptions {
  OptimizerKind optimizer = OptimizerKind::muon;
  MuonOptions muon;  // also NorMuon's and AdaMuon's Newton–Schulz (variant, steps)
  NorMuonOptions normuon;
  AdaMuonOptions adamuon;
  AdamWOptions adamw;
  ShampooOptions shampoo;
  SoapOptions soap;
  std::vector<ParamGroup> groups;
};

// The training defaults (documented in the README): Muon lr 0.02 as common Muon recipes use for
// hidden matrices, AdamW 3e-3 for embeddings, head and 1-D tails, Shampoo and SOAP 3e-3, both
// preconditioners refreshed every 10 steps; everything else as the structs above.
OptimizerOptions training_defaults();

// --ns-variant and --ns-steps (each optional) into `muon`; throws naming both flags when a variant
// with a fixed table is given steps, or either flag with an optimizer that has no Newton–Schulz.
void set_newton_schulz(MuonOptions& muon, OptimizerKind optimizer, const std::optional<std::string>& variant,
                       std::optional<int> steps);

// The matrix optimizer as run headers name it: "muon", or with a Newton–Schulz variant or step count
// other than the default, "muon (Newton-Schulz polar-express-5, 5 steps)".
std::string describe_optimizer(const OptimizerOptions& o);

}  // namespace mfsdp
