// Model configurations by name, shapes only (no weights are allocated).
#pragma once

#include "core/plan/model_spec.h"

#include <string>
#include <vector>

namespace mfsdp {

// A decoder-only transformer in the Llama/Qwen layout: token embedding; per block RMSNorm,
// q/k/v/o projections (grouped-query: k/v have kv_heads * head_dim rows), RMSNorm, SwiGLU MLP
// (gate, up, down); final RMSNorm; untied output head. Units: "embed", "layers.<i>", "head"
// (the final norm and the output head).
struct TransformerConfig {
  std::string name;
  int64_t vocab = 256;
  int64_t hidden = 64;
  int64_t intermediate = 128;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 4;
  bool qkv_bias = false;  // Qwen2-style biases on q, k, v
  c10::ScalarType dtype = c10::kFloat;
  bool tie_embeddings = false;  // the head reuses embed.weight (no head.weight)

  int64_t head_dim() const { return hidden / heads; }
};

ModelSpec transformer_spec(const TransformerConfig& config);

// Names accepted by preset(): tiny, bench32, llama3-8b, qwen2.5-32b, llama3-70b (with aliases
// 8b, 32b, 70b).
std::vector<std::string> preset_names();
bool is_preset(const std::string& name);
TransformerConfig preset_config(const std::string& name);  // throws listing the known names
ModelSpec preset(const std::string& name, c10::ScalarType dtype);

}  // namespace mfsdp
