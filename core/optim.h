// Optimizers acting on one whole local tensor with their own state; they never communicate.
// Muon and AdamW follow torch.optim.Muon and torch.optim.AdamW (single-tensor path) of the pinned
// torch version op for op; issue-level bitwise conformance tests run them against the real ones.
#pragma once

#include "core/optimizer_cost.h"

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>

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
  virtual int64_t state_bytes() const;
};

std::unique_ptr<TensorOptimizer> make_muon(const MuonOptions& options, std::vector<int64_t> full_shape);
std::unique_ptr<TensorOptimizer> make_adamw(const AdamWOptions& options);

}  // namespace mfsdp
