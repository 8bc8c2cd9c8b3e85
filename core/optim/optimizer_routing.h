// Which optimizer steps which tensor, with which hyperparameters: the matrix optimizer for hidden
// matrices, AdamW for everything else, parameter groups applied. The owner runtime, the baselines
// and the oracle all build their optimizers here, so they route identically.
#pragma once

#include "core/optim/optim.h"
#include "core/plan/optimizer_config.h"

#include <memory>
#include <string>
#include <vector>

namespace mfsdp {

// Parses "PATTERN:lr=X:wd=Y" (lr and wd optional, in any order); throws naming the bad part.
ParamGroup param_group_from_string(const std::string& spec);

// The options parameter `name` steps with: `options` with its first matching group applied to
// every optimizer's lr and weight decay.
OptimizerOptions options_for(const OptimizerOptions& options, const std::string& name);
// Throws naming the first group that matches none of `names`.
void check_groups(const OptimizerOptions& options, const std::vector<std::string>& names);

// The optimizer of parameter `name` (one whole tensor): the matrix optimizer for a hidden matrix,
// AdamW for everything else (1-D tails, embeddings, the head, even slices); groups applied.
// With `hidden_matrix` and a 3-D `shape` [n, out, in] (the experts this tensor stores), the matrix
// optimizer of each [out, in] slice (make_per_slice).
std::unique_ptr<TensorOptimizer> make_optimizer(const OptimizerOptions& options, const std::string& name,
                                                bool hidden_matrix, const std::vector<int64_t>& shape);

}  // namespace mfsdp
