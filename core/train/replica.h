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
// parameter's gradient cast to the reduce dtype, contiguous (zeros where it took no part).
// Returns when backward started.
std::chrono::steady_clock::time_point replica_forward_backward(const TransformerModel& model, ParamMap& params,
                                                               const PrecisionPolicy& precision,
                                                               const at::Tensor& tokens, const at::Tensor& targets,
                                                               const std::function<void()>& before_backward,
                                                               ParamMap& grads, PlacementRunner::Gradients& r);
// CPU copies of every tensor of `params` (detached).
ParamMap cpu_copies(const ParamMap& params);

}  // namespace mfsdp
