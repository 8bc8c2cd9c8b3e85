// `mfsdp conform`: two trajectory dumps (harness/trajectory_dump.h) compared step by step, bit for
// bit, or within a tolerance model of named sources of difference (docs/conformance.md).
#pragma once

#include "harness/trajectory_dump.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace re2 {
class RE2;
}

namespace mfsdp {

// One source of difference: which values it may excuse and by how much. A differing value is
// within an entry when every one of its elements is: at most max_ulp units in the last place of
// the stored dtype apart (when max_ulp is set) and |candidate - reference| <= atol + rtol |reference|
// (when rtol or atol is set). Differences involving a non-finite value are never within.
struct ToleranceEntry {
  std::string name, reason;
  std::set<std::string> what;  // of kConformKinds; empty = all
  std::string tensors;         // an RE2 regex the whole tensor name must match; empty = all
  std::shared_ptr<const re2::RE2> tensors_re;  // `tensors`, compiled once (linear-time matching)
  std::optional<uint64_t> max_ulp;
  std::optional<double> rtol, atol;
};
inline const std::vector<std::string> kConformKinds = {"loss", "grad_norm", "params", "grads", "state"};

struct Tolerance {
  std::string spec;  // as given
  std::vector<ToleranceEntry> entries;  // tried in order; empty = exact
};
// "exact", "rtol=R,atol=A" (either may be left out: 0) or a JSON file {"entries": [{"name",
// "reason", "what", "tensors", "max_ulp", "rtol", "atol"}]}. Throws naming what is wrong.
Tolerance parse_tolerance(const std::string& spec);

// One compared value: a step's loss or clipping norm, or one tensor of its parameters, gradients
// or optimizer state.
struct ValueResult {
  int64_t step = 0;
  std::string kind;  // one of kConformKinds
  std::string name;  // the tensor's name ("" for loss and grad_norm)
  int64_t numel = 0, mismatches = 0, first_mismatch = -1;
  double max_abs = 0;       // over differing elements (inf when a non-finite value differs)
  uint64_t max_ulp = 0;     // in the stored dtype
  double ref_at_first = 0, cand_at_first = 0;
  std::string entry;        // the tolerance entry that covers it ("" when equal or none does)
  bool equal() const { return mismatches == 0; }
  bool within() const { return equal() || !entry.empty(); }
  std::string what() const;  // "step 3 params layers.0.attn.q.weight", "step 2 loss"
};

struct StepResult {
  int64_t step = 0;
  std::optional<double> ref_loss, cand_loss;
  int values = 0, differing = 0, outside = 0;
  double max_abs = 0;
  uint64_t max_ulp = 0;
  std::set<std::string> entries;  // the entries that covered a difference at this step
  std::string grads_note;         // why gradients were not compared, if they were not
  std::string state_note;         // why optimizer state was not compared, if only one side has it
};

struct ConformReport {
  std::vector<StepResult> steps;
  std::optional<ValueResult> first_difference, first_outside;
  std::map<std::string, int64_t> entry_uses;  // differing values each entry covered
  int64_t values = 0;
  std::vector<std::string> notes;  // what was not compared and why (a format-1 dump has no mesh)
  bool equal() const { return !first_difference; }
  bool within() const { return !first_outside; }
};

// The first path where two JSON values differ, as "path.key: reference A, candidate B" ("" when
// equal); numbers compare by value (2 and 2.0 agree).
std::string json_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path);

// The first compared header field (kComparedFields, the mesh where both dumps have one, then the
// step list) where the two disagree, as "field.path: reference R, candidate C"; "" when they agree.
std::string header_difference(const TrajectoryDump& ref, const TrajectoryDump& cand);

// Compares every listed step. Throws (bad input) when a file is unreadable or truncated, or
// when the two dumps' tensors differ in names, shapes or dtypes.
ConformReport conform(const TrajectoryDump& ref, const TrajectoryDump& cand, const Tolerance& tolerance);

// The verdict and a per-step table, for people; the same as JSON, for machines.
std::string report_text(const ConformReport& r, const Tolerance& tolerance);
nlohmann::json report_json(const ConformReport& r, const Tolerance& tolerance, const TrajectoryDump& ref,
                           const TrajectoryDump& cand);

}  // namespace mfsdp
