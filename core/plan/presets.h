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
  // Attention: head_dim (0: hidden / heads) and Qwen3's per-head RMSNorm of q and k.
  int64_t head_dim_override = 0;
  bool qk_norm = false;
  // Multi-head latent attention (DeepSeek-V3), used when kv_lora_rank > 0: q through a rank
  // q_lora_rank bottleneck, k/v through kv_lora_rank plus a shared rope key.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  // Mixture of experts, used when experts > 0: every block after the first `first_dense` has a
  // router [experts, hidden] (plus a score-correction bias when router_bias) and expert weights
  // stored 3-D [experts, out, in] (gate, up, down) of width moe_intermediate; shared_experts
  // always-on experts of that width as one dense SwiGLU MLP.
  int64_t experts = 0, top_k = 0, shared_experts = 0, moe_intermediate = 0, first_dense = 0;
  bool router_bias = false;
  // The dense MLP: SwiGLU (gate, up, down) by default; false: the public MatrixFSDP benchmark's
  // ungated MLP, two up projections [intermediate / 2, hidden] concatenated, GELU, and the down
  // projection [hidden, intermediate].
  bool gated_mlp = true;

  int64_t head_dim() const { return head_dim_override > 0 ? head_dim_override : hidden / heads; }
};

ModelSpec transformer_spec(const TransformerConfig& config);

// Names accepted by preset(): tiny, bench32, llama3-8b, qwen2.5-32b, llama3-70b (with aliases
// 8b, 32b, 70b), and the MoE presets mixtral-8x7b, qwen3-30b-a3b, deepseek-v3 (planning only).
std::vector<std::string> preset_names();
bool is_preset(const std::string& name);
TransformerConfig preset_config(const std::string& name);  // throws listing the known names
ModelSpec preset(const std::string& name, c10::ScalarType dtype);

}  // namespace mfsdp
