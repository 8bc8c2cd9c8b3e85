// QK-clip (MuonClip; docs/qk_clip.md): after the optimizer step, the query and key rows of every
// attention head whose largest logit went above tau are scaled so that logit would be tau.
//
// The statistic, S[l, h]: the largest attention logit of head h of block l (after the 1/sqrt(d)
// scale, over unmasked pairs) over every micro-batch of the step and every rank of the mesh,
// replicas included. Each rank's forward records its own (TransformerModel::record_max_logits);
// after the last micro-batch, before the update, one MAX all-reduce of the float32 [L, H] maxima
// over the whole mesh, in a phase of its own (qk_clip), agrees them. Before the reduction every
// non-finite entry becomes +inf (MAX's order among NaNs is not defined, so a NaN never reaches it)
// and one extra entry carries the highest rank that had one (-1: none); the run's non-finite
// policy then decides (agree()).
//
// The rule, spelled as pytorch-optimizer 4.1.0's MuonClip.step with qk_clip_alpha 0.5, in float32:
//   S_g   = the max of S[l, h] over the query heads h of kv group g (g = h without GQA)
//   scale = (tau / S.clamp_min(tau)).pow_(0.5)    (Python's float / tensor: t.reciprocal() * tau)
//   every query head of group g and key head g: its rows of q and k times scale[g]
// So under grouped-query attention a key head shared by several query heads is scaled once, by the
// factor of the largest logit among them (Megatron's grouped rule), and every head's logit ends at
// or below tau. With qkv biases the q and k biases' rows are scaled with their weights', so q and
// k themselves scale by sqrt(gamma). A placement applies the scales where it stores the rows
// (PlacementRunner::scale_rows: on owners, in every replica), with no collective; the optimizer
// step keeps its 0 collectives. A skipped step is not clipped. Nothing is saved in checkpoints:
// the statistic is rebuilt by every step's forward.
#pragma once

#include "core/plan/optimizer_config.h"
#include "core/plan/presets.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace mfsdp {

class Communicator;
class PlacementRunner;
class TransformerModel;
enum class NonFinitePolicy;

// Throws naming --qk-clip-tau unless tau is finite and > 0 and `optimizer` has a clip rule (the
// Muon family: muon, normuon, adamuon), and unless the model is one QK-clip knows (plain
// multi-head or grouped-query attention).
void check_qk_clip(double tau, OptimizerKind optimizer, const TransformerConfig& model);

// The agreed statistic of one step.
struct QkLogits {
  at::Tensor max_logits;       // [L, H] float32, the same on every rank; +inf where not finite
  int non_finite_rank = -1;    // the highest rank that saw a non-finite logit (-1: none)
  double max() const;          // the largest entry
};

class QkClip {
 public:
  QkClip(const TransformerConfig& model, double tau, at::Device device);

  // Before the step's first micro-batch: the maxima start at -inf and `model`'s forward records
  // into them until agree().
  void begin_step(const TransformerModel& model);
  // After the last micro-batch (collective, phase qk_clip): every rank's maxima agreed. A
  // non-finite logit anywhere: under the fail policy every rank throws, naming the block, the head
  // and the rank; under skip, the result says so and the step's clip is left out (apply() is not
  // called). The model stops recording.
  QkLogits agree(Communicator& comm, const TransformerModel& model, NonFinitePolicy policy, int step);
  // The per-kv-group scales of block `layer` ([kv_heads] float32, the rule above).
  at::Tensor scales(const QkLogits& s, int64_t layer) const;
  // After an update that was taken: scales q and k (and their biases) on `runner`. Returns the
  // query heads whose rows were scaled by less than 1, over every block.
  int64_t apply(PlacementRunner& runner, const QkLogits& s) const;

  double tau() const { return tau_; }

 private:
  TransformerConfig model_;
  double tau_;
  at::Tensor sink_;
};

}  // namespace mfsdp
