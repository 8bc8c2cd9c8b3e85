#include "core/plan/presets.h"

#include <c10/util/Exception.h>

#include <map>

namespace mfsdp {
namespace {

void add(ModelSpec& spec, const std::string& unit, const std::string& name, std::vector<int64_t> shape,
         ParamKind kind, c10::ScalarType dtype) {
  spec.params.push_back({name, std::move(shape), dtype, unit, kind});
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
    t["llama3-8b"] = {"llama3-8b", 128256, 4096, 14336, 32, 32, 8, false, c10::kBFloat16};
    t["qwen2.5-32b"] = {"qwen2.5-32b", 152064, 5120, 27648, 64, 40, 8, true, c10::kBFloat16};
    t["llama3-70b"] = {"llama3-70b", 128256, 8192, 28672, 80, 64, 8, false, c10::kBFloat16};
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
  ModelSpec spec;
  spec.name = c.name;
  const int64_t kv = c.kv_heads * c.head_dim();
  add(spec, "embed", "embed.weight", {c.vocab, c.hidden}, ParamKind::embedding, c.dtype);
  if (c.tie_embeddings) spec.params.back().also_used_by = {"head"};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string unit = "layers." + std::to_string(i);
    const std::string p = unit + ".";
    add(spec, unit, p + "attn_norm.weight", {c.hidden}, ParamKind::other, c.dtype);
    add(spec, unit, p + "attn.q.weight", {c.hidden, c.hidden}, ParamKind::hidden_matrix, c.dtype);
    add(spec, unit, p + "attn.k.weight", {kv, c.hidden}, ParamKind::hidden_matrix, c.dtype);
    add(spec, unit, p + "attn.v.weight", {kv, c.hidden}, ParamKind::hidden_matrix, c.dtype);
    if (c.qkv_bias) {
      add(spec, unit, p + "attn.q.bias", {c.hidden}, ParamKind::other, c.dtype);
      add(spec, unit, p + "attn.k.bias", {kv}, ParamKind::other, c.dtype);
      add(spec, unit, p + "attn.v.bias", {kv}, ParamKind::other, c.dtype);
    }
    add(spec, unit, p + "attn.o.weight", {c.hidden, c.hidden}, ParamKind::hidden_matrix, c.dtype);
    add(spec, unit, p + "mlp_norm.weight", {c.hidden}, ParamKind::other, c.dtype);
    add(spec, unit, p + "mlp.gate.weight", {c.intermediate, c.hidden}, ParamKind::hidden_matrix, c.dtype);
    add(spec, unit, p + "mlp.up.weight", {c.intermediate, c.hidden}, ParamKind::hidden_matrix, c.dtype);
    add(spec, unit, p + "mlp.down.weight", {c.hidden, c.intermediate}, ParamKind::hidden_matrix, c.dtype);
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
