#include "core/plan/plan_json.h"

#include "core/plan/dtype_names.h"
#include "core/util/json_fields.h"

namespace mfsdp {

nlohmann::json plan_to_json(const OwnershipPlan& plan) {
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const MatrixShard& s : plan.shards()) {
    nlohmann::ordered_json slices = nlohmann::ordered_json::array();
    for (const ShardSlice& sl : s.slices)
      slices.push_back({{"rank", sl.rank}, {"offset", sl.offset}, {"row_begin", sl.row_begin}, {"rows", sl.rows},
                        {"padded_rows", sl.padded_rows}});
    shards.push_back({{"name", s.name}, {"shape", s.shape}, {"dtype", safetensors_dtype(s.dtype)},
                      {"kind", to_string(s.kind)}, {"role", to_string(s.role)}, {"owner", s.owner}, {"unit", s.unit},
                      {"slices", slices}});
  }
  nlohmann::ordered_json units = nlohmann::ordered_json::array();
  for (const UnitLayout& u : plan.units()) {
    nlohmann::ordered_json segments = nlohmann::ordered_json::array();
    for (const Segment& g : u.segments) segments.push_back({{"offset", g.offset}, {"numel", g.numel}});
    units.push_back({{"name", u.name}, {"dtype", safetensors_dtype(u.dtype)}, {"numel", u.numel},
                     {"segments", segments}, {"shards", u.shards}, {"tail_owner", u.tail_owner}});
    if (!u.borrowed.empty()) units.back()["borrowed"] = u.borrowed;  // tied parameters only
  }
  nlohmann::ordered_json j{{"world_size", plan.world_size()},
                           {"planner", to_string(plan.meta().planner)},
                           {"tail_policy", to_string(plan.meta().tail_policy)},
                           {"model", plan.meta().model},
                           {"hash", plan.hash_hex()},
                           {"shards", shards},
                           {"units", units}};
  return nlohmann::json(j);
}

OwnershipPlan plan_from_json(const nlohmann::json& j, const std::string& path, const char* kind) {
  const JsonFields f{j, path, "plan", kind};
  const int world = static_cast<int>(f.integer("world_size", 1, 1 << 20));
  PlanMeta meta;
  meta.planner = in_json_context(kind, path, f.in("planner"), [&] { return planner_kind_from_string(f.string("planner")); });
  meta.tail_policy = in_json_context(kind, path, f.in("tail_policy"), [&] { return tail_policy_from_string(f.string("tail_policy")); });
  meta.model = f.string("model");
  std::vector<MatrixShard> shards;
  const size_t num_shards = f.array("shards").size();
  for (size_t i = 0; i < num_shards; ++i) {
    const JsonFields s = f.element("shards", i);
    MatrixShard m;
    m.name = s.string("name");
    int64_t numel = 1;
    for (size_t d = 0; d < s.array("shape").size(); ++d) {
      const nlohmann::json& v = s.array("shape")[d];
      if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(kMaxPlanElements))
        bad_json(kind, path, s.in("shape"), "has a bad dimension");
      m.shape.push_back(v.get<int64_t>());
      if (m.shape.back() > 0 && numel > kMaxPlanElements / m.shape.back()) bad_json(kind, path, s.in("shape"), "is absurdly large");
      numel *= m.shape.back();
    }
    m.dtype = in_json_context(kind, path, s.in("dtype"), [&] { return dtype_from_safetensors(s.string("dtype")); });
    m.kind = in_json_context(kind, path, s.in("kind"), [&] { return param_kind_from_string(s.string("kind")); });
    m.role = in_json_context(kind, path, s.in("role"), [&] { return role_from_string(s.string("role")); });
    m.owner = static_cast<int>(s.integer("owner", -1, world - 1));
    m.unit = static_cast<int>(s.integer("unit", 0, 1 << 20));
    for (size_t k = 0; k < s.array("slices").size(); ++k) {
      const JsonFields sl = s.element("slices", k);
      ShardSlice x;
      x.rank = static_cast<int>(sl.integer("rank", 0, world - 1));
      x.offset = sl.integer("offset", 0, kMaxPlanElements);
      x.row_begin = sl.integer("row_begin", 0, kMaxPlanElements);
      x.rows = sl.integer("rows", 0, kMaxPlanElements);
      x.padded_rows = sl.integer("padded_rows", 0, kMaxPlanElements);
      m.slices.push_back(x);
    }
    shards.push_back(std::move(m));
  }
  std::vector<UnitLayout> units;
  for (size_t i = 0; i < f.array("units").size(); ++i) {
    const JsonFields u = f.element("units", i);
    UnitLayout l;
    l.name = u.string("name");
    l.dtype = in_json_context(kind, path, u.in("dtype"), [&] { return dtype_from_safetensors(u.string("dtype")); });
    l.numel = u.integer("numel", 0, kMaxPlanElements);
    for (size_t k = 0; k < u.array("segments").size(); ++k) {
      const JsonFields g = u.element("segments", k);
      l.segments.push_back(Segment{g.integer("offset", 0, kMaxPlanElements), g.integer("numel", 0, kMaxPlanElements)});
    }
    for (const nlohmann::json& v : u.array("shards")) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() >= num_shards) bad_json(kind, path, u.in("shards"), "names a shard that does not exist");
      l.shards.push_back(v.get<int>());
    }
    l.tail_owner = static_cast<int>(u.integer("tail_owner", -1, world - 1));
    if (u.j.contains("borrowed"))
      for (const nlohmann::json& v : u.array("borrowed")) {
        if (!v.is_number_unsigned() || v.get<uint64_t>() >= num_shards) bad_json(kind, path, u.in("borrowed"), "names a shard that does not exist");
        l.borrowed.push_back(v.get<int>());
      }
    units.push_back(std::move(l));
  }
  for (const MatrixShard& m : shards)
    if (m.unit >= static_cast<int>(units.size())) bad_json(kind, path, "plan.shards", "'" + m.name + "' names a unit that does not exist");
  OwnershipPlan plan = in_json_context(kind, path, "plan", [&] { return OwnershipPlan(world, meta, std::move(shards), std::move(units)); });
  const std::string hash = f.string("hash");
  if (hash != plan.hash_hex())
    bad_json(kind, path, "plan.hash", "is " + hash + " but the plan it describes hashes to " + plan.hash_hex() + " (edited?)");
  return plan;
}

}  // namespace mfsdp
