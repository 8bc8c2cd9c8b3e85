// The fit of measured collective times to the α-β model of collective_model.h, as `mfsdp
// calibrate` makes it (sim/calibrate.h measures the times). Least squares of the relative error
// (the times span orders of magnitude), in two forms:
//   across world sizes    t = base + ring steps x hop + S g(n) / busbw, what a world size that was
//                         not measured uses; ring steps are n - 1 (2 (n - 1) for all-reduce), and
//                         all-to-all has none: its one step folds into base and its hop is 0
//   at each world size    t = latency + S g(n) / busbw (`at_ranks`)
// with g(n) the model's bandwidth factor (collective_bandwidth_factor). A fit with a negative
// coefficient other than the per-byte one is refitted without that column (its coefficient 0).
#pragma once

#include "sim/collective_model.h"
#include "sim/hardware.h"

#include <vector>

namespace mfsdp {

// One measured point: a collective over `ranks` ranks of size `bytes` (CollectiveCall's meaning)
// took `seconds`.
struct CollectiveSample {
  int ranks = 0;
  double bytes = 0, seconds = 0;
};

// The fits of `kind` to `samples` (positive times). Throws when the times do not grow with size:
// no fit across world sizes with a positive per-byte cost (or none the samples determine). A
// world size without such a fit of its own is left out of `at_ranks`: the fit across world sizes
// prices it.
CollectiveFit fit_collective(CollectiveKind kind, const std::vector<CollectiveSample>& samples);

// The model's time for a sample's collective over ranks 0 .. ranks - 1 of `profile`: what calibrate
// prints beside each measured point and measures its misfit by.
double modelled_seconds(CollectiveKind kind, const CollectiveSample& sample, const HardwareProfile& profile);

}  // namespace mfsdp
