// What each optimizer costs per step and keeps as state, for planning and the memory model.
#pragma once

#include "core/plan/optimizer_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp {

// The hyperparameters the cost model reads, taken from the optimizers' own configuration (by
// default the training defaults), so the planner costs what the step runs.
struct OptimizerCostConfig {
  int ns_steps;                             // Muon Newton–Schulz iterations (ns_steps_of)
  NsVariant ns_variant;                     // and their variant (ns_multiply_adds)
  int64_t shampoo_max_preconditioner_dim;   // Shampoo blocks larger dimensions
  int shampoo_precondition_frequency;       // root inverses recomputed every this many steps
  bool shampoo_adam_grafting;               // one extra second-moment buffer
  int64_t soap_max_precond_dim;             // SOAP leaves larger dimensions unpreconditioned
  int soap_precondition_frequency;          // eigenbasis refresh interval

  OptimizerCostConfig() : OptimizerCostConfig(training_defaults()) {}
  explicit OptimizerCostConfig(const OptimizerOptions& o)
      : ns_steps(ns_steps_of(ns_variant_info(o.muon.ns_variant), o.muon.ns_steps)),
        ns_variant(o.muon.ns_variant),
        shampoo_max_preconditioner_dim(o.shampoo.max_preconditioner_dim),
        shampoo_precondition_frequency(o.shampoo.precondition_frequency),
        shampoo_adam_grafting(o.shampoo.adam_grafting),
        soap_max_precond_dim(o.soap.max_precond_dim),
        soap_precondition_frequency(o.soap.precondition_frequency) {}
};

// Multiply-adds per optimizer step for one whole 2-D tensor of shape rows x cols (matrix
// optimizers), with periodic work (roots, eigenbases) amortised over its interval:
//   Muon     ns_multiply_adds + rows * cols                 (+ the momentum; the default variant:
//            ns_steps * s^2 * (2l + s), s the short side, l the long one)
//   Shampoo  per block m x n: 2(m^2 n + m n^2) + (m^3 + n^3) / frequency
//   SOAP     3(m^2 n + m n^2) + (m^3 + n^3) / frequency      (sides > max dim are identity)
//   NorMuon, AdaMuon  Muon's + 4 rows * cols (second moment, division, norms)
//   AdamW    rows * cols (elementwise)
double optimizer_step_cost(OptimizerKind kind, int64_t rows, int64_t cols, const OptimizerCostConfig& config);

// Elements of optimizer state kept for one tensor of `shape` (any rank for AdamW; 2-D otherwise):
//   Muon 1 (momentum); NorMuon 1 + a column (momentum, the row second moment); AdaMuon 2 (m, v);
//   AdamW 2 (m, v); Shampoo per block L, R, their inverse roots, momentum,
//   and the Adam-grafting second moment; SOAP m, v, L, R, Q_L, Q_R.
int64_t optimizer_state_elements(OptimizerKind kind, const std::vector<int64_t>& shape,
                                 const OptimizerCostConfig& config);

}  // namespace mfsdp
