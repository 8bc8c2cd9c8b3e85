#include "core/plan/ownership_plan.h"

#include "core/util/enum_names.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace mfsdp {

int64_t even_chunk_rows(int64_t rows, int world_size) { return (rows + world_size - 1) / world_size; }

RowRange even_rows(int64_t rows, int world_size, int rank) {
  const int64_t chunk = even_chunk_rows(rows, world_size);
  return {std::min(rows, rank * chunk), std::min(rows, (rank + 1) * chunk)};
}

const ShardSlice* MatrixShard::slice_on(int rank) const {
  for (const ShardSlice& sl : slices)
    if (sl.rank == rank) return &sl;
  return nullptr;
}

namespace {

constexpr NameTable<Role, 4> kRoleNames{{{Role::owned_matrix, "owned_matrix"},
                                         {Role::even_shard, "even_shard"},
                                         {Role::owned_tail, "owned_tail"},
                                         {Role::expert_range, "expert_range"}}};
constexpr NameTable<TailPolicy, 2> kTailPolicyNames{{{TailPolicy::even, "even"}, {TailPolicy::owner, "owner"}}};
constexpr NameTable<PlannerKind, 5> kPlannerNames{{{PlannerKind::round_robin, "round_robin"},
                                                   {PlannerKind::greedy_bytes, "greedy_bytes"},
                                                   {PlannerKind::greedy_cost, "greedy_cost"},
                                                   {PlannerKind::balanced, "balanced"},
                                                   {PlannerKind::explicit_assignment, "explicit"}}};

}  // namespace

const char* to_string(Role role) { return checked_name(kRoleNames, role); }
Role role_from_string(const std::string& name) { return parse_name(kRoleNames, name, "role"); }

const char* to_string(TailPolicy policy) { return checked_name(kTailPolicyNames, policy); }
TailPolicy tail_policy_from_string(const std::string& name) { return parse_name(kTailPolicyNames, name, "tail policy"); }

const char* to_string(PlannerKind kind) { return checked_name(kPlannerNames, kind); }
PlannerKind planner_kind_from_string(const std::string& name) { return parse_name(kPlannerNames, name, "planner"); }

int64_t MatrixShard::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t MatrixShard::row_numel() const { return shape.empty() ? 1 : numel() / shape[0]; }

int64_t align_elements(c10::ScalarType dtype) {
  return kAlignBytes / static_cast<int64_t>(c10::elementSize(dtype));
}

OwnershipPlan::OwnershipPlan(int world_size, PlanMeta meta, std::vector<MatrixShard> shards,
                             std::vector<UnitLayout> units)
    : world_size_(world_size), meta_(std::move(meta)), shards_(std::move(shards)), units_(std::move(units)) {
  TORCH_CHECK(world_size_ >= 1, "plan: world size must be >= 1, got ", world_size_);
  for (size_t i = 0; i < shards_.size(); ++i) {
    TORCH_CHECK(index_.emplace(shards_[i].name, static_cast<int>(i)).second, "plan: parameter '",
                shards_[i].name, "' appears twice");
  }
  validate();
  // FNV-1a, 64 bit: stable across processes and platforms (unlike std::hash).
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : canonical_text()) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  hash_ = h;
}

const MatrixShard& OwnershipPlan::shard(const std::string& name) const {
  auto it = index_.find(name);
  TORCH_CHECK(it != index_.end(), "plan: no parameter named '", name, "'");
  return shards_[it->second];
}

std::string OwnershipPlan::hash_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash_));
  return buf;
}

std::string OwnershipPlan::canonical_text() const {
  std::ostringstream out;
  out << "plan v1 world_size=" << world_size_ << " planner=" << to_string(meta_.planner)
      << " tail_policy=" << to_string(meta_.tail_policy) << "\n";
  for (const auto& u : units_) {
    out << "unit " << u.name << " " << c10::toString(u.dtype) << " " << u.numel << " tail_owner=" << u.tail_owner;
    for (const auto& s : u.segments) out << " " << s.offset << "+" << s.numel;
    for (int b : u.borrowed) out << " borrows=" << b;  // nothing for untied plans: their hashes unchanged
    out << "\n";
  }
  for (const auto& s : shards_) {
    out << "shard " << s.name << " [";
    for (size_t i = 0; i < s.shape.size(); ++i) out << (i ? "," : "") << s.shape[i];
    out << "] " << c10::toString(s.dtype) << " " << to_string(s.kind) << " " << to_string(s.role)
        << " owner=" << s.owner << " unit=" << s.unit;
    for (const auto& sl : s.slices) {
      out << " r" << sl.rank << "@" << sl.offset << ":" << sl.row_begin << "+" << sl.rows << "/" << sl.padded_rows;
    }
    out << "\n";
  }
  return out.str();
}

void OwnershipPlan::validate() const {
  const int W = world_size_;
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    const UnitLayout& u = units_[ui];
    TORCH_CHECK(static_cast<int>(u.segments.size()) == W, "plan: unit '", u.name, "' has ", u.segments.size(),
                " segments for world size ", W);
    const int64_t align = align_elements(u.dtype);
    int64_t next = 0;
    for (int r = 0; r < W; ++r) {
      const Segment& s = u.segments[r];
      TORCH_CHECK(s.numel >= 0 && s.offset == next, "plan: unit '", u.name, "': segment of rank ", r,
                  " starts at ", s.offset, " but the previous one ends at ", next,
                  " (segments must be contiguous and in rank order)");
      TORCH_CHECK(s.offset % align == 0, "plan: unit '", u.name, "': segment of rank ", r, " at ", s.offset,
                  " is not aligned to ", kAlignBytes, " bytes");
      next = s.offset + s.numel;
    }
    TORCH_CHECK(next == u.numel, "plan: unit '", u.name, "': segments cover ", next, " of ", u.numel, " elements");
    TORCH_CHECK(u.tail_owner >= -1 && u.tail_owner < W, "plan: unit '", u.name, "': tail owner ", u.tail_owner,
                " outside [0, ", W, ")");
    for (int b : u.borrowed) {
      TORCH_CHECK(b >= 0 && b < static_cast<int>(shards_.size()), "plan: unit '", u.name, "' borrows shard ", b,
                  ", which does not exist");
      TORCH_CHECK(shards_[b].unit < static_cast<int>(ui), "plan: unit '", u.name, "' borrows '", shards_[b].name,
                  "' of unit ", shards_[b].unit, ", which does not come before it");
    }
  }
  // Per (unit, rank): the [begin, end) element ranges of slices and their shard, to check disjointness.
  struct Range {
    int64_t begin, end;
    size_t shard;
    bool operator<(const Range& o) const { return begin < o.begin || (begin == o.begin && end < o.end); }
  };
  std::vector<std::vector<std::vector<Range>>> used(units_.size(), std::vector<std::vector<Range>>(W));
  std::vector<int> in_unit(shards_.size(), 0);
  for (const auto& u : units_) {
    for (int si : u.shards) {
      TORCH_CHECK(si >= 0 && si < static_cast<int>(shards_.size()), "plan: unit '", u.name, "' lists shard ", si);
      ++in_unit[si];
    }
  }
  for (size_t i = 0; i < shards_.size(); ++i) {
    const MatrixShard& s = shards_[i];
    const std::string who = "plan: parameter '" + s.name + "'";
    TORCH_CHECK(s.unit >= 0 && s.unit < static_cast<int>(units_.size()), who, " is in no unit (unit index ", s.unit, ")");
    TORCH_CHECK(in_unit[i] == 1, who, " is listed by ", in_unit[i], " units (must be exactly one)");
    const UnitLayout& u = units_[s.unit];
    TORCH_CHECK(s.dtype == u.dtype, who, " has dtype ", c10::toString(s.dtype), " but its unit '", u.name, "' is ",
                c10::toString(u.dtype));
    TORCH_CHECK(!s.shape.empty() && s.numel() > 0, who, " has an empty shape");
    const int64_t rows = s.shape[0], row_numel = s.row_numel();
    const int64_t align = align_elements(u.dtype);
    if (s.owned()) {
      TORCH_CHECK(s.owner >= 0 && s.owner < W, who, ": owner rank ", s.owner, " outside [0, ", W, ")");
      TORCH_CHECK(s.slices.size() == 1, who, " is owned but has ", s.slices.size(),
                  " slices (an owned parameter is whole on one rank)");
      const ShardSlice& sl = s.slices[0];
      TORCH_CHECK(sl.rank == s.owner && sl.row_begin == 0 && sl.rows == rows && sl.padded_rows == rows, who,
                  ": owned by rank ", s.owner, " but its slice is on rank ", sl.rank, " rows [", sl.row_begin, ", ",
                  sl.row_begin + sl.rows, ") of ", rows);
      TORCH_CHECK(s.role != Role::owned_matrix || s.shape.size() == 2, who, " is an owned matrix but is ",
                  s.shape.size(), "-D");
    } else if (s.role == Role::expert_range) {
      TORCH_CHECK(s.kind == ParamKind::expert_matrix && s.shape.size() == 3, who,
                  " is cut into expert ranges but is not a 3-D expert tensor");
      TORCH_CHECK(s.owner == -1, who, " is cut into expert ranges but names owner ", s.owner);
      TORCH_CHECK(!s.slices.empty() && static_cast<int>(s.slices.size()) <= W, who, " has ", s.slices.size(),
                  " expert ranges for world size ", W);
      std::vector<bool> seen(W, false);
      int64_t next = 0;
      for (const ShardSlice& sl : s.slices) {
        TORCH_CHECK(sl.rank >= 0 && sl.rank < W && !seen[sl.rank], who, ": expert range on rank ", sl.rank,
                    sl.rank >= 0 && sl.rank < W ? " is its second on that rank" : " outside the world");
        seen[sl.rank] = true;
        TORCH_CHECK(sl.row_begin == next && sl.rows > 0 && sl.padded_rows == sl.rows, who, ": expert range on rank ",
                    sl.rank, " holds experts [", sl.row_begin, ", ", sl.row_begin + sl.rows, ") padded to ", sl.padded_rows,
                    "; ranges must be non-empty, unpadded and contiguous from expert ", next);
        next += sl.rows;
      }
      TORCH_CHECK(next == rows, who, ": expert ranges cover ", next, " of ", rows, " experts");
    } else {
      TORCH_CHECK(s.owner == -1, who, " is even-sharded but names owner ", s.owner);
      TORCH_CHECK(static_cast<int>(s.slices.size()) == W, who, " is even-sharded with ", s.slices.size(),
                  " slices for world size ", W);
      const int64_t chunk = even_chunk_rows(rows, W);
      for (int r = 0; r < W; ++r) {
        const ShardSlice& sl = s.slices[r];
        const auto [begin, end] = even_rows(rows, W, r);
        TORCH_CHECK(sl.rank == r && sl.row_begin == begin && sl.rows == end - begin && sl.padded_rows == chunk, who,
                    ": slice ", r, " is rank ", sl.rank, " rows [", sl.row_begin, ", ", sl.row_begin + sl.rows,
                    ") padded to ", sl.padded_rows, "; the even rule gives rank ", r, " rows [", begin, ", ", end,
                    ") padded to ", chunk);
      }
    }
    for (const ShardSlice& sl : s.slices) {
      const Segment& seg = u.segments[sl.rank];
      const int64_t begin = sl.offset, end = sl.offset + sl.padded_rows * row_numel;
      TORCH_CHECK(begin % align == 0, who, ": slice on rank ", sl.rank, " at offset ", begin, " is not aligned to ",
                  kAlignBytes, " bytes");
      TORCH_CHECK(begin >= seg.offset && end <= seg.offset + seg.numel, who, ": slice on rank ", sl.rank, " [", begin,
                  ", ", end, ") lies outside that rank's segment [", seg.offset, ", ", seg.offset + seg.numel, ")");
      if (end > begin) used[s.unit][sl.rank].push_back({begin, end, i});
    }
  }
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    for (int r = 0; r < W; ++r) {
      auto& ranges = used[ui][r];
      std::sort(ranges.begin(), ranges.end());
      for (size_t k = 1; k < ranges.size(); ++k) {
        TORCH_CHECK(ranges[k].begin >= ranges[k - 1].end, "plan: unit '", units_[ui].name, "', rank ", r,
                    ": parameters '", shards_[ranges[k - 1].shard].name, "' and '", shards_[ranges[k].shard].name,
                    "' overlap at elements [", ranges[k].begin, ", ", ranges[k - 1].end, ")");
      }
    }
  }
}

}  // namespace mfsdp
