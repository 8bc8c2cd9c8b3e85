// A small decoder-only transformer written functionally on ATen ops, unit by unit, so the same
// code runs on full parameters (oracle, reference) and on the runtime's gathered views.
// Layout and names as presets.h: "embed" | "layers.<i>" (RMSNorm, causal self-attention with
// separate q/k/v/o, RMSNorm, SwiGLU MLP or, with experts, a router and routed SwiGLU experts
// stored 3-D [E, out, in] plus optional shared experts) | "head" (final RMSNorm, output head,
// untied unless tie_embeddings).
#pragma once

#include "core/plan/presets.h"
#include "core/runtime/param_map.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <unordered_map>

namespace mfsdp {

// Precision: the model computes in the dtype of the parameters it is given (the policy's compute
// copies); each unit first casts its input to that dtype (FSDP2's cast_forward_inputs) and, with
// an output dtype, casts its output to it. Three things are computed in float32 whatever the
// compute dtype (docs/precision.md), each cast back to it afterwards: RMSNorm's normalisation (the
// weight multiplies in the compute dtype), the attention softmax, and the cross-entropy loss.
// The two float32 islands inside a unit (exposed for their tests): RMSNorm over the last dimension
// (normalised in float32, cast back to x's dtype, then times w) and the attention softmax over the
// last dimension (in float32, cast back to `dtype`).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w);
at::Tensor attention_softmax(const at::Tensor& scores, c10::ScalarType dtype);

class TransformerModel {
 public:
  explicit TransformerModel(TransformerConfig config, std::optional<c10::ScalarType> output_dtype = {});

  const TransformerConfig& config() const { return config_; }
  const ModelSpec& spec() const { return spec_; }
  std::optional<c10::ScalarType> output_dtype() const { return output_dtype_; }
  int num_units() const { return static_cast<int>(config_.layers) + 2; }

  // Initial full parameters, identical on every rank for the same seed: hidden matrices and
  // embeddings N(0, 0.02), the head N(0, 0.02), norms 1, biases 0. Drawn on the CPU and then
  // copied to `device`, so every device starts from the same bits.
  ParamMap init(uint64_t seed, at::Device device = at::kCPU) const;

  // Unit `u` of the forward pass: embed takes token ids [B, S]; blocks map hidden [B, S, H] to
  // [B, S, H]; head returns the mean cross-entropy against `targets` [B, S].
  at::Tensor unit_forward(int u, const at::Tensor& input, const ParamMap& params, const at::Tensor& targets) const;

  // All units in order, on full parameters: the plain reference forward.
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets, const ParamMap& params) const;

  // QK-clip's statistic (core/train/qk_clip.h): while `sink` is set (a float32 [layers, heads]
  // tensor on the compute device), every block's forward raises row `layer` of it to the largest
  // attention logit of each head: the scores after the 1/sqrt(head_dim) scale, over the unmasked
  // (causal) pairs of every sequence, as the softmax reads them; NaN wins. A recomputed forward
  // records the same values again, which leaves the maximum as it was. Null: nothing recorded.
  // One model per rank (train_loop's), so no two threads share a sink.
  void record_max_logits(at::Tensor* sink) const { logit_sink_ = sink; }

 private:
  at::Tensor block(int64_t layer, const at::Tensor& x, const ParamMap& p) const;
  at::Tensor experts(const std::string& prefix, const at::Tensor& h, const ParamMap& p) const;
  TransformerConfig config_;
  ModelSpec spec_;
  std::optional<c10::ScalarType> output_dtype_;
  mutable at::Tensor* logit_sink_ = nullptr;
};

}  // namespace mfsdp
