#include "core/plan/model_spec.h"

#include "core/util/enum_names.h"
#include "core/util/json_limits.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <algorithm>
#include <map>
#include <cstdint>
#include <set>

namespace mfsdp {

namespace {

constexpr NameTable<ParamKind, 5> kParamKindNames{{{ParamKind::hidden_matrix, "hidden_matrix"},
                                                   {ParamKind::embedding, "embedding"},
                                                   {ParamKind::head, "head"},
                                                   {ParamKind::other, "other"},
                                                   {ParamKind::expert_matrix, "expert_matrix"}}};

}  // namespace

const char* to_string(ParamKind kind) { return checked_name(kParamKindNames, kind); }

ParamKind param_kind_from_string(const std::string& name) { return parse_name(kParamKindNames, name, "parameter kind"); }

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ParamSpec::bytes() const { return numel() * static_cast<int64_t>(c10::elementSize(dtype)); }

int64_t ModelSpec::numel() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

std::vector<std::string> ModelSpec::unit_names() const {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& p : params) {
    if (seen.insert(p.unit).second) names.push_back(p.unit);
  }
  return names;
}

bool supported_dtype(c10::ScalarType dtype) {
  return dtype == c10::kFloat || dtype == c10::kDouble || dtype == c10::kBFloat16 || dtype == c10::kHalf;
}

c10::ScalarType dtype_from_string(const std::string& raw) {
  std::string name = raw.rfind("torch.", 0) == 0 ? raw.substr(6) : raw;
  static const std::map<std::string, c10::ScalarType> names{
      {"float32", c10::kFloat},   {"fp32", c10::kFloat},      {"float", c10::kFloat},
      {"float64", c10::kDouble},  {"fp64", c10::kDouble},     {"double", c10::kDouble},
      {"bfloat16", c10::kBFloat16}, {"bf16", c10::kBFloat16},
      {"float16", c10::kHalf},    {"fp16", c10::kHalf},       {"half", c10::kHalf}};
  auto it = names.find(name);
  TORCH_CHECK(it != names.end(), "unsupported dtype '", raw,
              "' (supported: float32/fp32, bfloat16/bf16, float16/fp16, float64/fp64)");
  return it->second;
}

std::string infer_unit(const std::string& param_name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = param_name.find('.', start);
    parts.push_back(param_name.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  std::string unit;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c); });
    if (i + 1 == parts.size() && !numeric) break;  // the attribute itself ("weight")
    unit += (unit.empty() ? "" : ".") + part;
    if (numeric) return unit;
  }
  return unit.empty() ? param_name : unit;
}

ParamKind infer_kind(const std::string& name, const std::vector<int64_t>& shape) {
  if (shape.size() != 2) return ParamKind::other;
  if (name.find("embed") != std::string::npos || name.find("wte") != std::string::npos ||
      name.find("tok_embeddings") != std::string::npos) {
    return ParamKind::embedding;
  }
  if (name.find("lm_head") != std::string::npos || name.rfind("output.", 0) == 0 ||
      name.find(".output.weight") != std::string::npos) {
    return ParamKind::head;
  }
  return ParamKind::hidden_matrix;
}

namespace {
constexpr int64_t kMaxParamElements = int64_t{1} << 50;
constexpr int64_t kMaxModelElements = int64_t{1} << 52;
}  // namespace

void validate(const ModelSpec& spec) {
  TORCH_CHECK(!spec.params.empty(), "model spec '", spec.name, "': has no parameters");
  std::set<std::string> names;
  std::map<std::string, std::pair<c10::ScalarType, std::string>> unit_dtype;
  int64_t total = 0;
  for (const auto& p : spec.params) {
    TORCH_CHECK(!p.name.empty(), "model spec '", spec.name, "': a parameter has an empty name");
    TORCH_CHECK(names.insert(p.name).second, "model spec '", spec.name, "': parameter '", p.name,
                "' appears twice (list a tied parameter once, with \"also_used_by\" naming the other units that use it)");
    TORCH_CHECK(!p.unit.empty(), "model spec '", spec.name, "': parameter '", p.name, "' is in no unit");
    TORCH_CHECK(!p.shape.empty(), "model spec '", spec.name, "': parameter '", p.name,
                "' is a scalar (0-d); give it shape [1]");
    // Sizes the planner and the memory model can compute with in int64 (bytes, FLOPs, sums over
    // ranks) without overflow: at most 2^50 elements a parameter, 2^52 in all.
    int64_t numel = 1;
    for (int64_t d : p.shape) {
      TORCH_CHECK(d > 0, "model spec '", spec.name, "': parameter '", p.name, "' has a dimension ", d,
                  " (every dimension must be positive)");
      TORCH_CHECK(d <= kMaxParamElements / numel, "model spec '", spec.name, "': parameter '", p.name,
                  "' has more than 2^50 elements (dimension ", d, " after ", numel, "), larger than any model this sizes");
      numel *= d;
    }
    total += numel;
    TORCH_CHECK(total <= kMaxModelElements, "model spec '", spec.name, "': more than 2^52 elements in all (at '", p.name, "')");
    TORCH_CHECK(supported_dtype(p.dtype), "model spec '", spec.name, "': parameter '", p.name,
                "' has unsupported dtype ", c10::toString(p.dtype));
    TORCH_CHECK(p.kind != ParamKind::hidden_matrix || p.shape.size() == 2, "model spec '", spec.name,
                "': parameter '", p.name, "' is marked hidden_matrix but has ", p.shape.size(), " dimensions");
    TORCH_CHECK(p.kind != ParamKind::expert_matrix || p.shape.size() == 3, "model spec '", spec.name,
                "': parameter '", p.name, "' is marked expert_matrix but has ", p.shape.size(),
                " dimensions (expected [experts, out, in])");
    auto [it, inserted] = unit_dtype.emplace(p.unit, std::make_pair(p.dtype, p.name));
    TORCH_CHECK(inserted || it->second.first == p.dtype, "model spec '", spec.name, "': unit '", p.unit,
                "' mixes dtypes: '", it->second.second, "' is ", c10::toString(it->second.first), " but '",
                p.name, "' is ", c10::toString(p.dtype), " (a unit's flat buffer has one dtype)");
  }
  const std::vector<std::string> units = spec.unit_names();
  for (const auto& p : spec.params) {
    const auto own = std::find(units.begin(), units.end(), p.unit);
    for (const std::string& u : p.also_used_by) {
      const auto at = std::find(units.begin(), units.end(), u);
      TORCH_CHECK(at != units.end(), "model spec '", spec.name, "': parameter '", p.name, "' is also used by unit '", u,
                  "', which has no parameters of its own");
      TORCH_CHECK(at > own, "model spec '", spec.name, "': parameter '", p.name, "' of unit '", p.unit,
                  "' is also used by unit '", u, "', which does not come after it (a tied parameter's own unit is its first use)");
      TORCH_CHECK(unit_dtype.at(u).first == p.dtype, "model spec '", spec.name, "': tied parameter '", p.name, "' is ",
                  c10::toString(p.dtype), " but unit '", u, "', which also uses it, is ", c10::toString(unit_dtype.at(u).first));
    }
  }
}

ModelSpec model_spec_from_json(const std::string& text, const std::string& source_name) {
  nlohmann::json doc;
  try {
    doc = parse_json(text, "model spec " + source_name);
  } catch (const nlohmann::json::parse_error& e) {
    TORCH_CHECK(false, "model spec ", source_name, ": malformed JSON: ", e.what());
  }
  const nlohmann::json* list = &doc;
  ModelSpec spec;
  spec.name = source_name;
  if (doc.is_object()) {
    TORCH_CHECK(doc.contains("params"), "model spec ", source_name,
                ": expected a list of parameters or an object with a \"params\" list");
    list = &doc["params"];
    if (doc.contains("name") && doc["name"].is_string()) spec.name = doc["name"].get<std::string>();
  }
  TORCH_CHECK(list->is_array(), "model spec ", source_name, ": \"params\" must be a list");
  for (size_t i = 0; i < list->size(); ++i) {
    const auto& e = (*list)[i];
    auto where = [&](const char* field) {
      return "model spec " + source_name + ": entry " + std::to_string(i) + ", field \"" + field + "\"";
    };
    TORCH_CHECK(e.is_object(), "model spec ", source_name, ": entry ", i, " is not an object");
    TORCH_CHECK(e.contains("name") && e["name"].is_string(), where("name"), ": missing or not a string");
    TORCH_CHECK(e.contains("shape") && e["shape"].is_array(), where("shape"), ": missing or not a list");
    ParamSpec p;
    p.name = e["name"].get<std::string>();
    for (const auto& d : e["shape"]) {
      TORCH_CHECK(d.is_number_integer(), where("shape"), ": '", d.dump(), "' is not an integer");
      TORCH_CHECK(!d.is_number_unsigned() || d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), where("shape"), ": ",
                  d.dump(), " does not fit in a signed 64-bit integer");
      p.shape.push_back(d.get<int64_t>());
    }
    if (e.contains("dtype")) {
      TORCH_CHECK(e["dtype"].is_string(), where("dtype"), ": not a string");
      try {
        p.dtype = dtype_from_string(e["dtype"].get<std::string>());
      } catch (const c10::Error& err) {
        TORCH_CHECK(false, where("dtype"), ": ", err.what_without_backtrace());
      }
    }
    if (e.contains("unit")) {
      TORCH_CHECK(e["unit"].is_string(), where("unit"), ": not a string");
      p.unit = e["unit"].get<std::string>();
    } else {
      p.unit = infer_unit(p.name);
    }
    if (e.contains("kind")) {
      TORCH_CHECK(e["kind"].is_string(), where("kind"), ": not a string");
      try {
        p.kind = param_kind_from_string(e["kind"].get<std::string>());
      } catch (const c10::Error& err) {
        TORCH_CHECK(false, where("kind"), ": ", err.what_without_backtrace());
      }
    } else {
      p.kind = infer_kind(p.name, p.shape);
    }
    if (e.contains("also_used_by")) {  // a tied parameter: the later units that use it too
      TORCH_CHECK(e["also_used_by"].is_array(), where("also_used_by"), ": not a list of unit names");
      for (const auto& u : e["also_used_by"]) {
        TORCH_CHECK(u.is_string(), where("also_used_by"), ": '", u.dump(), "' is not a unit name");
        p.also_used_by.push_back(u.get<std::string>());
      }
    }
    spec.params.push_back(std::move(p));
  }
  validate(spec);
  return spec;
}

}  // namespace mfsdp
