#include "core/plan/presets.h"

#include <c10/util/Exception.h>

#include <map>

namespace mfsdp {
namespace {

void add(ModelSpec& spec, const std::string& unit, const std::string& name, std::vector<int64_t> shape,
         ParamKind kind, c10::ScalarType dtype) {
  spec.params.push_back({name, std::move(shape), dtype, unit, kind, {}});
}

// Published shapes of each configuration (hidden, intermediate, layers, heads, kv heads, vocab).
const std::map<std::string, TransformerConfig>& presets() {
  static const std::map<std::string, TransformerConfig> table = [] {
    std::map<std::string, TransformerConfig> t;
    // The project's tiny test model (byte-level vocabulary).
    t["tiny"] = {"tiny", 256, 64, 128, 2, 4, 4, false, c10::kFloat};
    // The public MatrixFSDP benchmark model: 32 layers, hidden 4096, intermediate 16384, 32 heads
    // (full multi-head attention); vocabulary 32000 as in Llama-2's tokenizer.
    t["bench32"] = {"bench32", 32000, 4096, 16384, 32, 32, 32, false, c10::kBFloat16};
    t["bench32"].gated_mlp = false;  // the public benchmark's MLP: two 8192 x 4096 ups, GELU, 4096 x 16384 down
    t["llama3-8b"] = {"llama3-8b", 128256, 4096, 14336, 32, 32, 8, false, c10::kBFloat16};
    t["qwen2.5-32b"] = {"qwen2.5-32b", 152064, 5120, 27648, 64, 40, 8, true, c10::kBFloat16};
    t["llama3-70b"] = {"llama3-70b", 128256, 8192, 28672, 80, 64, 8, false, c10::kBFloat16};
    // MoE (config.json of each release). Mixtral-8x7B: 8 experts of 14336, top 2.
    TransformerConfig mixtral{"mixtral-8x7b", 32000, 4096, 14336, 32, 32, 8, false, c10::kBFloat16};
    mixtral.experts = 8, mixtral.top_k = 2, mixtral.moe_intermediate = 14336;
    t["mixtral-8x7b"] = mixtral;
    // Qwen3-30B-A3B: head_dim 128 (not hidden / heads), q/k norms, 128 experts of 768, top 8.
    TransformerConfig qwen3{"qwen3-30b-a3b", 151936, 2048, 6144, 48, 32, 4, false, c10::kBFloat16};
    qwen3.head_dim_override = 128, qwen3.qk_norm = true;
    qwen3.experts = 128, qwen3.top_k = 8, qwen3.moe_intermediate = 768;
    t["qwen3-30b-a3b"] = qwen3;
    // DeepSeek-V3 without its multi-token-prediction module: MLA, 3 dense blocks (18432), then
    // 256 routed experts of 2048 (top 8) plus 1 shared expert and a router score-correction bias.
    TransformerConfig dsv3{"deepseek-v3", 129280, 7168, 18432, 61, 128, 128, false, c10::kBFloat16};
    dsv3.q_lora_rank = 1536, dsv3.kv_lora_rank = 512, dsv3.qk_nope_head_dim = 128, dsv3.qk_rope_head_dim = 64,
    dsv3.v_head_dim = 128;
    dsv3.experts = 256, dsv3.top_k = 8, dsv3.shared_experts = 1, dsv3.moe_intermediate = 2048, dsv3.first_dense = 3;
    dsv3.router_bias = true;
    t["deepseek-v3"] = dsv3;
    return t;
  }();
  return table;
}

const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> table{
      {"8b", "llama3-8b"}, {"32b", "qwen2.5-32b"}, {"70b", "llama3-70b"}};
  return table;
}

std::string canonical(const std::string& name) {
  auto it = aliases().find(name);
  return it == aliases().end() ? name : it->second;
}

}  // namespace

ModelSpec transformer_spec(const TransformerConfig& c) {
  TORCH_CHECK(c.heads > 0 && c.hidden % c.heads == 0, "model ", c.name, ": hidden ", c.hidden,
              " is not divisible by heads ", c.heads);
  TORCH_CHECK(c.kv_heads > 0 && c.heads % c.kv_heads == 0, "model ", c.name, ": heads ", c.heads,
              " is not a multiple of kv_heads ", c.kv_heads);
  TORCH_CHECK(c.vocab > 0 && c.intermediate > 0 && c.layers >= 0, "model ", c.name, ": sizes must be positive");
  TORCH_CHECK(c.gated_mlp || c.intermediate % 2 == 0, "model ", c.name, ": the ungated MLP splits intermediate ",
              c.intermediate, " into two up projections; it must be even");
  ModelSpec spec;
  spec.name = c.name;
  const int64_t q = c.heads * c.head_dim(), kv = c.kv_heads * c.head_dim();
  add(spec, "embed", "embed.weight", {c.vocab, c.hidden}, ParamKind::embedding, c.dtype);
  if (c.tie_embeddings) spec.params.back().also_used_by = {"head"};
  const auto M = ParamKind::hidden_matrix, O = ParamKind::other, E = ParamKind::expert_matrix;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string unit = "layers." + std::to_string(i);
    const std::string p = unit + ".";
    add(spec, unit, p + "attn_norm.weight", {c.hidden}, O, c.dtype);
    if (c.kv_lora_rank > 0) {  // MLA
      const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
      add(spec, unit, p + "attn.q_a.weight", {c.q_lora_rank, c.hidden}, M, c.dtype);
      add(spec, unit, p + "attn.q_a_norm.weight", {c.q_lora_rank}, O, c.dtype);
      add(spec, unit, p + "attn.q_b.weight", {c.heads * qk, c.q_lora_rank}, M, c.dtype);
      add(spec, unit, p + "attn.kv_a.weight", {c.kv_lora_rank + c.qk_rope_head_dim, c.hidden}, M, c.dtype);
      add(spec, unit, p + "attn.kv_a_norm.weight", {c.kv_lora_rank}, O, c.dtype);
      add(spec, unit, p + "attn.kv_b.weight", {c.heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}, M, c.dtype);
      add(spec, unit, p + "attn.o.weight", {c.hidden, c.heads * c.v_head_dim}, M, c.dtype);
    } else {
      add(spec, unit, p + "attn.q.weight", {q, c.hidden}, M, c.dtype);
      add(spec, unit, p + "attn.k.weight", {kv, c.hidden}, M, c.dtype);
      add(spec, unit, p + "attn.v.weight", {kv, c.hidden}, M, c.dtype);
      if (c.qkv_bias) {
        add(spec, unit, p + "attn.q.bias", {q}, O, c.dtype);
        add(spec, unit, p + "attn.k.bias", {kv}, O, c.dtype);
        add(spec, unit, p + "attn.v.bias", {kv}, O, c.dtype);
      }
      if (c.qk_norm) {
        add(spec, unit, p + "attn.q_norm.weight", {c.head_dim()}, O, c.dtype);
        add(spec, unit, p + "attn.k_norm.weight", {c.head_dim()}, O, c.dtype);
      }
      add(spec, unit, p + "attn.o.weight", {c.hidden, q}, M, c.dtype);
    }
    add(spec, unit, p + "mlp_norm.weight", {c.hidden}, O, c.dtype);
    if (c.experts > 0 && i >= c.first_dense) {
      add(spec, unit, p + "moe.router.weight", {c.experts, c.hidden}, O, c.dtype);
      if (c.router_bias) add(spec, unit, p + "moe.router.bias", {c.experts}, O, c.dtype);
      add(spec, unit, p + "moe.experts.gate", {c.experts, c.moe_intermediate, c.hidden}, E, c.dtype);
      add(spec, unit, p + "moe.experts.up", {c.experts, c.moe_intermediate, c.hidden}, E, c.dtype);
      add(spec, unit, p + "moe.experts.down", {c.experts, c.hidden, c.moe_intermediate}, E, c.dtype);
      if (c.shared_experts > 0) {
        const int64_t s = c.shared_experts * c.moe_intermediate;
        add(spec, unit, p + "moe.shared.gate.weight", {s, c.hidden}, M, c.dtype);
        add(spec, unit, p + "moe.shared.up.weight", {s, c.hidden}, M, c.dtype);
        add(spec, unit, p + "moe.shared.down.weight", {c.hidden, s}, M, c.dtype);
      }
    } else if (!c.gated_mlp) {
      add(spec, unit, p + "mlp.up_a.weight", {c.intermediate / 2, c.hidden}, M, c.dtype);
      add(spec, unit, p + "mlp.up_b.weight", {c.intermediate / 2, c.hidden}, M, c.dtype);
      add(spec, unit, p + "mlp.down.weight", {c.hidden, c.intermediate}, M, c.dtype);
    } else {
      add(spec, unit, p + "mlp.gate.weight", {c.intermediate, c.hidden}, M, c.dtype);
      add(spec, unit, p + "mlp.up.weight", {c.intermediate, c.hidden}, M, c.dtype);
      add(spec, unit, p + "mlp.down.weight", {c.hidden, c.intermediate}, M, c.dtype);
    }
  }
  add(spec, "head", "norm.weight", {c.hidden}, ParamKind::other, c.dtype);
  if (!c.tie_embeddings) add(spec, "head", "head.weight", {c.vocab, c.hidden}, ParamKind::head, c.dtype);
  return spec;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : presets()) names.push_back(name);
  return names;
}

bool is_preset(const std::string& name) { return presets().count(canonical(name)) > 0; }

TransformerConfig preset_config(const std::string& name) {
  auto it = presets().find(canonical(name));
  if (it == presets().end()) {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    TORCH_CHECK(false, "unknown model preset '", name, "' (known: ", known,
                "; aliases 8b, 32b, 70b; or pass a JSON spec file)");
  }
  return it->second;
}

ModelSpec preset(const std::string& name, c10::ScalarType dtype) {
  TransformerConfig c = preset_config(name);
  c.dtype = dtype;
  return transformer_spec(c);
}

}  // namespace mfsdp
