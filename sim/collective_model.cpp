#include "sim/collective_model.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <set>

namespace mfsdp {

GroupShape group_shape(const std::vector<int>& group, const HardwareProfile& p) {
  TORCH_CHECK(!group.empty(), "collective model: an empty group");
  std::set<int> nodes;
  for (int r : group) nodes.insert(p.node_of(r));
  const int node = p.node_of(group[0]);
  const int local = static_cast<int>(std::count_if(group.begin(), group.end(), [&](int r) { return p.node_of(r) == node; }));
  return GroupShape{static_cast<int>(group.size()), static_cast<int>(nodes.size()), local};
}

double collective_seconds(const CollectiveCall& c, const HardwareProfile& p) {
  TORCH_CHECK(!c.group.empty(), "collective model: a ", to_string(c.kind), " over an empty group");
  return collective_seconds(c.kind, c.bytes, group_shape(c.group, p), p);
}

double collective_bandwidth_factor(CollectiveKind kind, int n) {
  switch (kind) {
    case CollectiveKind::allgather:
    case CollectiveKind::reduce_scatter: return (n - 1.0) / n;
    case CollectiveKind::allreduce: return 2.0 * (n - 1) / n;
    default: return 1.0;
  }
}

double collective_seconds(CollectiveKind kind, int64_t bytes, const GroupShape& g, const HardwareProfile& p) {
  const int n = g.ranks, k = g.nodes;
  TORCH_CHECK(n >= 1, "collective model: a ", to_string(kind), " over an empty group");
  TORCH_CHECK(bytes >= 0, "collective model: a ", to_string(kind), " of ", bytes, " bytes");
  if (n == 1) return 0;
  const double S = static_cast<double>(bytes);
  const CollectiveFit& fit = p.fits[static_cast<int>(kind)];
  if (k == 1 && fit.measured) {
    if (const auto it = fit.at_ranks.find(n); it != fit.at_ranks.end())
      return it->second.latency_s + S * collective_bandwidth_factor(kind, n) / it->second.busbw_Bps;
  }
  const double base = fit.measured ? fit.base_latency_s : p.base_latency_s;
  const LinkClass intra = fit.measured ? LinkClass{fit.hop_latency_s, fit.busbw_Bps} : p.intra;
  const double busbw = k > 1 ? std::min(intra.busbw_Bps, p.inter.busbw_Bps) : intra.busbw_Bps;
  auto ring_latency = [&](int rounds) {
    const int steps = rounds * (n - 1), inter = rounds * (k - 1);
    return base + (steps - inter) * intra.hop_latency_s + inter * p.inter.hop_latency_s;
  };
  switch (kind) {
    case CollectiveKind::allgather:
    case CollectiveKind::reduce_scatter: return ring_latency(1) + S * (n - 1) / n / busbw;
    case CollectiveKind::allreduce: return ring_latency(2) + 2 * S * (n - 1) / n / busbw;
    case CollectiveKind::broadcast:
    case CollectiveKind::broadcast_group:
    case CollectiveKind::reduce: return ring_latency(1) + S / busbw;
    case CollectiveKind::alltoall: {
      // The group's ranks on the first rank's node (groups are node-major and even in practice).
      const int local = g.local;
      const double to_peers = S * (local - 1) / (n - 1), to_other_nodes = S * (n - local) / (n - 1);
      const double t = std::max(to_peers / intra.busbw_Bps, k > 1 ? to_other_nodes * local / p.inter.busbw_Bps : 0.0);
      return base + (k > 1 ? p.inter.hop_latency_s : intra.hop_latency_s) + t;
    }
  }
  TORCH_INTERNAL_ASSERT(false, "unknown CollectiveKind");
}

}  // namespace mfsdp
