#include "core/dist/mesh.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <string>

namespace mfsdp {

MeshShape mesh_shape(int world_size, int replicas) {
  TORCH_CHECK(replicas >= 1 && world_size % replicas == 0, "mesh: --replicas ", replicas,
              " must be a positive divisor of the world size ", world_size, " (W = R x S)");
  return MeshShape{replicas, world_size / replicas};
}

Mesh make_mesh(RankContext& ctx, int replicas) {
  Mesh m;
  m.shape = mesh_shape(ctx.world_size, replicas);
  const int S = m.shape.shard;
  m.replica = ctx.rank / S;
  m.shard_rank = ctx.rank % S;
  if (m.shape.replicas == 1) {
    m.shard = std::make_unique<Communicator>(ctx.backend);
    return m;
  }
  TORCH_CHECK(ctx.store, "mesh: rank ", ctx.rank, " has no store to form sub-groups over");
  const std::string tag = "mfsdp/mesh" + std::to_string(ctx.groups_formed++) + "_" + std::to_string(m.shape.replicas) + "x" +
                          std::to_string(S);
  auto shard_store = c10::make_intrusive<c10d::PrefixStore>(tag + "/shard_" + std::to_string(m.replica), ctx.store);
  auto replicate_store = c10::make_intrusive<c10d::PrefixStore>(tag + "/replicate_" + std::to_string(m.shard_rank), ctx.store);
  m.shard = std::make_unique<Communicator>(make_backend(ctx.backend_kind, shard_store, m.shard_rank, S, ctx.timeout));
  m.replicate = std::make_unique<Communicator>(
      make_backend(ctx.backend_kind, replicate_store, m.replica, m.shape.replicas, ctx.timeout));
  return m;
}

}  // namespace mfsdp
