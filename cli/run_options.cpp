#include "cli/model_options.h"

#include <c10/util/Exception.h>

namespace mfsdp::cli {

void add_moe_options(CLI::App* cmd, MoeArgs& a, bool optimizer_flags) {
  CLI::Option* experts = cmd->add_option("--experts", a.experts, "Mixture of experts: routed experts per block, stored 3-D [E, out, in] (0: dense)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  cmd->add_option("--top-k", a.top_k, "Experts each token is routed to (with --experts)")->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->needs(experts);
  cmd->add_option("--shared-experts", a.shared_experts, "Always-on experts of the expert width, one dense SwiGLU (with --experts)")
      ->check(CLI::Range(int64_t{0}, int64_t{64}))
      ->needs(experts);
  cmd->add_option("--moe-intermediate", a.moe_intermediate, "Width of each expert (default: the dense intermediate size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->needs(experts);
  cmd->add_option("--first-dense", a.first_dense, "Blocks before the first MoE block keep a dense MLP (DeepSeek's first_k_dense)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->needs(experts);
  cmd->add_option("--expert-ranges", a.expert_ranges,
                  "Planner: contiguous expert ranges per expert tensor, each owned whole by one rank (0: min(experts, W))")
      ->check(CLI::Range(0, 4096));
  if (optimizer_flags)
    cmd->add_flag("--batched-ns", a.batched_ns,
                  "Muon: one batched Newton-Schulz chain per expert tensor (measured against the per-expert mode, not bitwise it)")
        ->needs(experts);
}

void apply_moe(const MoeArgs& a, TransformerConfig& model, PlannerOptions& planner, OptimizerOptions* optimizer) {
  planner.expert_ranges = a.expert_ranges;
  if (optimizer) optimizer->muon.batched_ns = a.batched_ns;
  if (!a.any()) return;
  TORCH_CHECK(a.top_k <= a.experts, "--top-k ", a.top_k, " must be in [1, ", a.experts, "] (the number of experts)");
  model.experts = a.experts;
  model.top_k = a.top_k;
  model.shared_experts = a.shared_experts;
  model.moe_intermediate = a.moe_intermediate > 0 ? a.moe_intermediate : model.intermediate;
  model.first_dense = a.first_dense;
}

}  // namespace mfsdp::cli
