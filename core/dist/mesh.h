// The HSDP mesh: W = R x S ranks as R replica groups of S ranks each (docs/hsdp.md).
//
//   global rank g = replica * S + shard_rank
//   shard group of replica r:        ranks r*S .. r*S + S - 1   (the plan is made for S ranks)
//   replicate group of shard rank s: ranks s, S + s, ..., (R-1)*S + s   (in replica order)
//
// make_mesh is collective over the world: every rank joins its two sub-groups, each a backend of
// its own (make_backend, so recorded) meeting over a prefix of the world's store. R = 1 gives the
// world as the shard group and no replicate group.
#pragma once

#include "core/dist/communicator.h"
#include "core/dist/ranks.h"

#include <memory>

namespace mfsdp {

struct MeshShape {
  int replicas = 1;  // R
  int shard = 1;     // S
  int world_size() const { return replicas * shard; }
};

// Throws, naming both numbers, unless `replicas` >= 1 divides `world_size`.
MeshShape mesh_shape(int world_size, int replicas);

struct Mesh {
  MeshShape shape;
  int replica = 0;     // r
  int shard_rank = 0;  // s
  std::unique_ptr<Communicator> shard;      // S ranks of this replica (the world when R = 1)
  std::unique_ptr<Communicator> replicate;  // R ranks holding the same shard (null when R = 1)
};

Mesh make_mesh(RankContext& ctx, int replicas);

}  // namespace mfsdp
