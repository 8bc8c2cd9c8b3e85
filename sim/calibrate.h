// `mfsdp calibrate` (docs/simulate.md): this machine's collectives, matmul rates and per-operator
// costs, measured and assembled into a hardware profile for `mfsdp simulate`.
//   collectives    Gloo between thread ranks (as bench_step's ranks do): each kind timed at every
//                  world size and size given, the median of `reps` rounds after a warm-up (each
//                  round times every size once, 4 calls in a row, each after a burst of compute on
//                  every rank, less the bursts timed alone), and fitted to the α-β model by
//                  sim/collective_fit.h, across world sizes and at each (`at_ranks`)
//   matmul         n x n x n products for n = 16 ... 512 on one intra-op thread, fp32 and bf16
//   per operator   the tiny model's forward and backward, and AdamW steps of its parameters, on
//                  one thread, operators counted by the simulator's observer (sim/trace.h)
//   compute slots  the tiny pass on every core at once against one alone
#pragma once

#include "sim/hardware.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mfsdp {

struct CalibrateOptions {
  std::string name = "cpu-local";  // the profile's name
  std::vector<int> world_sizes{2, 4, 8};
  std::vector<int64_t> sizes{4 << 10, 64 << 10, 512 << 10, 4 << 20};  // collective sizes, bytes
  int reps = 15;                                                        // rounds per point (median)
  bool verbose = false;  // say every measured point beside the fit
};

// Measures this machine and returns its profile (sources included), saying each progress line
// (without its newline) through `say`. Takes minutes; throws when the options leave nothing to fit
// or a collective's times do not grow with size.
HardwareProfile calibrate_this_machine(const CalibrateOptions& options, const std::function<void(const std::string&)>& say);

}  // namespace mfsdp
