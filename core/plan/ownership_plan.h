// Placement metadata: MatrixShard per parameter, a segment table per unit, and the frozen
// OwnershipPlan that holds them (docs/architecture.md, vocabulary).
//
// A unit's flat buffer is laid out rank-major: rank 0's segment, then rank 1's, ... Each segment
// holds first this rank's slice of every even-sharded parameter of the unit (in parameter order),
// then every parameter of the unit this rank owns whole (in parameter order). Every slice starts at
// an offset aligned to kAlignBytes. A segment may be empty.
//
// Even-shard padding rule: a parameter with R rows (dim 0; the length of a 1-D tensor) is cut like
// torch.chunk into W chunks of C = ceil(R / W) rows; rank r holds rows [r*C, min(R, (r+1)*C)),
// possibly none, and stores C rows regardless (the rest is zero padding, never read), so every
// rank's even part has the same size.
#pragma once

#include "core/plan/model_spec.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace mfsdp {

constexpr int64_t kAlignBytes = 64;

enum class Role {
  owned_matrix,  // whole on its owner, empty elsewhere; matrix optimizer
  even_shard,    // even row shards on every rank (embedding, head; tail under TailPolicy::even); AdamW
  owned_tail,    // whole on its unit's tail owner (TailPolicy::owner); AdamW
  expert_range,  // a 3-D expert tensor cut along dim 0 (the experts) into contiguous ranges, each
                 // whole on one rank (no padding, one range per rank at most); the matrix
                 // optimizer steps each expert of a range on its rank
};
const char* to_string(Role role);
Role role_from_string(const std::string& name);  // throws naming the known roles

enum class TailPolicy {
  even,   // the tail keeps ordinary ZeRO-3 even shards (padding rule above)
  owner,  // each unit's whole tail lives on one tail owner
};
const char* to_string(TailPolicy policy);
TailPolicy tail_policy_from_string(const std::string& name);

// Where one rank stores part (or all) of a parameter. Each segment holds first its even slices
// (the even prefix, the same size on every rank), then its whole parameters and expert ranges.
struct ShardSlice {
  int rank = 0;
  int64_t offset = 0;       // element offset in the unit's flat buffer
  int64_t row_begin = 0;    // first row of the parameter held here
  int64_t rows = 0;         // real rows held (0 for an empty even chunk)
  int64_t padded_rows = 0;  // rows of storage (== rows for owned parameters)
};

struct MatrixShard {
  std::string name;
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::kFloat;
  ParamKind kind = ParamKind::other;
  Role role = Role::even_shard;
  int owner = -1;  // the owning rank for owned roles, -1 for even shards and expert ranges
  int unit = 0;    // index into OwnershipPlan::units()
  // owned: one, on the owner; even: one per rank, in rank order; expert ranges: one per range, in
  // expert order (row_begin is the first expert, rows the experts), on distinct ranks
  std::vector<ShardSlice> slices;

  int64_t numel() const;
  int64_t row_numel() const;  // elements per row (1 for 1-D)
  bool owned() const { return role == Role::owned_matrix || role == Role::owned_tail; }  // whole on one rank
  // This parameter's slice on `rank`: the owner's for owned roles, every rank's for even shards
  // (possibly 0 rows); nullptr where the rank stores none.
  const ShardSlice* slice_on(int rank) const;
};

// The even rule (ZeRO-3 / FSDP2 row sharding): a tensor of `rows` rows cut over `world_size`
// ranks gives every rank ceil(rows / W) rows of storage; rank r holds the real rows
// [min(rows, r * chunk), min(rows, (r + 1) * chunk)).
int64_t even_chunk_rows(int64_t rows, int world_size);
struct RowRange {
  int64_t begin = 0, end = 0;
};
RowRange even_rows(int64_t rows, int world_size, int rank);

struct Segment {
  int64_t offset = 0;  // element offset in the unit's flat buffer
  int64_t numel = 0;   // possibly 0
};

struct UnitLayout {
  std::string name;
  c10::ScalarType dtype = c10::kFloat;
  int64_t numel = 0;              // whole flat buffer, padding included
  std::vector<Segment> segments;  // one per rank, in rank order, contiguous
  std::vector<int> shards;        // indices into OwnershipPlan::shards(), parameter order
  int tail_owner = -1;            // TailPolicy::owner with a non-empty tail; else -1
  // Tied parameters of earlier units this unit uses too (indices into shards(); their units stay
  // gathered until their own backward, and every use's gradient is summed before the reduction).
  std::vector<int> borrowed;
};

enum class PlannerKind { round_robin, greedy_bytes, greedy_cost, balanced, explicit_assignment };
const char* to_string(PlannerKind kind);
PlannerKind planner_kind_from_string(const std::string& name);

struct PlanMeta {
  PlannerKind planner = PlannerKind::balanced;
  TailPolicy tail_policy = TailPolicy::even;
  std::string model;
};

// The frozen output of planning, identical on every rank. Validated on construction: every
// element of every parameter stored exactly once, owned parameters whole on one rank, segments
// contiguous and in rank order, slices inside their rank's segment, disjoint, and aligned.
class OwnershipPlan {
 public:
  OwnershipPlan(int world_size, PlanMeta meta, std::vector<MatrixShard> shards, std::vector<UnitLayout> units);

  int world_size() const { return world_size_; }
  const PlanMeta& meta() const { return meta_; }
  const std::vector<MatrixShard>& shards() const { return shards_; }
  const std::vector<UnitLayout>& units() const { return units_; }
  const MatrixShard& shard(const std::string& name) const;  // throws naming it when unknown
  bool has_shard(const std::string& name) const { return index_.count(name) > 0; }

  // A stable 64-bit hash of everything above (FNV-1a over a canonical text form): equal on every
  // rank and process for equal plans; ranks compare it before their first collective.
  uint64_t hash() const { return hash_; }
  std::string hash_hex() const;
  // The canonical text the hash is computed from (one line per shard and segment).
  std::string canonical_text() const;

  // Elements of `unit`'s flat buffer stored by `rank` (its segment size).
  int64_t segment_numel(int unit, int rank) const { return units_[unit].segments[rank].numel; }

 private:
  void validate() const;

  int world_size_;
  PlanMeta meta_;
  std::vector<MatrixShard> shards_;
  std::vector<UnitLayout> units_;
  std::unordered_map<std::string, int> index_;
  uint64_t hash_ = 0;
};

int64_t align_elements(c10::ScalarType dtype);  // kAlignBytes in elements of `dtype`

}  // namespace mfsdp
