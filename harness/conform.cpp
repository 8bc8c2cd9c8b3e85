#include "harness/conform.h"

#include "core/io/safetensors.h"
#include "core/plan/dtype_names.h"
#include "core/util/files.h"
#include "core/util/json_limits.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <nlohmann/json.hpp>
#include <re2/re2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace mfsdp {
namespace {

// ---- Tolerance -------------------------------------------------------------------------------

// A `tensors` pattern: at most this long, and its compiled automaton at most this large.
constexpr size_t kMaxTensorsPatternBytes = 4096;
constexpr int64_t kTensorsPatternMemory = int64_t{8} << 20;

double parse_double(const std::string& text, const std::string& what) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == text.size() && !text.empty() && std::isfinite(v) && v >= 0, "--tolerance: ", what, " '", text,
              "' is not a finite number >= 0");
  return v;
}

ToleranceEntry entry_of(const nlohmann::json& j, size_t index, const std::string& file) {
  const std::string where = "--tolerance " + file + ": entry " + std::to_string(index);
  TORCH_CHECK(j.is_object(), where, " is not an object");
  static const std::set<std::string> keys = {"name", "reason", "what", "tensors", "max_ulp", "rtol", "atol"};
  for (const auto& [k, v] : j.items()) TORCH_CHECK(keys.count(k), where, ": unknown field '", k, "'");
  ToleranceEntry e;
  TORCH_CHECK(j.contains("name") && j["name"].is_string() && !j["name"].get<std::string>().empty(), where,
              ": needs a non-empty string 'name'");
  e.name = j["name"].get<std::string>();
  TORCH_CHECK(j.contains("reason") && j["reason"].is_string() && !j["reason"].get<std::string>().empty(), where, " ('",
              e.name, "'): needs a non-empty string 'reason' (the source of the difference it excuses)");
  e.reason = j["reason"].get<std::string>();
  if (j.contains("what")) {
    TORCH_CHECK(j["what"].is_array(), where, " ('", e.name, "'): 'what' is not a list");
    for (const auto& w : j["what"]) {
      TORCH_CHECK(w.is_string() && std::count(kConformKinds.begin(), kConformKinds.end(), w.get<std::string>()), where,
                  " ('", e.name, "'): 'what' holds ", w.dump(), "; expected loss, grad_norm, params, grads or state");
      e.what.insert(w.get<std::string>());
    }
  }
  if (j.contains("tensors")) {
    TORCH_CHECK(j["tensors"].is_string(), where, " ('", e.name, "'): 'tensors' is not a string");
    e.tensors = j["tensors"].get<std::string>();
    TORCH_CHECK(e.tensors.size() <= kMaxTensorsPatternBytes, where, " ('", e.name, "'): 'tensors' is ", e.tensors.size(),
                " bytes long; at most ", kMaxTensorsPatternBytes);
    // RE2: matching in time linear in the name, memory bounded by max_mem (a pattern whose
    // automaton needs more is refused here, not run).
    RE2::Options options;
    options.set_log_errors(false);
    options.set_max_mem(kTensorsPatternMemory);
    auto re = std::make_shared<const RE2>(e.tensors, options);
    TORCH_CHECK(re->ok(), where, " ('", e.name, "'): 'tensors' is not a regular expression (RE2 syntax): ", re->error());
    e.tensors_re = std::move(re);
  }
  if (j.contains("max_ulp")) {
    TORCH_CHECK(j["max_ulp"].is_number_unsigned(), where, " ('", e.name, "'): 'max_ulp' is not an integer >= 0");
    e.max_ulp = j["max_ulp"].get<uint64_t>();
  }
  for (const char* k : {"rtol", "atol"}) {
    if (!j.contains(k)) continue;
    TORCH_CHECK(j[k].is_number() && std::isfinite(j[k].get<double>()) && j[k].get<double>() >= 0, where, " ('", e.name, "'): '",
                k, "' is not a finite number >= 0");
    (std::string(k) == "rtol" ? e.rtol : e.atol) = j[k].get<double>();
  }
  TORCH_CHECK(e.max_ulp || e.rtol || e.atol, where, " ('", e.name, "'): gives no bound (max_ulp, rtol or atol)");
  return e;
}

// ---- Element comparison ----------------------------------------------------------------------

// Maps a float's bits onto a monotone line, so |ordered(a) - ordered(b)| counts ULPs.
template <typename Bits>
uint64_t ordered(Bits bits) {
  constexpr Bits sign = Bits(1) << (sizeof(Bits) * 8 - 1);
  return (bits & sign) ? static_cast<uint64_t>(static_cast<Bits>(~bits)) : static_cast<uint64_t>(bits | sign);
}

struct Mismatch {
  double ref, cand;
  uint64_t ulp;
};

template <typename T, typename Bits>
void mismatches_of(const T* ref, const T* cand, int64_t n, std::vector<Mismatch>& out, ValueResult& v) {
  for (int64_t i = 0; i < n; ++i) {
    Bits a, b;
    std::memcpy(&a, &ref[i], sizeof(Bits));
    std::memcpy(&b, &cand[i], sizeof(Bits));
    if (a == b) continue;
    const double r = static_cast<double>(ref[i]), c = static_cast<double>(cand[i]);
    const uint64_t oa = ordered(a), ob = ordered(b);
    const uint64_t ulp = oa > ob ? oa - ob : ob - oa;
    if (v.first_mismatch < 0) v.first_mismatch = i, v.ref_at_first = r, v.cand_at_first = c;
    ++v.mismatches;
    v.max_abs = std::max(v.max_abs, std::isfinite(r) && std::isfinite(c) ? std::fabs(r - c) : INFINITY);
    v.max_ulp = std::max(v.max_ulp, ulp);
    out.push_back({r, c, ulp});
  }
}

bool entry_applies(const ToleranceEntry& e, const ValueResult& v) {
  if (!e.what.empty() && !e.what.count(v.kind)) return false;
  if (!e.tensors.empty() && (v.kind == "loss" || v.kind == "grad_norm" || !RE2::FullMatch(v.name, *e.tensors_re)))
    return false;
  return true;
}

bool entry_covers(const ToleranceEntry& e, const std::vector<Mismatch>& ms) {
  for (const Mismatch& m : ms) {
    if (!std::isfinite(m.ref) || !std::isfinite(m.cand)) return false;
    if (e.max_ulp && m.ulp > *e.max_ulp) return false;
    if ((e.rtol || e.atol) && !(std::fabs(m.cand - m.ref) <= e.atol.value_or(0) + e.rtol.value_or(0) * std::fabs(m.ref)))
      return false;
  }
  return true;
}

void judge(ValueResult& v, const std::vector<Mismatch>& ms, const Tolerance& tol) {
  if (v.equal()) return;
  for (const ToleranceEntry& e : tol.entries)
    if (entry_applies(e, v) && entry_covers(e, ms)) {
      v.entry = e.name;
      return;
    }
}

ValueResult compare_number(int64_t step, const std::string& kind, double ref, double cand, const Tolerance& tol) {
  ValueResult v;
  v.step = step, v.kind = kind, v.numel = 1;
  std::vector<Mismatch> ms;
  mismatches_of<double, uint64_t>(&ref, &cand, 1, ms, v);
  judge(v, ms, tol);
  return v;
}

ValueResult compare_tensor(int64_t step, const std::string& kind, const std::string& name, const at::Tensor& ref,
                           const at::Tensor& cand, const Tolerance& tol) {
  ValueResult v;
  v.step = step, v.kind = kind, v.name = name, v.numel = ref.numel();
  std::vector<Mismatch> ms;
  const at::Tensor a = ref.contiguous(), b = cand.contiguous();
  switch (a.scalar_type()) {
    case at::kFloat: mismatches_of<float, uint32_t>(a.const_data_ptr<float>(), b.const_data_ptr<float>(), v.numel, ms, v); break;
    case at::kDouble: mismatches_of<double, uint64_t>(a.const_data_ptr<double>(), b.const_data_ptr<double>(), v.numel, ms, v); break;
    case at::kBFloat16:
      mismatches_of<c10::BFloat16, uint16_t>(a.const_data_ptr<c10::BFloat16>(), b.const_data_ptr<c10::BFloat16>(), v.numel, ms, v);
      break;
    case at::kHalf: mismatches_of<c10::Half, uint16_t>(a.const_data_ptr<c10::Half>(), b.const_data_ptr<c10::Half>(), v.numel, ms, v); break;
    default: TORCH_CHECK(false, "step ", step, " ", kind, " ", name, ": dtype ", a.scalar_type(), " is not a floating dtype");
  }
  judge(v, ms, tol);
  return v;
}

// Both files' tensors, checked to have the same names, shapes and dtypes (bad input otherwise).
// The tensor names both files hold, sorted; a name in only one of them is bad input for parameters
// and gradients (throws naming it), and listed in `only_ref` / `only_cand` for optimizer state
// (`loose`): two implementations may keep different state.
std::vector<std::string> common_names(const SafetensorsHeader& ref, const SafetensorsHeader& cand, bool loose = false,
                                      std::vector<std::string>* only_ref = nullptr, std::vector<std::string>* only_cand = nullptr) {
  std::vector<std::string> names;
  for (const SafetensorsEntry& e : ref.entries) {
    bool found = false;
    for (const SafetensorsEntry& f : cand.entries) {
      if (f.name != e.name) continue;
      found = true;
      TORCH_CHECK(f.shape == e.shape, "tensor '", e.name, "' has shape ", c10::IntArrayRef(e.shape), " in ", ref.path, " but ",
                  c10::IntArrayRef(f.shape), " in ", cand.path);
      TORCH_CHECK(f.dtype == e.dtype, "tensor '", e.name, "' is ", safetensors_dtype(e.dtype), " in ", ref.path, " but ",
                  safetensors_dtype(f.dtype), " in ", cand.path);
    }
    if (!found && loose) {
      only_ref->push_back(e.name);
      continue;
    }
    TORCH_CHECK(found, "tensor '", e.name, "' of ", ref.path, " is missing from ", cand.path);
    names.push_back(e.name);
  }
  for (const SafetensorsEntry& f : cand.entries) {
    bool found = false;
    for (const SafetensorsEntry& e : ref.entries) found = found || e.name == f.name;
    if (!found && loose) {
      only_cand->push_back(f.name);
      continue;
    }
    TORCH_CHECK(found, "tensor '", f.name, "' of ", cand.path, " is not in ", ref.path, " (not a parameter of the reference)");
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string name_list(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string out;
  for (size_t i = 0; i < names.size() && i < 3; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 3) out += " and " + std::to_string(names.size() - 3) + " more";
  return out;
}

void add_value(ConformReport& r, StepResult& s, const ValueResult& v) {
  ++r.values, ++s.values;
  if (v.equal()) return;
  ++s.differing;
  s.max_abs = std::max(s.max_abs, v.max_abs);
  s.max_ulp = std::max(s.max_ulp, v.max_ulp);
  if (!r.first_difference) r.first_difference = v;
  if (v.within()) {
    s.entries.insert(v.entry);
    ++r.entry_uses[v.entry];
  } else {
    ++s.outside;
    if (!r.first_outside) r.first_outside = v;
  }
}

void compare_files(ConformReport& r, StepResult& s, const std::string& kind, const std::string& ref_path,
                   const std::string& cand_path, const Tolerance& tol) {
  const SafetensorsHeader a = read_safetensors_header(ref_path), b = read_safetensors_header(cand_path);
  std::vector<std::string> only_ref, only_cand;
  for (const std::string& name : common_names(a, b, kind == "state", &only_ref, &only_cand))
    add_value(r, s, compare_tensor(s.step, kind, name, read_safetensors_tensor(a, name), read_safetensors_tensor(b, name), tol));
  if (!only_ref.empty()) s.state_note = "state only the reference keeps, not compared: " + name_list(only_ref);
  if (!only_cand.empty())
    s.state_note += (s.state_note.empty() ? "" : "; ") + std::string("state only the candidate keeps, not compared: ") + name_list(only_cand);
}


std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string full_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string value_line(const ValueResult& v) {
  std::ostringstream out;
  out << v.what() << ": " << v.mismatches << " of " << v.numel << " element(s) differ, max |diff| " << number_text(v.max_abs)
      << ", max " << v.max_ulp << " ULP";
  if (v.first_mismatch >= 0)
    out << "; first at flat index " << v.first_mismatch << ": reference " << full_text(v.ref_at_first) << ", candidate "
        << full_text(v.cand_at_first);
  return out.str();
}

nlohmann::json value_json(const ValueResult& v) {
  return {{"step", v.step},
          {"kind", v.kind},
          {"name", v.name},
          {"numel", v.numel},
          {"mismatches", v.mismatches},
          {"first_mismatch", v.first_mismatch},
          {"max_abs_diff", trajectory_number(v.max_abs)},
          {"max_ulp", v.max_ulp},
          {"reference", trajectory_number(v.ref_at_first)},
          {"candidate", trajectory_number(v.cand_at_first)},
          {"entry", v.entry}};
}

}  // namespace

std::string json_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [k, v] : a.items()) {
      if (!b.contains(k)) return path + "." + k + ": reference " + v.dump() + ", candidate has none";
      const std::string d = json_difference(v, b[k], path + "." + k);
      if (!d.empty()) return d;
    }
    for (const auto& [k, v] : b.items())
      if (!a.contains(k)) return path + "." + k + ": reference has none, candidate " + v.dump();
    return "";
  }
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string d = json_difference(a[i], b[i], path + "[" + std::to_string(i) + "]");
      if (!d.empty()) return d;
    }
    return "";
  }
  if (a.is_number() && b.is_number() && a.get<double>() == b.get<double>()) return "";
  return a == b ? "" : path + ": reference " + a.dump() + ", candidate " + b.dump();
}

std::string ValueResult::what() const {
  return "step " + std::to_string(step) + " " + kind + (name.empty() ? "" : " " + name);
}

Tolerance parse_tolerance(const std::string& spec) {
  Tolerance t;
  t.spec = spec;
  if (spec == "exact") return t;
  if (spec.rfind("rtol=", 0) == 0 || spec.rfind("atol=", 0) == 0) {
    ToleranceEntry e;
    e.name = spec;
    e.reason = "given on the command line";
    std::stringstream parts(spec);
    std::string part;
    while (std::getline(parts, part, ',')) {
      const size_t eq = part.find('=');
      const std::string key = part.substr(0, eq), value = eq == std::string::npos ? "" : part.substr(eq + 1);
      TORCH_CHECK(key == "rtol" || key == "atol", "--tolerance: '", part, "' in '", spec, "' is not rtol=R or atol=A");
      TORCH_CHECK(!(key == "rtol" ? e.rtol : e.atol), "--tolerance: ", key, " is given twice in '", spec, "'");
      (key == "rtol" ? e.rtol : e.atol) = parse_double(value, key);
    }
    t.entries.push_back(e);
    return t;
  }
  TORCH_CHECK(path_exists(spec), "--tolerance: '", spec, "' is not 'exact', 'rtol=R,atol=A' or an existing JSON file");
  const std::string text = read_file(spec, "--tolerance", int64_t{1} << 20);
  nlohmann::json j;
  try {
    j = parse_json(text, "--tolerance " + spec);
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "--tolerance ", spec, ": not valid JSON: ", e.what());
  }
  TORCH_CHECK(j.is_object() && j.contains("entries") && j["entries"].is_array() && !j["entries"].empty(), "--tolerance ", spec,
              ": expected {\"entries\": [...]} with at least one entry");
  for (const auto& [k, v] : j.items())
    TORCH_CHECK(k == "entries" || k == "about", "--tolerance ", spec, ": unknown field '", k, "' (a file has 'entries' and may have 'about')");
  std::set<std::string> names;
  for (size_t i = 0; i < j["entries"].size(); ++i) {
    t.entries.push_back(entry_of(j["entries"][i], i, spec));
    TORCH_CHECK(names.insert(t.entries.back().name).second, "--tolerance ", spec, ": entry name '", t.entries.back().name,
                "' is used twice");
  }
  return t;
}

std::string header_difference(const TrajectoryDump& ref, const TrajectoryDump& cand) {
  for (const std::string& f : kComparedFields) {
    const std::string d = json_difference(ref.header.at(f), cand.header.at(f), f);
    if (!d.empty()) return d;
  }
  if (ref.has_mesh() && cand.has_mesh()) {
    const std::string d = json_difference(ref.header.at(kMeshField), cand.header.at(kMeshField), kMeshField);
    if (!d.empty()) return d + " (the gradient sums are grouped differently: the runs are not comparable)";
  }
  const auto& a = ref.steps;
  const auto& b = cand.steps;
  if (a.front().step != b.front().step)
    return "steps: the reference starts at step " + std::to_string(a.front().step) + ", the candidate at step " +
           std::to_string(b.front().step);
  if (a.size() != b.size())
    return "steps: the reference lists steps " + std::to_string(a.front().step) + ".." + std::to_string(a.back().step) +
           ", the candidate " + std::to_string(b.front().step) + ".." + std::to_string(b.back().step);
  return "";
}

ConformReport conform(const TrajectoryDump& ref, const TrajectoryDump& cand, const Tolerance& tol) {
  TORCH_CHECK(header_difference(ref, cand).empty(), "the headers disagree: ", header_difference(ref, cand));
  ConformReport r;
  if (ref.has_mesh() != cand.has_mesh())
    r.notes.push_back(std::string("mesh not compared: the ") + (ref.has_mesh() ? "candidate" : "reference") +
                      " is a format-1 dump, which records none");
  for (size_t i = 0; i < ref.steps.size(); ++i) {
    const TrajectoryStep& a = ref.steps[i];
    const TrajectoryStep& b = cand.steps[i];
    StepResult s;
    s.step = a.step;
    s.ref_loss = a.loss, s.cand_loss = b.loss;
    TORCH_CHECK(a.loss.has_value() == b.loss.has_value(), "step ", a.step, ": only the ", a.loss ? "reference" : "candidate",
                " records a loss");
    if (a.loss) add_value(r, s, compare_number(s.step, "loss", *a.loss, *b.loss, tol));
    if (a.grad_norm && b.grad_norm) add_value(r, s, compare_number(s.step, "grad_norm", *a.grad_norm, *b.grad_norm, tol));
    else if (a.grad_norm.has_value() != b.grad_norm.has_value())
      TORCH_CHECK(false, "step ", a.step, ": only the ", a.grad_norm ? "reference" : "candidate", " records a clipping norm");
    if (!a.grads.empty() && !b.grads.empty())
      compare_files(r, s, "grads", ref.dir + "/" + a.grads, cand.dir + "/" + b.grads, tol);
    else if (!a.grads.empty() || !b.grads.empty())
      s.grads_note = std::string("gradients not compared: only the ") + (a.grads.empty() ? "candidate" : "reference") + " has them";
    if (!a.state.empty() && !b.state.empty())
      compare_files(r, s, "state", ref.dir + "/" + a.state, cand.dir + "/" + b.state, tol);
    else if (!a.state.empty() || !b.state.empty())
      s.state_note = std::string("optimizer state not compared: only the ") + (a.state.empty() ? "candidate" : "reference") +
                     " has it";
    compare_files(r, s, "params", ref.dir + "/" + a.params, cand.dir + "/" + b.params, tol);
    r.steps.push_back(s);
  }
  return r;
}

std::string report_text(const ConformReport& r, const Tolerance& tol) {
  std::ostringstream out;
  out << "step  reference loss        candidate loss        values  differ  outside  max |diff|     max ULP  covered by\n";
  for (const StepResult& s : r.steps) {
    char line[256];
    std::snprintf(line, sizeof(line), "%4lld  %-20s  %-20s  %6d  %6d  %7d  %-13s  %7llu  ", static_cast<long long>(s.step),
                  s.ref_loss ? full_text(*s.ref_loss).c_str() : "-", s.cand_loss ? full_text(*s.cand_loss).c_str() : "-", s.values,
                  s.differing, s.outside, s.differing ? number_text(s.max_abs).c_str() : "0",
                  static_cast<unsigned long long>(s.max_ulp));
    std::string covered;
    for (const std::string& e : s.entries) covered += (covered.empty() ? "" : ", ") + e;
    out << line << (covered.empty() ? "-" : covered) << (s.grads_note.empty() ? "" : "  (" + s.grads_note + ")")
        << (s.state_note.empty() ? "" : "  (" + s.state_note + ")") << "\n";
  }
  out << "\n";
  for (const std::string& n : r.notes) out << "note: " << n << "\n";
  if (r.equal()) {
    out << "conform: BITWISE EQUAL: " << r.values << " values over " << r.steps.size() << " steps\n";
    return out.str();
  }
  out << "first difference: " << value_line(*r.first_difference) << "\n";
  if (r.within()) {
    out << "conform: WITHIN TOLERANCE (" << tol.spec << "): every difference is covered by an entry:\n";
    for (const ToleranceEntry& e : tol.entries)
      if (r.entry_uses.count(e.name))
        out << "  " << e.name << ": " << r.entry_uses.at(e.name) << " value(s); " << e.reason << "\n";
  } else {
    out << "first outside the tolerance: " << value_line(*r.first_outside) << "\n";
    out << "conform: NOT EQUAL" << (tol.entries.empty() ? " (exact comparison)" : " and not within the tolerance (" + tol.spec + ")")
        << "\n";
  }
  return out.str();
}

nlohmann::json report_json(const ConformReport& r, const Tolerance& tol, const TrajectoryDump& ref, const TrajectoryDump& cand) {
  nlohmann::json j{{"reference", ref.dir},
                   {"candidate", cand.dir},
                   {"tolerance", tol.spec},
                   {"verdict", r.equal() ? "equal" : r.within() ? "within_tolerance" : "differs"},
                   {"values", r.values},
                   {"entry_uses", r.entry_uses},
                   {"notes", r.notes}};
  if (r.first_difference) j["first_difference"] = value_json(*r.first_difference);
  if (r.first_outside) j["first_outside"] = value_json(*r.first_outside);
  j["steps"] = nlohmann::json::array();
  for (const StepResult& s : r.steps) {
    nlohmann::json e{{"step", s.step},       {"values", s.values},   {"differing", s.differing},
                     {"outside", s.outside}, {"max_ulp", s.max_ulp}, {"max_abs_diff", trajectory_number(s.max_abs)},
                     {"entries", s.entries}};
    if (s.ref_loss) e["reference_loss"] = trajectory_number(*s.ref_loss);
    if (s.cand_loss) e["candidate_loss"] = trajectory_number(*s.cand_loss);
    if (!s.grads_note.empty()) e["note"] = s.grads_note;
    if (!s.state_note.empty()) e["state_note"] = s.state_note;
    j["steps"].push_back(e);
  }
  return j;
}

}  // namespace mfsdp
