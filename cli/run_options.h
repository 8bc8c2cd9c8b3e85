// Model options train, verify and plan share: mixture of experts on the trainable model.
#pragma once

#include "core/plan/planner.h"
#include "core/plan/presets.h"

#include <CLI/CLI.hpp>

#include <cstdint>

namespace mfsdp::cli {

struct MoeArgs {
  int64_t experts = 0;           // 0: dense blocks
  int64_t top_k = 2;
  int64_t shared_experts = 0;
  int64_t moe_intermediate = 0;  // 0: the dense intermediate size
  int64_t first_dense = 0;
  int expert_ranges = 0;         // planner: ranges per expert tensor (0: min(experts, W))
  bool batched_ns = false;       // Muon: one batched Newton–Schulz chain per expert tensor
  bool any() const { return experts > 0; }
};

// --experts, --top-k, --shared-experts, --moe-intermediate, --first-dense, --expert-ranges and,
// with `optimizer_flags` (train, verify), --batched-ns.
void add_moe_options(CLI::App* cmd, MoeArgs& a, bool optimizer_flags = true);
// Sets the model's MoE fields (only with --experts), the planner's expert ranges and, given
// `optimizer`, Muon's batched mode.
void apply_moe(const MoeArgs& a, TransformerConfig& model, PlannerOptions& planner, OptimizerOptions* optimizer = nullptr);

}  // namespace mfsdp::cli
