// Optimizers acting on one whole local tensor with their own state; they never communicate.
// Muon and AdamW follow torch.optim.Muon and torch.optim.AdamW (single-tensor path) of the pinned
// torch version op for op; bitwise parity tests (regression/optim_parity/) run them against the real ones.
#pragma once

#include "core/plan/optimizer_config.h"

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mfsdp {

// (A + epsilon I)^(-1/root) of a symmetric positive semi-definite matrix by symmetric
// eigendecomposition in float64 (eigenvalues clamped below at epsilon), returned in A's dtype.
at::Tensor matrix_inverse_root(const at::Tensor& a, int root, double epsilon);

// Newton–Schulz orthogonalisation in MuonOptions::ns_variant (core/plan/ns_variant.h), each variant
// as its source spells it; the default is torch.optim.Muon's (bfloat16, transpose when rows > cols,
// Frobenius norm clamped at eps, addmm updates). On a 3-D stack [n, out, in], one batched chain
// (bmm, baddbmm): equal to the 2-D one per slice up to the batched kernels' rounding (not bitwise;
// bench_experts). The result is in the variant's dtype (bf16, fp16 for Gram).
at::Tensor orthogonalize(const at::Tensor& grad, const MuonOptions& o);
at::Tensor newton_schulz(const at::Tensor& grad, const MuonOptions& o);          // 2-D only
at::Tensor newton_schulz_batched(const at::Tensor& grad, const MuonOptions& o);  // 3-D only

// The learning rate Muon applies for a parameter of full shape rows x cols.
double muon_adjusted_lr(double lr, MuonLrAdjustment adjustment, int64_t rows, int64_t cols);

// One tensor's optimizer: state is a named set of tensors plus scalars.
class TensorOptimizer {
 public:
  virtual ~TensorOptimizer() = default;
  virtual OptimizerKind kind() const = 0;
  // Updates `param` in place from `grad` (same shape). `full_shape` is the parameter's full
  // shape (for lr adjustment); `param` may be a slice of it for element-wise optimizers.
  virtual void step(at::Tensor& param, const at::Tensor& grad) = 0;
  // The learning-rate schedule (core/optim/lr_schedule.h): the steps from here use lr = base · factor,
  // base being the lr it was made with (its group's), factor = λ(t); 1 restores the base exactly.
  virtual void set_lr_factor(double factor) = 0;
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
// NorMuon and AdaMuon (core/optim/muon_family.cpp) on a 2-D matrix, orthogonalising with `ns`'s
// Newton–Schulz variant and steps.
std::unique_ptr<TensorOptimizer> make_normuon(const NorMuonOptions& options, const MuonOptions& ns, std::vector<int64_t> shape);
std::unique_ptr<TensorOptimizer> make_adamuon(const AdaMuonOptions& options, const MuonOptions& ns, std::vector<int64_t> shape);
std::unique_ptr<TensorOptimizer> make_shampoo(const ShampooOptions& options, std::vector<int64_t> shape);
std::unique_ptr<TensorOptimizer> make_soap(const SoapOptions& options, std::vector<int64_t> shape);
// Experts: a 3-D tensor [n, out, in] stepped as n matrices, slice e by slices[e] (each made for
// shape [out, in]); state() stacks each entry over the slices, scalars are slice 0's (all equal).
std::unique_ptr<TensorOptimizer> make_per_slice(std::vector<std::unique_ptr<TensorOptimizer>> slices);
// Muon over an expert tensor [n, out, in] with newton_schulz_batched (MuonOptions::batched_ns); its
// state is the per-slice Muon's stacked state, so checkpoints move between the two modes.
std::unique_ptr<TensorOptimizer> make_batched_muon(const MuonOptions& options, std::vector<int64_t> shape);

// Checks hyperparameters (finite, in range), naming the optimizer and the field; throws.
void validate(const MuonOptions& o);
void validate(const AdamWOptions& o);
void validate(const NorMuonOptions& o);
void validate(const AdaMuonOptions& o);
void validate(const ShampooOptions& o);
void validate(const SoapOptions& o);

}  // namespace mfsdp
