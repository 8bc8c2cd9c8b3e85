#include "core/train/model.h"

#include "core/dist/determinism.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/argsort.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/triu.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <cmath>

namespace mfsdp {
namespace {

const at::Tensor& get(const ParamMap& p, const std::string& name) {
  auto it = p.find(name);
  TORCH_CHECK(it != p.end(), "model: parameter '", name, "' was not provided");
  return it->second;
}

at::Tensor maybe_bias(const ParamMap& p, const std::string& name) {
  auto it = p.find(name);
  return it == p.end() ? at::Tensor() : it->second;
}

}  // namespace

// Normalised in float32, cast back, then scaled by the weight in the compute dtype (as Llama's
// RMSNorm). In float32 the casts are no-ops: the same ops as x * rsqrt(mean(x^2) + eps) * w.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) {
  constexpr double kEps = 1e-6;
  const at::Tensor xf = x.to(at::kFloat);
  return (xf * (xf.pow(2).mean({-1}, /*keepdim=*/true) + kEps).rsqrt()).to(x.scalar_type()) * w;
}

at::Tensor attention_softmax(const at::Tensor& scores, c10::ScalarType dtype) {
  return at::softmax(scores.to(at::kFloat), -1).to(dtype);
}

TransformerModel::TransformerModel(TransformerConfig config, std::optional<c10::ScalarType> output_dtype)
    : config_(std::move(config)), spec_(transformer_spec(config_)), output_dtype_(output_dtype) {
  const TransformerConfig& c = config_;
  TORCH_CHECK(c.kv_lora_rank == 0 && !c.qk_norm && c.head_dim_override == 0 && !c.router_bias, "model ", c.name,
              ": multi-head latent attention, q/k norms, a head_dim override and router correction biases are "
              "planned (mfsdp plan) but not trained; the trainable model has plain multi-head attention");
  if (c.experts > 0) {
    TORCH_CHECK(c.top_k >= 1 && c.top_k <= c.experts, "model ", c.name, ": --top-k ", c.top_k, " must be in [1, ",
                c.experts, "] (the number of experts)");
    TORCH_CHECK(c.moe_intermediate > 0, "model ", c.name, ": experts need a positive expert width, got ", c.moe_intermediate);
    TORCH_CHECK(c.first_dense >= 0 && c.shared_experts >= 0, "model ", c.name,
                ": --first-dense and --shared-experts must be >= 0");
  }
}

// The router and the routed experts of one block (docs/moe.md), on h [B, S, H]:
//  - scores: float32 softmax of the router logits over the experts;
//  - choice: the top_k scores of each token by a stable descending sort, so equal scores go to
//    the lower expert; their weights renormalised to sum to 1 (in float32, cast to the compute dtype);
//  - dispatch: the T * top_k (token, slot) pairs stably sorted by expert, so each expert reads its
//    tokens as one contiguous block in token order; each expert's SwiGLU on its block;
//  - combine: the outputs put back in (token, slot) order by gathering with the inverse
//    permutation, weighted and summed over the slots in slot order.
// Only gathers move tokens; in backward their scatters write every element once, and the
// top_k copies of a token meet in the sum over slots, so nothing is accumulated by atomics.
at::Tensor TransformerModel::experts(const std::string& pre, const at::Tensor& h, const ParamMap& p) const {
  const int64_t B = h.size(0), S = h.size(1), H = h.size(2), T = B * S, E = config_.experts, K = config_.top_k;
  const at::Tensor x = h.reshape({T, H});
  const at::Tensor probs = at::softmax(at::linear(x, get(p, pre + "moe.router.weight")).to(at::kFloat), -1);
  const auto [sorted, by_score] = at::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  at::Tensor weights = sorted.narrow(-1, 0, K);
  weights = (weights / weights.sum({-1}, /*keepdim=*/true)).to(h.scalar_type());
  const at::Tensor chosen = by_score.narrow(-1, 0, K).reshape({-1});  // [T * K], (token, slot) order
  const at::Tensor order = std::get<1>(at::sort(chosen, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  const at::Tensor counts = at::bincount(chosen.to(at::kCPU), {}, E);
  const at::Tensor tokens = x.unsqueeze(1).expand({T, K, H}).reshape({T * K, H}).index_select(0, order);
  const at::Tensor& gate = get(p, pre + "moe.experts.gate");
  const at::Tensor& up = get(p, pre + "moe.experts.up");
  const at::Tensor& down = get(p, pre + "moe.experts.down");
  const int64_t* count = counts.data_ptr<int64_t>();
  std::vector<at::Tensor> outputs;
  int64_t begin = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = count[e];
    if (n == 0) continue;
    const at::Tensor t = tokens.narrow(0, begin, n);
    outputs.push_back(at::linear(at::silu(at::linear(t, gate.select(0, e))) * at::linear(t, up.select(0, e)), down.select(0, e)));
    begin += n;
  }
  const at::Tensor inverse = at::argsort(order, /*stable=*/true, 0, /*descending=*/false);
  at::Tensor out = (at::cat(outputs).index_select(0, inverse).view({T, K, H}) * weights.unsqueeze(-1)).sum({1});
  if (config_.shared_experts > 0) {
    out = out + at::linear(at::silu(at::linear(x, get(p, pre + "moe.shared.gate.weight"))) *
                               at::linear(x, get(p, pre + "moe.shared.up.weight")),
                           get(p, pre + "moe.shared.down.weight"));
  }
  return out.view({B, S, H});
}

ParamMap TransformerModel::init(uint64_t seed, at::Device device) const {
  at::Generator gen = make_shared_generator(seed);
  ParamMap params;
  for (const ParamSpec& p : spec_.params) {
    const auto opts = at::TensorOptions().dtype(p.dtype);
    at::Tensor t;
    if (p.shape.size() == 1) {
      t = p.name.find("norm") != std::string::npos ? at::ones(p.shape, opts) : at::zeros(p.shape, opts);
    } else {
      t = at::empty(p.shape, at::TensorOptions().dtype(at::kFloat)).normal_(0.0, 0.02, gen).to(p.dtype);
    }
    params.emplace(p.name, device.is_cpu() ? t : t.to(device));
  }
  return params;
}

at::Tensor TransformerModel::block(int64_t layer, const at::Tensor& input, const ParamMap& p) const {
  const std::string pre = "layers." + std::to_string(layer) + ".";
  const at::Tensor x = input.to(get(p, pre + "attn_norm.weight").scalar_type());
  const int64_t B = x.size(0), S = x.size(1), H = config_.hidden;
  const int64_t nh = config_.heads, nkv = config_.kv_heads, hd = config_.head_dim();
  at::Tensor h = rms_norm(x, get(p, pre + "attn_norm.weight"));
  at::Tensor q = at::linear(h, get(p, pre + "attn.q.weight"), maybe_bias(p, pre + "attn.q.bias"));
  at::Tensor k = at::linear(h, get(p, pre + "attn.k.weight"), maybe_bias(p, pre + "attn.k.bias"));
  at::Tensor v = at::linear(h, get(p, pre + "attn.v.weight"), maybe_bias(p, pre + "attn.v.bias"));
  q = q.view({B, S, nh, hd}).transpose(1, 2);
  k = k.view({B, S, nkv, hd}).transpose(1, 2);
  v = v.view({B, S, nkv, hd}).transpose(1, 2);
  if (nkv != nh) {
    k = k.repeat_interleave(nh / nkv, 1);
    v = v.repeat_interleave(nh / nkv, 1);
  }
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  at::Tensor future = at::triu(at::ones({S, S}, at::TensorOptions().dtype(at::kBool).device(x.device())), 1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  if (logit_sink_) {  // every row keeps its diagonal, so each head's max is over unmasked pairs
    at::Tensor row = logit_sink_->select(0, layer);
    row.copy_(at::maximum(row, scores.detach().amax({0, 2, 3}).to(at::kFloat)));
  }
  at::Tensor probs = attention_softmax(scores, v.scalar_type());
  at::Tensor attn = at::matmul(probs, v).transpose(1, 2).reshape({B, S, H});
  at::Tensor y = x + at::linear(attn, get(p, pre + "attn.o.weight"));
  h = rms_norm(y, get(p, pre + "mlp_norm.weight"));
  if (config_.experts > 0 && layer >= config_.first_dense) return y + experts(pre, h, p);
  if (!config_.gated_mlp) {  // two up projections, concatenated, GELU, one down projection
    at::Tensor up = at::cat({at::linear(h, get(p, pre + "mlp.up_a.weight")), at::linear(h, get(p, pre + "mlp.up_b.weight"))}, -1);
    return y + at::linear(at::gelu(up), get(p, pre + "mlp.down.weight"));
  }
  at::Tensor mlp = at::linear(at::silu(at::linear(h, get(p, pre + "mlp.gate.weight"))) * at::linear(h, get(p, pre + "mlp.up.weight")),
                              get(p, pre + "mlp.down.weight"));
  return y + mlp;
}

at::Tensor TransformerModel::unit_forward(int u, const at::Tensor& input, const ParamMap& p,
                                          const at::Tensor& targets) const {
  TORCH_CHECK(u >= 0 && u < num_units(), "model: unit ", u, " outside [0, ", num_units(), ")");
  auto out = [&](const at::Tensor& y) { return output_dtype_ ? y.to(*output_dtype_) : y; };
  if (u == 0) return out(at::embedding(get(p, "embed.weight"), input));
  if (u <= config_.layers) return out(block(u - 1, input, p));
  const at::Tensor& norm = get(p, "norm.weight");
  at::Tensor logits =
      at::linear(rms_norm(input.to(norm.scalar_type()), norm), get(p, config_.tie_embeddings ? "embed.weight" : "head.weight"));
  return at::cross_entropy_loss(logits.reshape({-1, config_.vocab}).to(at::kFloat), targets.reshape({-1}));
}

at::Tensor TransformerModel::loss(const at::Tensor& tokens, const at::Tensor& targets, const ParamMap& params) const {
  at::Tensor x = tokens;
  for (int u = 0; u < num_units(); ++u) x = unit_forward(u, x, params, targets);
  return x;
}

}  // namespace mfsdp
