// The α-β time of one collective on a hardware profile (sim/hardware.h), shaped like NCCL's
// tuning model for its Ring/Simple algorithm. With n ranks in the group spread over k nodes:
//   latency    base + (ring steps - inter steps) * intra hop + inter steps * inter hop
//   bandwidth  the intra-node bus bandwidth, or the inter-node one when the group spans nodes
//   all-gather, reduce-scatter  n - 1 steps (k - 1 inter-node);   S (n - 1) / n / busbw
//   all-reduce                  2 (n - 1) steps (2 (k - 1));      2 S (n - 1) / n / busbw
//   broadcast, reduce           n - 1 steps (k - 1), pipelined;   S / busbw
//   a group of broadcasts       as one broadcast of their bytes together: their rings run at once
//                               (NCCL: one group, one launch), so the latency is paid once and
//                               the parts share the links (S: the parts' bytes summed)
//   all-to-all                  one step (inter-node when k > 1); each rank's bytes to its node's
//                               peers over the intra link, and its node's bytes to other nodes
//                               over the node's share of the inter link, whichever is slower
// A group of other collectives (simulate.h) is priced from its parts: the largest part's latency
// once, plus every part's bandwidth term. S is the collective's size (see CollectiveCall). A group of one rank costs nothing. A kind the
// profile has a measured fit for (mfsdp calibrate) uses the fit's base, hop and bandwidth inside a node,
// or, for a group inside one node of a size the fit measured on its own, latency + S·g(n) / busbw.
#pragma once

#include "sim/hardware.h"

#include <cstdint>
#include <vector>

namespace mfsdp {

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::broadcast;
  std::vector<int> group;  // global ranks of the group, in group order
  // broadcast, reduce, all-reduce: the tensor; all-gather: the gathered output; reduce-scatter:
  // the input of one rank; all-to-all: the most bytes one rank sends to the others.
  int64_t bytes = 0;
};

double collective_seconds(const CollectiveCall& call, const HardwareProfile& profile);

// What the model reads of a group: its ranks, the nodes they span, and how many of them share the
// first rank's node. Computed once per group, it prices any number of calls over it.
struct GroupShape {
  int ranks = 1, nodes = 1, local = 1;
};
GroupShape group_shape(const std::vector<int>& group, const HardwareProfile& profile);
double collective_seconds(CollectiveKind kind, int64_t bytes, const GroupShape& group, const HardwareProfile& profile);

// g(n): the bytes of size S a collective moves per rank over the bus, as a multiple of S
// ((n-1)/n for all-gather and reduce-scatter, 2(n-1)/n for all-reduce, 1 for the others).
double collective_bandwidth_factor(CollectiveKind kind, int n);

}  // namespace mfsdp
