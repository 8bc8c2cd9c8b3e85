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

namespace {

// The sub-groups of a mesh meeting over prefixes of the world's store, each a backend of its own.
void form_over_store(RankContext& ctx, Mesh& m) {
  const int S = m.shape.shard;
  TORCH_CHECK(ctx.store, "mesh: rank ", ctx.rank, " has no store to form sub-groups over");
  const std::string tag = "mfsdp/mesh" + std::to_string(ctx.groups_formed++) + "_" + std::to_string(m.shape.replicas) + "x" +
                          std::to_string(S);
  auto shard_store = c10::make_intrusive<c10d::PrefixStore>(tag + "/shard_" + std::to_string(m.replica), ctx.store);
  auto replicate_store = c10::make_intrusive<c10d::PrefixStore>(tag + "/replicate_" + std::to_string(m.shard_rank), ctx.store);
  m.shard = std::make_unique<Communicator>(make_backend(ctx.backend_kind, shard_store, m.shard_rank, S, ctx.timeout));
  m.replicate = std::make_unique<Communicator>(
      make_backend(ctx.backend_kind, replicate_store, m.replica, m.shape.replicas, ctx.timeout));
}

}  // namespace

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
  if (ctx.make_group) {
    m.shard = std::make_unique<Communicator>(ctx.make_group("shard", m.shard_rank, S));
    m.replicate = std::make_unique<Communicator>(ctx.make_group("replicate", m.replica, m.shape.replicas));
  } else {
    form_over_store(ctx, m);
  }
  if (ctx.on_group) {
    ctx.on_group("shard", c10::intrusive_ptr<RecordingBackend>::reclaim_copy(&m.shard->backend()));
    ctx.on_group("replicate", c10::intrusive_ptr<RecordingBackend>::reclaim_copy(&m.replicate->backend()));
  }
  return m;
}

}  // namespace mfsdp
