// Full replicas (every rank holds the whole model): the forward/backward that the DDP oracle and
// the ZeRO-1 baseline share.
#pragma once

#include "core/train/model.h"
#include "core/train/placement.h"

#include <chrono>
#include <functional>

namespace mfsdp {

// The part DDP and ZeRO-1 share: on a full replica, clear the gradients, run forward (timed into
// r.forward_s, loss into r.loss), `before_backward`, then backward. Returns when backward started.
std::chrono::steady_clock::time_point replica_forward_backward(const TransformerModel& model, ParamMap& params,
                                                               const at::Tensor& tokens, const at::Tensor& targets,
                                                               const std::function<void()>& before_backward,
                                                               PlacementRunner::Result& r);
// CPU copies of every tensor of `params` (detached).
ParamMap cpu_copies(const ParamMap& params);

}  // namespace mfsdp
