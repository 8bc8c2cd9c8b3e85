// Exact-valued checks of the c10d collectives the runtime relies on.
//
// Inputs are small integers chosen so every result (sums included, in bfloat16 too) is exactly
// representable; each result is compared with its closed-form expectation bit for bit. Used by
// the unit tests for every W and dtype, and by `mfsdp selfcheck` on a live group.
#pragma once

#include "core/dist/ranks.h"

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

namespace mfsdp {

enum class CollectiveCheck {
  broadcast,        // from every root in turn
  reduce,           // SUM to every root in turn
  allreduce,        // SUM
  allgather,        // _allgather_base into one flat output, and the list form
  alltoall_uneven,  // alltoall_base with uneven splits, zero splits included
  send_recv_ring,   // rank r sends to r+1 and receives from r-1 (skipped at W = 1)
  barrier,          // no rank leaves before every rank has entered
};

const std::vector<CollectiveCheck>& all_collective_checks();
const char* to_string(CollectiveCheck check);

struct CheckResult {
  std::string name;  // "<check>/<dtype>"
  bool ok = false;
  bool skipped = false;
  std::string detail;  // what differed, or why skipped
};

// Runs one check on this rank. Every rank must call it with the same arguments in the same order
// (it issues collectives). A value mismatch is returned, not thrown, so peers never hang.
CheckResult run_collective_check(RankContext& ctx, CollectiveCheck check, at::ScalarType dtype);

// Every check for every dtype in `dtypes`, in a fixed order.
std::vector<CheckResult> run_collective_checks(RankContext& ctx,
                                               const std::vector<at::ScalarType>& dtypes);

}  // namespace mfsdp
