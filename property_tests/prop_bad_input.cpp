// Malformed model specs and owner assignments are refused with a clear error, never a crash, a
// wrong-type exception or a silent acceptance of nonsense (docs/testing.md, "Bad input and faults").
//  - Specs: a valid generated spec (a list or {"name", "params"}) with 1-3 mutations — a field
//    removed, set to a value of another JSON type, a dimension made zero, negative, fractional,
//    2^63-1, 2^64-1 or huge in product, a duplicated name, an unknown dtype or kind, garbage text
//    spliced in. Property: model_spec_from_json either throws c10::Error whose message starts with
//    "model spec" and names the source (or the spec's own name), or returns a spec that validates and plans at W = 1..8 with
//    every dimension positive and at most 2^50 elements a parameter.
//  - Assignments: explicit owners for a valid spec with random names and ranks (negative, >= W,
//    huge, a name of no parameter, an owned matrix missing). Property: make_plan either throws
//    c10::Error naming the assignment, or every owner in the plan is the assigned rank in [0, W).
#include "core/plan/model_spec.h"
#include "core/plan/planner.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace mfsdp {
namespace {

nlohmann::json valid_spec() {
  const int layers = *rc::gen::inRange(1, 3);
  const int64_t h = 8 * *rc::gen::inRange(1, 5);
  nlohmann::json params = nlohmann::json::array();
  params.push_back({{"name", "embed.weight"}, {"shape", {64, h}}, {"unit", "embed"}});
  for (int i = 0; i < layers; ++i) {
    const std::string u = "layers." + std::to_string(i);
    params.push_back({{"name", u + ".attn.q.weight"}, {"shape", {h, h}}, {"unit", u}});
    params.push_back({{"name", u + ".mlp.up.weight"}, {"shape", {2 * h, h}}, {"unit", u}, {"dtype", "float32"}});
    params.push_back({{"name", u + ".norm.weight"}, {"shape", {h}}, {"unit", u}});
  }
  params.push_back({{"name", "head.weight"}, {"shape", {64, h}}, {"unit", "head"}});
  if (*rc::gen::arbitrary<bool>()) return params;
  return {{"name", "generated"}, {"params", params}};
}

nlohmann::json other_value() {
  switch (*rc::gen::inRange(0, 9)) {
    case 0: return nullptr;
    case 1: return true;
    case 2: return -1;
    case 3: return 1.5;
    case 4: return "x";
    case 5: return nlohmann::json::array();
    case 6: return nlohmann::json::object();
    case 7: return std::numeric_limits<uint64_t>::max();
    default: return 1e300;
  }
}

nlohmann::json& params_of(nlohmann::json& spec) { return spec.is_object() ? spec["params"] : spec; }

void mutate(nlohmann::json& spec) {
  nlohmann::json& params = params_of(spec);
  const size_t i = *rc::gen::inRange<size_t>(0, params.size());
  nlohmann::json& e = params[i];
  if (!e.is_object()) {  // an entry an earlier mutation replaced: replace it again
    e = other_value();
    return;
  }
  switch (*rc::gen::inRange(0, 10)) {
    case 0: e.erase(*rc::gen::element<std::string>("name", "shape", "unit", "dtype")); break;
    case 1: e[*rc::gen::element<std::string>("name", "shape", "unit", "dtype", "kind")] = other_value(); break;
    case 2: {
      nlohmann::json& shape = e["shape"];
      if (!shape.is_array() || shape.empty()) break;
      const size_t d = *rc::gen::inRange<size_t>(0, shape.size());
      shape[d] = *rc::gen::element<nlohmann::json>(0, -3, 2.5, std::numeric_limits<int64_t>::max(),
                                                   std::numeric_limits<uint64_t>::max(), int64_t{1} << 40, "8");
      break;
    }
    case 3:  // a product past 2^50
      if (e["shape"].is_array()) e["shape"].push_back(int64_t{1} << 30);
      break;
    case 4: params.push_back(e); break;                       // a duplicated name
    case 5: e["dtype"] = *rc::gen::element<std::string>("int8", "complex64", "torch.float8", ""); break;
    case 6: e["kind"] = *rc::gen::element<std::string>("matrix", "hidden_matrix", ""); break;
    case 7: params.push_back(other_value()); break;           // an entry that is not an object
    case 8: e["name"] = ""; break;
    default: e["unit"] = *rc::gen::element<std::string>("", "layers.0", "head"); break;
  }
}

RC_GTEST_PROP(BadInput, MalformedSpecsAreRefusedWithAClearError, ()) {
  nlohmann::json spec = valid_spec();
  const int mutations = *rc::gen::inRange(1, 4);
  for (int k = 0; k < mutations; ++k) mutate(spec);
  std::string text = spec.dump();
  if (*rc::gen::inRange(0, 8) == 0) {  // garbage spliced into the text
    const size_t at = *rc::gen::inRange<size_t>(0, text.size());
    text.insert(at, *rc::gen::element<std::string>("}", "[", ",,", "\"", "nan", "\x01"));
  }
  try {
    const ModelSpec m = model_spec_from_json(text, "gen.json");
    for (const ParamSpec& p : m.params) {
      RC_ASSERT(!p.shape.empty());
      int64_t n = 1;
      for (int64_t d : p.shape) {
        RC_ASSERT(d > 0);
        RC_ASSERT(d <= (int64_t{1} << 50) / n);
        n *= d;
      }
    }
    const int W = *rc::gen::inRange(1, 9);
    PlannerOptions o;
    (void)make_plan(m, W, o);  // accepted: it must plan
    RC_TAG("accepted");
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    RC_TAG("refused");
    RC_ASSERT(msg.rfind("model spec", 0) == 0);
    // It names the source file, or the spec's own "name" (which mutations may have changed).
    RC_ASSERT(msg.find("gen.json") != std::string::npos || msg.rfind("model spec '", 0) == 0);
  }
}

RC_GTEST_PROP(BadInput, ExplicitAssignmentsAreCheckedAgainstTheSpecAndTheWorldSize, ()) {
  const ModelSpec m = model_spec_from_json(valid_spec().dump(), "gen.json");
  const int W = *rc::gen::inRange(1, 9);
  PlannerOptions o;
  o.planner = PlannerKind::explicit_assignment;
  for (const ParamSpec& p : m.params) {
    if (p.kind != ParamKind::hidden_matrix) continue;  // owned matrices are what an assignment places
    if (*rc::gen::inRange(0, 10) == 0) continue;         // sometimes one is missing
    o.explicit_owners[p.name] = *rc::gen::inRange(0, 10) == 0
                                    ? *rc::gen::element<int>(-1, W, W + 7, std::numeric_limits<int>::max(),
                                                             std::numeric_limits<int>::min())
                                    : *rc::gen::inRange(0, W);
  }
  if (*rc::gen::inRange(0, 6) == 0) o.explicit_owners["no.such.parameter"] = 0;
  try {
    const OwnershipPlan plan = make_plan(m, W, o);
    for (const MatrixShard& s : plan.shards()) {
      if (s.role != Role::owned_matrix) continue;
      RC_ASSERT(s.owner >= 0 && s.owner < W);
      RC_ASSERT(o.explicit_owners.count(s.name) == 1 && o.explicit_owners.at(s.name) == s.owner);
    }
    RC_TAG("accepted");
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    RC_TAG("refused");
    RC_ASSERT(msg.find("explicit") != std::string::npos || msg.find("assign") != std::string::npos);
  }
}

}  // namespace
}  // namespace mfsdp
