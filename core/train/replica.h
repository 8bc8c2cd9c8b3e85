// Full replicas (every rank holds the whole model): the forward/backward that the DDP oracle and
// the ZeRO-1 baseline share.
#pragma once

#include "core/train/model.h"
#include "core/train/placement.h"
#include "core/plan/precision.h"

#include <chrono>
#include <functional>

namespace mfsdp {

// The part DDP and ZeRO-1 share: on a full replica of masters, make the policy's compute copies
// (the masters themselves when they are in the param dtype), run forward on them (timed into
// r.forward_s, loss into r.loss), `before_backward`, then backward. `grads` receives every
// parameter's gradient in the compute dtype, contiguous (zeros where it took no part); the
// caller casts it to the reduce dtype for the wire. Returns when backward started.
std::chrono::steady_clock::time_point replica_forward_backward(const TransformerModel& model, ParamMap& params,
                                                               const PrecisionPolicy& precision,
                                                               const at::Tensor& tokens, const at::Tensor& targets,
                                                               const std::function<void()>& before_backward,
                                                               ParamMap& grads, PlacementRunner::Gradients& r);
// Gradient accumulation on a full replica (the DDP oracle, ZeRO-1), in the orders of
// core/runtime/reduction.h, for a runner whose reduction hands every parameter's W contributions
// (mesh order) to one place:
//   ReplicaAccumulation acc(mode);
//   if (!acc.keep(grads, params, mb)) return;      // deferred, not the last micro-batch: no reduction
//   ... reduce grads[name] (cast to the reduce dtype) to the contributions `parts` ...
//   at::Tensor mean = acc.reduced(name, parts, replicas, master_dtype, mb);  // undefined until the last
class ReplicaAccumulation {
 public:
  explicit ReplicaAccumulation(GradReduce mode) : mode_(mode) {}
  // After micro-batch `mb`'s backward, `grads` in the compute dtype. Deferred: adds them to this
  // rank's sums (each upcast to the accumulation dtype of its master in `params`) and returns
  // false before the last micro-batch; at the last, `grads` becomes the sums. Returns whether the
  // caller reduces now.
  bool keep(ParamMap& grads, const ParamMap& params, const MicroBatch& mb);
  // The contributions of every rank to one parameter (mesh order, `replicas` replica groups) ->
  // the step's mean gradient in `dtype` at the last micro-batch, undefined before it (per
  // micro-batch: their sum added to the parameter's running sum).
  at::Tensor reduced(const std::string& name, const std::vector<at::Tensor>& parts, int replicas, c10::ScalarType dtype,
                     const MicroBatch& mb);

 private:
  GradReduce mode_;
  ParamMap local_sums_;    // deferred: this rank's own gradients, summed
  ParamMap reduced_sums_;  // per micro-batch: the micro-batches' reduced sums, summed
};

// CPU copies of every tensor of `params` (detached).
ParamMap cpu_copies(const ParamMap& params);

}  // namespace mfsdp
