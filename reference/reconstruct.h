// The FSDP2 reconstruction baseline (stock FSDP2 + Muon): every parameter in even row shards; in
// the optimizer step each hidden matrix's Muon update input is all-gathered into the full matrix
// (a weight-sized all-gather on the critical path), Newton–Schulz runs redundantly on every rank,
// and each rank keeps its rows of the update. Momentum stays row-sharded.
#pragma once

#include "core/runtime/even_matrix_step.h"

namespace mfsdp {

std::unique_ptr<EvenMatrixStep> make_reconstruct_step();

}  // namespace mfsdp
