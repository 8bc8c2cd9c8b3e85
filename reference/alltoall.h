// The all-to-all baseline (DistMuon / Dion style): every parameter in even row shards; hidden
// matrices are assigned round-robin. Round k handles matrices kW .. kW+W-1 of the step; matrix
// kW+j goes to rank j. One uneven all-to-all gives each rank its assigned matrix whole (every rank
// sends its rows), the rank runs Newton–Schulz on it once, and a second all-to-all returns to every
// rank its rows of each update (in Newton–Schulz's output dtype, bf16).
#pragma once

#include "core/runtime/even_matrix_step.h"

namespace mfsdp {

std::unique_ptr<EvenMatrixStep> make_alltoall_step();

}  // namespace mfsdp
