// Model specs, presets, the plan's own validation, and the planners' deterministic rules.
#include "core/util/errors.h"
#include "core/plan/memory_model.h"
#include "core/plan/plan_json.h"
#include "core/plan/planner.h"
#include "core/plan/presets.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace mfsdp {
namespace {

#define EXPECT_ERROR_HAS(stmt, text) \
  EXPECT_NE(error_of([&] { stmt; }).find(text), std::string::npos) << error_of([&] { stmt; })

// Published parameter counts of the real models these presets describe.
TEST(Presets, ParameterCountsMatchThePublishedModels) {
  EXPECT_EQ(preset("llama3-8b", c10::kBFloat16).numel(), 8'030'261'248);
  EXPECT_EQ(preset("llama3-70b", c10::kBFloat16).numel(), 70'553'706'496);
  EXPECT_EQ(preset("qwen2.5-32b", c10::kBFloat16).numel(), 32'763'876'352);
  // MoE presets, counted from each release's config.json.
  EXPECT_EQ(preset("mixtral-8x7b", c10::kBFloat16).numel(), 46'702'792'704);
  EXPECT_EQ(preset("qwen3-30b-a3b", c10::kBFloat16).numel(), 30'532'122'624);
  EXPECT_EQ(preset("deepseek-v3", c10::kBFloat16).numel(), 671'026'419'200);
}

TEST(Presets, ParameterCountsOfTheProjectModels) {
  // tiny: 2 embeddings 256x64; per layer 4 x 64x64 + 3 x 128x64 + 2 norms of 64; final norm 64.
  EXPECT_EQ(preset("tiny", c10::kFloat).numel(), 2 * 256 * 64 + 2 * (4 * 64 * 64 + 3 * 128 * 64 + 2 * 64) + 64);
  // bench32: vocabulary 32000, hidden 4096, 32 layers, full multi-head, the ungated MLP (two
  // 8192 x 4096 ups, a 4096 x 16384 down): 201.3 M per layer, 6.44 B over the 32 layers.
  EXPECT_EQ(preset("bench32", c10::kBFloat16).numel(),
            2LL * 32000 * 4096 + 32LL * (4LL * 4096 * 4096 + 2LL * 8192 * 4096 + 4096LL * 16384 + 2 * 4096) + 4096);
  int64_t layer0 = 0;
  for (const ParamSpec& p : preset("bench32", c10::kBFloat16).params)
    if (p.unit == "layers.0" && p.shape.size() == 2) layer0 += p.numel();
  EXPECT_EQ(layer0, 201'326'592);
}

TEST(Presets, AliasesAndUnknownNames) {
  EXPECT_EQ(preset("32b", c10::kBFloat16).numel(), preset("qwen2.5-32b", c10::kBFloat16).numel());
  EXPECT_ERROR_HAS(preset("gpt5", c10::kFloat), "unknown model preset 'gpt5'");
}

TEST(Presets, UnitsAreEmbedLayersHeadInForwardOrder) {
  auto units = preset("tiny", c10::kFloat).unit_names();
  EXPECT_EQ(units, (std::vector<std::string>{"embed", "layers.0", "layers.1", "head"}));
}

TEST(ModelSpec, InfersUnitsAndKindsFromPyTorchNames) {
  EXPECT_EQ(infer_unit("model.layers.12.self_attn.q_proj.weight"), "model.layers.12");
  EXPECT_EQ(infer_unit("lm_head.weight"), "lm_head");
  EXPECT_EQ(infer_unit("model.embed_tokens.weight"), "model.embed_tokens");
  EXPECT_EQ(infer_kind("model.embed_tokens.weight", {100, 8}), ParamKind::embedding);
  EXPECT_EQ(infer_kind("lm_head.weight", {100, 8}), ParamKind::head);
  EXPECT_EQ(infer_kind("model.layers.0.mlp.up_proj.weight", {32, 8}), ParamKind::hidden_matrix);
  EXPECT_EQ(infer_kind("model.layers.0.input_layernorm.weight", {8}), ParamKind::other);
}

TEST(ModelSpec, JsonSpecErrorsNameTheEntryAndField) {
  EXPECT_ERROR_HAS(model_spec_from_json("[{\"name\": \"a\", \"shape\": [2, 2]", "s.json"), "malformed JSON");
  EXPECT_ERROR_HAS(model_spec_from_json("[{\"name\": \"a\", \"shape\": [2, 2]},\n {\"shape\": [2]}]", "s.json"),
                   "entry 1, field \"name\"");
  EXPECT_ERROR_HAS(model_spec_from_json("[{\"name\": \"a\", \"shape\": [2, \"x\"]}]", "s.json"),
                   "entry 0, field \"shape\"");
  EXPECT_ERROR_HAS(model_spec_from_json("[{\"name\": \"a\", \"shape\": [2], \"dtype\": \"int8\"}]", "s.json"),
                   "unsupported dtype 'int8'");
  EXPECT_ERROR_HAS(model_spec_from_json("[{\"name\": \"a\", \"shape\": [2]}, {\"name\": \"a\", \"shape\": [2]}]", "s.json"),
                   "parameter 'a' appears twice");
  EXPECT_ERROR_HAS(model_spec_from_json("[{\"name\": \"a\", \"shape\": [0, 2]}]", "s.json"), "has a dimension 0");
  EXPECT_ERROR_HAS(model_spec_from_json("[{\"name\": \"u.0.a\", \"shape\": [2, 2], \"dtype\": \"bf16\"},"
                                        " {\"name\": \"u.0.b\", \"shape\": [2], \"dtype\": \"fp32\"}]", "s.json"),
                   "unit 'u.0' mixes dtypes");
}

TEST(ModelSpec, JsonSpecRoundTripsAPyTorchExport) {
  ModelSpec spec = model_spec_from_json(
      R"({"name": "m", "params": [
            {"name": "model.embed_tokens.weight", "shape": [50, 8], "dtype": "torch.bfloat16"},
            {"name": "model.layers.0.mlp.up_proj.weight", "shape": [16, 8], "dtype": "torch.bfloat16"},
            {"name": "model.layers.0.norm.weight", "shape": [8], "dtype": "torch.bfloat16"}]})",
      "m.json");
  ASSERT_EQ(spec.params.size(), 3u);
  EXPECT_EQ(spec.params[1].unit, "model.layers.0");
  EXPECT_EQ(spec.params[1].kind, ParamKind::hidden_matrix);
  EXPECT_EQ(spec.params[0].dtype, c10::kBFloat16);
}

// Tied parameters: listed once, with the later units that use them; the plan records the use, its
// JSON round-trips it, and an untied plan's hash does not change.
TEST(ModelSpec, TiedParametersAreListedOnceAndBorrowedByLaterUnits) {
  EXPECT_EQ(model_spec_from_json(R"([{"name": "embed.weight", "shape": [8, 4], "also_used_by": ["head"]},
                                     {"name": "head.norm", "shape": [4], "unit": "head"}])", "s.json").params[0].also_used_by,
            std::vector<std::string>{"head"});
  EXPECT_ERROR_HAS(model_spec_from_json(R"([{"name": "embed.weight", "shape": [8, 4], "also_used_by": ["lm"]},
                                            {"name": "head.norm", "shape": [4], "unit": "head"}])", "s.json"),
                   "'embed.weight' is also used by unit 'lm', which has no parameters of its own");
  EXPECT_ERROR_HAS(model_spec_from_json(R"([{"name": "a.norm", "shape": [4], "unit": "a"},
                                            {"name": "b.w", "shape": [8, 4], "unit": "b", "also_used_by": ["a"]}])", "s.json"),
                   "is also used by unit 'a', which does not come after it");
  EXPECT_ERROR_HAS(model_spec_from_json(R"([{"name": "e.w", "shape": [8, 4], "also_used_by": "head"}])", "s.json"),
                   "entry 0, field \"also_used_by\": not a list of unit names");
  TransformerConfig c = preset_config("tiny");
  const ModelSpec untied = transformer_spec(c);
  c.tie_embeddings = true;
  const ModelSpec tied = transformer_spec(c);
  EXPECT_EQ(tied.params.size() + 1, untied.params.size());  // no head.weight
  EXPECT_EQ(tied.params[0].also_used_by, std::vector<std::string>{"head"});
  const OwnershipPlan plan = make_plan(tied, 3, PlannerOptions{});
  EXPECT_EQ(plan.units().back().borrowed, std::vector<int>{0});
  const OwnershipPlan back = plan_from_json(nlohmann::json::parse(plan_to_json(plan).dump()), "plan.json");
  EXPECT_EQ(back.hash(), plan.hash());
  EXPECT_EQ(back.units().back().borrowed, std::vector<int>{0});
  EXPECT_EQ(plan_to_json(make_plan(untied, 3, PlannerOptions{})).dump().find("borrowed"), std::string::npos);
}

PlannerOptions with(PlannerKind planner, TailPolicy tail = TailPolicy::even) {
  PlannerOptions o;
  o.planner = planner;
  o.tail_policy = tail;
  return o;
}

TEST(Planner, RoundRobinFollowsModelOrderAcrossUnits) {
  ModelSpec spec = preset("tiny", c10::kFloat);
  OwnershipPlan plan = make_plan(spec, 3, with(PlannerKind::round_robin));
  int i = 0;
  for (const auto& s : plan.shards()) {
    if (s.role != Role::owned_matrix) continue;
    EXPECT_EQ(s.owner, i % 3) << s.name;  // global, not restarted per unit
    ++i;
  }
  EXPECT_EQ(i, 14);
}

TEST(Planner, DefaultPolicyPlacesEachKind) {
  OwnershipPlan plan = make_plan(preset("tiny", c10::kFloat), 4, with(PlannerKind::balanced));
  EXPECT_EQ(plan.shard("embed.weight").role, Role::even_shard);
  EXPECT_EQ(plan.shard("head.weight").role, Role::even_shard);
  EXPECT_EQ(plan.shard("layers.0.attn.q.weight").role, Role::owned_matrix);
  EXPECT_EQ(plan.shard("layers.0.attn_norm.weight").role, Role::even_shard);
  OwnershipPlan owner_tail = make_plan(preset("tiny", c10::kFloat), 4, with(PlannerKind::balanced, TailPolicy::owner));
  const MatrixShard& norm = owner_tail.shard("layers.0.attn_norm.weight");
  EXPECT_EQ(norm.role, Role::owned_tail);
  EXPECT_EQ(norm.owner, owner_tail.shard("layers.0.mlp_norm.weight").owner);  // one tail owner per unit
  EXPECT_EQ(owner_tail.units()[1].tail_owner, norm.owner);
}

TEST(Planner, PlacementRulesOverrideTheDefault) {
  PlannerOptions o = with(PlannerKind::balanced);
  o.rules.push_back({"head.*", Role::owned_matrix});
  OwnershipPlan plan = make_plan(preset("tiny", c10::kFloat), 2, o);
  EXPECT_EQ(plan.shard("head.weight").role, Role::owned_matrix);
  o.rules = {{"*norm*", Role::owned_matrix}};
  EXPECT_ERROR_HAS(make_plan(preset("tiny", c10::kFloat), 2, o), "an owned matrix but it is 1-D");
}

TEST(Planner, EvenShardsFollowThePaddingRule) {
  // 256 rows over W = 3: chunks of 86 rows; rank 2 holds 84 real rows padded to 86.
  OwnershipPlan plan = make_plan(preset("tiny", c10::kFloat), 3, with(PlannerKind::balanced));
  const MatrixShard& e = plan.shard("embed.weight");
  ASSERT_EQ(e.slices.size(), 3u);
  EXPECT_EQ(e.slices[2].row_begin, 172);
  EXPECT_EQ(e.slices[2].rows, 84);
  EXPECT_EQ(e.slices[2].padded_rows, 86);
}

TEST(Planner, ExplicitAssignmentIsFollowedOrRejectedClearly) {
  ModelSpec spec = preset("tiny", c10::kFloat);
  PlannerOptions o = with(PlannerKind::explicit_assignment, TailPolicy::owner);
  for (const auto& item : plan_items(spec, o)) o.explicit_owners[item.key] = 1;
  OwnershipPlan plan = make_plan(spec, 2, o);
  for (const auto& s : plan.shards())
    if (s.owned()) {
      EXPECT_EQ(s.owner, 1) << s.name;
    }
  EXPECT_EQ(plan.segment_numel(1, 0), 0);  // rank 0 stores nothing of layers.0

  auto missing = o;
  missing.explicit_owners.erase("layers.1.mlp.down.weight");
  EXPECT_ERROR_HAS(make_plan(spec, 2, missing), "no owner for 'layers.1.mlp.down.weight'");
  auto out_of_range = o;
  out_of_range.explicit_owners["layers.0/tail"] = 2;
  EXPECT_ERROR_HAS(make_plan(spec, 2, out_of_range), "puts 'layers.0/tail' on rank 2, outside [0, 2)");
  auto unknown = o;
  unknown.explicit_owners["layers.9.attn.q.weight"] = 0;
  EXPECT_ERROR_HAS(make_plan(spec, 2, unknown), "names 'layers.9.attn.q.weight'");
}

TEST(Planner, RejectsANonPositiveWorldSize) {
  EXPECT_ERROR_HAS(make_plan(preset("tiny", c10::kFloat), 0, with(PlannerKind::balanced)), "world size must be >= 1");
}

TEST(Plan, HashIsStableAndSeesEveryOwner) {
  ModelSpec spec = preset("tiny", c10::kFloat);
  OwnershipPlan a = make_plan(spec, 4, with(PlannerKind::greedy_bytes));
  OwnershipPlan b = make_plan(spec, 4, with(PlannerKind::greedy_bytes));
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.canonical_text(), b.canonical_text());
  PlannerOptions o = with(PlannerKind::explicit_assignment);
  for (const auto& s : a.shards())
    if (s.owned()) o.explicit_owners[s.name] = s.owner;
  EXPECT_NE(make_plan(spec, 4, o).hash(), a.hash());  // planner name is part of the plan
  o.explicit_owners["layers.0.attn.q.weight"] = (a.shard("layers.0.attn.q.weight").owner + 1) % 4;
  OwnershipPlan moved = make_plan(spec, 4, o);
  o.explicit_owners["layers.0.attn.q.weight"] = a.shard("layers.0.attn.q.weight").owner;
  EXPECT_NE(make_plan(spec, 4, o).hash(), moved.hash());
}

// The constructor's validation: each corruption is refused, naming the parameter.
TEST(Plan, ValidationRefusesCorruptedLayouts) {
  OwnershipPlan good = make_plan(preset("tiny", c10::kFloat), 3, with(PlannerKind::balanced));
  auto rebuild = [&](auto&& mutate) {
    std::vector<MatrixShard> shards = good.shards();
    std::vector<UnitLayout> units = good.units();
    mutate(shards, units);
    OwnershipPlan(3, good.meta(), shards, units);
  };
  auto find = [](std::vector<MatrixShard>& shards, const std::string& name) -> MatrixShard& {
    return *std::find_if(shards.begin(), shards.end(), [&](auto& s) { return s.name == name; });
  };
  EXPECT_ERROR_HAS(rebuild([&](auto& s, auto&) { find(s, "layers.0.attn.q.weight").owner = 7; }),
                   "parameter 'layers.0.attn.q.weight': owner rank 7 outside [0, 3)");
  EXPECT_ERROR_HAS(rebuild([&](auto& s, auto&) {
                     auto& q = find(s, "layers.0.attn.q.weight");
                     q.owner = (q.owner + 1) % 3;
                   }),
                   "parameter 'layers.0.attn.q.weight': owned by rank");
  EXPECT_ERROR_HAS(rebuild([&](auto& s, auto&) { find(s, "layers.0.attn.k.weight").slices[0].offset += 16; }),
                   "'layers.0.attn.k.weight'");
  EXPECT_ERROR_HAS(rebuild([&](auto& s, auto&) { find(s, "embed.weight").slices[1].rows -= 1; }),
                   "parameter 'embed.weight': slice 1");
  EXPECT_ERROR_HAS(rebuild([&](auto&, auto& u) { u[1].segments[1].offset += 16; }),
                   "unit 'layers.0': segment of rank 1");
  EXPECT_ERROR_HAS(rebuild([&](auto& s, auto&) { find(s, "layers.0.attn.v.weight").slices[0].offset += 3; }),
                   "not aligned");
  EXPECT_ERROR_HAS(rebuild([&](auto& s, auto&) {
                     // Put k on top of q when both live on one rank; otherwise move k into q's rank.
                     auto& q = find(s, "layers.0.attn.q.weight");
                     auto& k = find(s, "layers.0.attn.k.weight");
                     k.owner = q.owner;
                     k.slices[0].rank = q.owner;
                     k.slices[0].offset = q.slices[0].offset;
                   }),
                   "layers.0");
}

// The targets the README reports (measured by bench/bench_planner too): a balanced 32B plan.
TEST(Planner, Balanced32BMeetsTheImbalanceTargets) {
  ModelSpec spec = preset("qwen2.5-32b", c10::kBFloat16);
  for (auto [w, bytes_bound, cost_bound] : {std::tuple{8, 1.02, 1.02}, std::tuple{64, 1.05, 1.10}}) {
    PlanUsage u = plan_usage(make_plan(spec, w, with(PlannerKind::balanced)), MemoryModelOptions{});
    std::printf("qwen2.5-32b W=%d: bytes max/mean %.5f, cost max/mean %.5f\n", w, u.bytes_imbalance, u.cost_imbalance);
    EXPECT_LE(u.bytes_imbalance, bytes_bound) << "W=" << w;
    EXPECT_LE(u.cost_imbalance, cost_bound) << "W=" << w;
  }
}

TEST(MemoryModel, OwnerKeepsZero3MemoryWhileZero1AndDdpHoldEverything) {
  ModelSpec spec = preset("llama3-8b", c10::kBFloat16);
  PlanUsage u = plan_usage(make_plan(spec, 8, with(PlannerKind::balanced)), MemoryModelOptions{});
  ASSERT_EQ(u.placements.size(), 4u);
  const auto& owner = u.placements[0];
  const auto& zero3 = u.placements[1];
  const auto& zero1 = u.placements[2];
  const auto& ddp = u.placements[3];
  const double p = static_cast<double>(u.total_param_bytes);
  EXPECT_LT(owner.max_resident_bytes, 1.02 * zero3.max_resident_bytes);
  EXPECT_GE(zero1.max_resident_bytes, 2 * p);  // full params + grads
  EXPECT_GE(ddp.max_resident_bytes, zero1.max_resident_bytes);
  // Owner: over all ranks, each parameter, gradient and state element is stored once: params and
  // grads 2P, Muon's one buffer per hidden matrix, AdamW's two per embedding/head/tail element
  // (plus at most 0.1 % for alignment and even-shard padding).
  int64_t total = 0, expected = 0;
  for (const auto& r : u.ranks) total += r.resident_bytes;
  for (const auto& param : spec.params) expected += param.bytes() * (param.kind == ParamKind::hidden_matrix ? 3 : 4);
  EXPECT_GE(total, expected);
  EXPECT_LE(total, expected + expected / 1000);
}

}  // namespace
}  // namespace mfsdp

namespace mfsdp {
namespace {

ModelSpec tiny_moe(int64_t experts) {
  TransformerConfig c = preset_config("tiny");
  c.experts = experts, c.top_k = 2, c.moe_intermediate = 32;
  return transformer_spec(c);
}

// Expert tensors are cut into contiguous ranges, each whole on a distinct rank, covering every
// expert once; the range count follows --expert-ranges; every planner places them the same way.
TEST(Planner, ExpertTensorsAreCutIntoContiguousRangesOnDistinctRanks) {
  for (int W : {1, 2, 3, 5, 7, 12}) {
    for (int asked : {0, 1, 2, 5}) {
      PlannerOptions o = with(PlannerKind::balanced);
      o.expert_ranges = asked;
      const OwnershipPlan plan = make_plan(tiny_moe(8), W, o);
      int tensors = 0;
      for (const MatrixShard& s : plan.shards()) {
        if (s.kind != ParamKind::expert_matrix) continue;
        ++tensors;
        EXPECT_EQ(s.role, Role::expert_range) << s.name;
        const int want = std::min<int>(8, asked > 0 ? std::min(asked, W) : W);
        ASSERT_EQ(static_cast<int>(s.slices.size()), want) << s.name << " W=" << W << " asked " << asked;
        std::set<int> ranks;
        int64_t next = 0, longest = 0, shortest = 8;
        for (const ShardSlice& sl : s.slices) {
          EXPECT_TRUE(ranks.insert(sl.rank).second) << s.name << ": two ranges on rank " << sl.rank;
          EXPECT_EQ(sl.row_begin, next);
          next += sl.rows;
          longest = std::max(longest, sl.rows), shortest = std::min(shortest, sl.rows);
        }
        EXPECT_EQ(next, 8);
        EXPECT_LE(longest - shortest, 1) << s.name;
      }
      EXPECT_EQ(tensors, 6);
    }
  }
  // Ranges spread the optimizer cost: at W = 3 no rank carries more than its share plus one range.
  const PlanUsage usage = plan_usage(make_plan(tiny_moe(8), 3, with(PlannerKind::balanced)), MemoryModelOptions{});
  double lo = 1e300, hi = 0;
  for (const RankUsage& r : usage.ranks) lo = std::min(lo, r.optimizer_cost), hi = std::max(hi, r.optimizer_cost);
  EXPECT_LT(hi / lo, 1.1);
  // The ranges are in the plan's hash and survive its JSON.
  const OwnershipPlan a = make_plan(tiny_moe(8), 3, with(PlannerKind::balanced));
  PlannerOptions two = with(PlannerKind::balanced);
  two.expert_ranges = 2;
  EXPECT_NE(a.hash(), make_plan(tiny_moe(8), 3, two).hash());
  EXPECT_EQ(plan_from_json(nlohmann::json::parse(plan_to_json(a).dump()), "plan.json").hash(), a.hash());
}

TEST(Plan, ValidationRefusesBadExpertRanges) {
  const OwnershipPlan good = make_plan(tiny_moe(8), 3, with(PlannerKind::balanced));
  auto rebuild = [&](auto&& mutate) {
    std::vector<MatrixShard> shards = good.shards();
    std::vector<UnitLayout> units = good.units();
    mutate(*std::find_if(shards.begin(), shards.end(), [](auto& s) { return s.name == "layers.0.moe.experts.up"; }));
    OwnershipPlan(3, good.meta(), shards, units);
  };
  EXPECT_ERROR_HAS(rebuild([](MatrixShard& s) { s.slices[1].rank = s.slices[0].rank; }), "is its second on that rank");
  EXPECT_ERROR_HAS(rebuild([](MatrixShard& s) { s.slices[1].row_begin += 1; }), "contiguous from expert 3");
  EXPECT_ERROR_HAS(rebuild([](MatrixShard& s) { s.slices.pop_back(); }), "expert ranges cover 6 of 8 experts");
  EXPECT_ERROR_HAS(rebuild([](MatrixShard& s) { s.owner = 0; }), "cut into expert ranges but names owner 0");
  PlannerOptions rule = with(PlannerKind::balanced);
  rule.rules = {{"*attn.q.weight", Role::expert_range}};
  EXPECT_ERROR_HAS(make_plan(tiny_moe(8), 3, rule), "cuts 'layers.0.attn.q.weight' into expert ranges but it is not an expert tensor");
  PlannerOptions negative = with(PlannerKind::balanced);
  negative.expert_ranges = -1;
  EXPECT_ERROR_HAS(make_plan(tiny_moe(8), 3, negative), "expert ranges must be >= 0");
}

}  // namespace
}  // namespace mfsdp
