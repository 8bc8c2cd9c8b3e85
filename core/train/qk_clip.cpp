#include "core/train/qk_clip.h"

#include "core/dist/communicator.h"
#include "core/runtime/owner_runtime.h"
#include "core/train/model.h"
#include "core/train/placement.h"

#include <ATen/ops/amax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/where.h>
#include <ATen/TensorOperators.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

namespace mfsdp {

void check_qk_clip(double tau, OptimizerKind optimizer, const TransformerConfig& model) {
  TORCH_CHECK(std::isfinite(tau) && tau > 0, "--qk-clip-tau must be a finite number > 0, got ", tau);
  // The clip computes sqrt(tau / max(S, tau)) in float32: a tau that float32 rounds to 0 (or to a
  // subnormal, whose reciprocal overflows) or to infinity would zero or NaN every q/k weight.
  TORCH_CHECK(tau >= std::numeric_limits<float>::min() && tau <= std::numeric_limits<float>::max(),
              "--qk-clip-tau is applied in float32, so it must lie in [", std::numeric_limits<float>::min(), ", ",
              std::numeric_limits<float>::max(), "] (a normal float32 number), got ", tau);
  TORCH_CHECK(uses_newton_schulz(optimizer), "--qk-clip-tau: optimizer ", to_string(optimizer),
              " has no QK-clip rule (MuonClip's is for the Muon family: muon, normuon, adamuon)");
  TORCH_CHECK(model.kv_lora_rank == 0 && !model.qk_norm, "--qk-clip-tau: model ", model.name,
              " has multi-head latent attention or q/k norms; QK-clip here knows plain and grouped-query attention");
  TORCH_CHECK(model.kv_heads >= 1 && model.heads % model.kv_heads == 0, "--qk-clip-tau: ", model.heads,
              " query heads do not form groups of ", model.kv_heads, " kv heads");
}

double QkLogits::max() const { return max_logits.max().item<double>(); }

QkClip::QkClip(const TransformerConfig& model, double tau, at::Device device)
    : model_(model), tau_(tau),
      sink_(at::full({model.layers, model.heads}, -std::numeric_limits<float>::infinity(),
                     at::TensorOptions().dtype(at::kFloat).device(device))) {}

void QkClip::begin_step(const TransformerModel& model) {
  sink_.fill_(-std::numeric_limits<float>::infinity());
  model.record_max_logits(&sink_);
}

QkLogits QkClip::agree(Communicator& comm, const TransformerModel& model, NonFinitePolicy policy, int step) {
  model.record_max_logits(nullptr);
  const at::Tensor finite = at::isfinite(sink_);
  const bool mine_finite = finite.all().item<bool>();
  // +inf for every non-finite entry, then this rank's own flag: its rank, or -1.
  at::Tensor buffer = at::cat({at::where(finite, sink_, std::numeric_limits<double>::infinity()).reshape({-1}),
                               at::full({1}, mine_finite ? -1.0 : static_cast<double>(comm.rank()), sink_.options())});
  {
    PhaseScope phase(comm, Phase::qk_clip);
    comm.allreduce_max(buffer)->wait();
  }
  const at::Tensor cpu = buffer.cpu();
  QkLogits s;
  s.max_logits = buffer.narrow(0, 0, sink_.numel()).view(sink_.sizes());
  s.non_finite_rank = static_cast<int>(cpu.const_data_ptr<float>()[sink_.numel()]);
  if (s.non_finite_rank >= 0) {
    const float* v = cpu.const_data_ptr<float>();
    int64_t first = 0;
    while (first < sink_.numel() && std::isfinite(v[first])) ++first;
    TORCH_CHECK(policy == NonFinitePolicy::skip, "train: step ", step, ": QK-clip: the largest attention logit of block ",
                first / model_.heads, " head ", first % model_.heads, " is not finite (rank ", s.non_finite_rank,
                " saw it; the step was not taken; the skip policy leaves such a step's clip out)");
  }
  return s;
}

at::Tensor QkClip::scales(const QkLogits& s, int64_t layer) const {
  const int64_t group = model_.heads / model_.kv_heads;
  const at::Tensor grouped = s.max_logits.select(0, layer).view({model_.kv_heads, group}).amax({1});
  return (at::reciprocal(grouped.clamp_min(tau_)) * tau_).pow_(0.5);
}

int64_t QkClip::apply(PlacementRunner& runner, const QkLogits& s) const {
  const int64_t group = model_.heads / model_.kv_heads, d = model_.head_dim();
  int64_t clipped = 0;
  for (int64_t l = 0; l < model_.layers; ++l) {
    const at::Tensor scale = scales(s, l);
    clipped += (scale < 1).sum().item<int64_t>() * group;
    const std::string pre = "layers." + std::to_string(l) + ".attn.";
    // One factor per row: the query rows of group g are its `group` heads' d rows each.
    const at::Tensor q_rows = scale.repeat_interleave(group * d), k_rows = scale.repeat_interleave(d);
    runner.scale_rows(pre + "q.weight", q_rows);
    runner.scale_rows(pre + "k.weight", k_rows);
    if (model_.qkv_bias) {
      runner.scale_rows(pre + "q.bias", q_rows);
      runner.scale_rows(pre + "k.bias", k_rows);
    }
  }
  return clipped;
}

}  // namespace mfsdp
