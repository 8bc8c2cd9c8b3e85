// Optimizers acting on one whole local tensor with their own state; they never communicate.
// Muon and AdamW follow torch.optim.Muon and torch.optim.AdamW (single-tensor path) of the pinned
// torch version op for op; issue-level bitwise conformance tests run them against the real ones.
#pragma once

#include "core/optimizer_cost.h"

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mfsdp {

struct MuonOptions {
  double lr = 1e-3;
  double weight_decay = 0.1;
  double momentum = 0.95;
  bool nesterov = true;
  double ns_a = 3.4445, ns_b = -4.7750, ns_c = 2.0315;
  double eps = 1e-7;
  int ns_steps = 5;
  std::string adjust_lr_fn = "original";  // or "match_rms_adamw"
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
  int precondition_frequency = 1;         // root inverses recomputed every this many steps
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

// (A + epsilon I)^(-1/root) of a symmetric positive semi-definite matrix by symmetric
// eigendecomposition in float64 (eigenvalues clamped below at epsilon), returned in A's dtype.
at::Tensor matrix_inverse_root(const at::Tensor& a, int root, double epsilon);

// Newton–Schulz orthogonalisation exactly as torch.optim.Muon spells it (bfloat16, transpose when
// rows > cols, Frobenius norm clamped at eps, addmm updates).
at::Tensor newton_schulz(const at::Tensor& grad, const MuonOptions& o);

// The learning rate Muon applies for a parameter of full shape rows x cols.
double muon_adjusted_lr(double lr, const std::string& adjust_lr_fn, int64_t rows, int64_t cols);

// One tensor's optimizer: state is a named set of tensors plus scalars.
class TensorOptimizer {
 public:
  virtual ~TensorOptimizer() = default;
  virtual OptimizerKind kind() const = 0;
  // Updates `param` in place from `grad` (same shape). `full_shape` is the parameter's full
  // shape (for lr adjustment); `param` may be a slice of it for element-wise optimizers.
  virtual void step(at::Tensor& param, const at::Tensor& grad) = 0;
  virtual std::map<std::string, at::Tensor> state() const = 0;
  virtual std::map<std::string, double> scalars() const { return {}; }  // e.g. the step count
  // Replaces the state with what state() and scalars() of an optimizer of the same kind and shape
  // returned (undefined tensors left out; no tensors at all: not stepped yet). `param_shape` is the
  // shape of the tensor this optimizer steps. Names, shapes, dtypes and counters are checked;
  // throws naming the optimizer and the entry. Tensors are kept as given (on the parameter's device).
  virtual void load_state(const std::map<std::string, at::Tensor>& state, const std::map<std::string, double>& scalars,
                          const std::vector<int64_t>& param_shape) = 0;
  virtual int64_t state_bytes() const;
};

std::unique_ptr<TensorOptimizer> make_muon(const MuonOptions& options, std::vector<int64_t> full_shape);
std::unique_ptr<TensorOptimizer> make_adamw(const AdamWOptions& options);
std::unique_ptr<TensorOptimizer> make_shampoo(const ShampooOptions& options, std::vector<int64_t> shape);
std::unique_ptr<TensorOptimizer> make_soap(const SoapOptions& options, std::vector<int64_t> shape);

// Checks hyperparameters (finite, in range), naming the optimizer and the field; throws.
void validate(const MuonOptions& o);
void validate(const AdamWOptions& o);
void validate(const ShampooOptions& o);
void validate(const SoapOptions& o);

}  // namespace mfsdp
