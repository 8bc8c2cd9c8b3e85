// Built with -ffp-contract=off (core/optim/CMakeLists.txt): λ must round like the Python lambda,
// one operation at a time, never fused into an FMA.
#include "core/optim/lr_schedule.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

namespace mfsdp {
namespace {
constexpr int64_t kMaxScheduleSteps = int64_t{1} << 40;  // far beyond any run; t + 1 and W + 1 stay exact in double
constexpr double kPi = 3.141592653589793;                // Python's math.pi (the double nearest π)
}  // namespace

LrScheduleKind lr_schedule_kind_from_string(const std::string& name) {
  return parse_name(kLrScheduleNames, name, "learning-rate schedule");
}

void validate(const LrSchedule& s) {
  auto steps = [](const char* flag, int64_t v) {
    TORCH_CHECK(v >= 0 && v <= kMaxScheduleSteps, flag, " must be an integer from 0 to ", kMaxScheduleSteps, ", got ", v);
  };
  steps("--warmup-steps", s.warmup_steps);
  steps("--stable-steps", s.stable_steps);
  if (s.decay_steps) {
    steps("--decay-steps", *s.decay_steps);
    TORCH_CHECK(*s.decay_steps >= 1, "--decay-steps must be at least 1 (the decay's length), got ", *s.decay_steps);
  }
  TORCH_CHECK(std::isfinite(s.min_lr_ratio) && s.min_lr_ratio >= 0 && s.min_lr_ratio <= 1,
              "--min-lr-ratio must be a number in [0, 1], got ", s.min_lr_ratio);
  const char* kind = to_string(s.kind);
  TORCH_CHECK(s.kind == LrScheduleKind::wsd || s.stable_steps == 0, "--stable-steps is for --lr-schedule wsd, not ", kind);
  if (s.kind == LrScheduleKind::constant) {
    TORCH_CHECK(!s.decay_steps, "--decay-steps is for a decaying schedule, not --lr-schedule constant");
    TORCH_CHECK(s.min_lr_ratio == 0, "--min-lr-ratio is for a decaying schedule, not --lr-schedule constant");
  }
}

int64_t default_decay_steps(const LrSchedule& s, int64_t steps) {
  return std::max<int64_t>(1, steps - s.warmup_steps - s.stable_steps);
}

LrSchedule resolve_decay_steps(LrSchedule s, int64_t steps) {
  if (s.decays() && !s.decay_steps) s.decay_steps = default_decay_steps(s, steps);
  return s;
}

double lr_lambda(const LrSchedule& s, int64_t t) {
  TORCH_CHECK(t >= 0, "lr schedule: step ", t, " < 0");
  // Each line is the Python lambda's (tests/ground truth: stock_pytorch/ground_truth.py), operation
  // for operation: int arithmetic where it is exact, then true division and double arithmetic.
  if (t < s.warmup_steps) return static_cast<double>(t + 1) / static_cast<double>(s.warmup_steps + 1);
  if (!s.decays()) return 1.0;
  TORCH_CHECK(s.decay_steps && *s.decay_steps >= 1, "lr schedule: the decay length was not resolved");
  int64_t since = t - s.warmup_steps;
  if (s.kind == LrScheduleKind::wsd) {
    if (since < s.stable_steps) return 1.0;
    since -= s.stable_steps;
  }
  const double m = s.min_lr_ratio;
  const double p = static_cast<double>(std::min(since, *s.decay_steps)) / static_cast<double>(*s.decay_steps);
  if (s.kind == LrScheduleKind::warmup_cosine) return m + (1 - m) * 0.5 * (1.0 + std::cos(kPi * p));
  return m + (1 - m) * (1.0 - p);  // warmup-linear, and wsd's decay
}

std::string describe(const LrSchedule& s) {
  std::ostringstream out;
  out << to_string(s.kind) << " (warm-up " << s.warmup_steps;
  if (s.kind == LrScheduleKind::wsd) out << ", stable " << s.stable_steps;
  if (s.decays()) {
    out << ", decay ";
    if (s.decay_steps) out << *s.decay_steps;
    else out << "(the steps after warm-up)";
    out << ", min ratio " << s.min_lr_ratio;
  }
  out << ")";
  return out.str();
}

nlohmann::json lr_schedule_to_json(const LrSchedule& s, int64_t steps_taken) {
  nlohmann::json j{{"kind", to_string(s.kind)}, {"warmup_steps", s.warmup_steps}, {"steps_taken", steps_taken}};
  if (s.kind == LrScheduleKind::wsd) j["stable_steps"] = s.stable_steps;
  if (s.decays()) {
    TORCH_CHECK(s.decay_steps, "lr schedule: the decay length was not resolved");
    j["decay_steps"] = *s.decay_steps, j["min_lr_ratio"] = s.min_lr_ratio;
  }
  return j;
}

LrSchedule lr_schedule_from_json(const nlohmann::json& j, int64_t* steps_taken) {
  TORCH_CHECK(j.is_object(), "checkpoint: lr_schedule is not an object");
  auto integer = [&](const char* key, bool required) -> std::optional<int64_t> {
    if (!j.contains(key)) {
      TORCH_CHECK(!required, "checkpoint: lr_schedule lacks '", key, "'");
      return std::nullopt;
    }
    TORCH_CHECK(j[key].is_number_integer(), "checkpoint: lr_schedule '", key, "' is not an integer");
    return j[key].get<int64_t>();
  };
  TORCH_CHECK(j.contains("kind") && j["kind"].is_string(), "checkpoint: lr_schedule lacks its kind");
  for (const auto& [key, value] : j.items())
    TORCH_CHECK(key == "kind" || key == "warmup_steps" || key == "stable_steps" || key == "decay_steps" ||
                    key == "min_lr_ratio" || key == "steps_taken",
                "checkpoint: lr_schedule has an unknown entry '", key, "'");
  LrSchedule s;
  s.kind = lr_schedule_kind_from_string(j["kind"].get<std::string>());
  s.warmup_steps = *integer("warmup_steps", true);
  s.stable_steps = integer("stable_steps", false).value_or(0);
  s.decay_steps = integer("decay_steps", s.decays());
  if (j.contains("min_lr_ratio")) {
    TORCH_CHECK(j["min_lr_ratio"].is_number(), "checkpoint: lr_schedule 'min_lr_ratio' is not a number");
    s.min_lr_ratio = j["min_lr_ratio"].get<double>();
  }
  try {
    validate(s);
  } catch (const c10::Error& e) {  // the same rules, named by the record's keys, not by the flags
    std::string m = e.what_without_backtrace();
    for (const auto& [flag, key] : {std::pair{"--warmup-steps", "warmup_steps"}, std::pair{"--stable-steps", "stable_steps"},
                                    std::pair{"--decay-steps", "decay_steps"}, std::pair{"--min-lr-ratio", "min_lr_ratio"},
                                    std::pair{"--lr-schedule", "kind"}})
      for (size_t at = m.find(flag); at != std::string::npos; at = m.find(flag, at)) m.replace(at, std::strlen(flag), key);
    TORCH_CHECK(false, "checkpoint: lr_schedule: ", m);
  }
  const int64_t taken = *integer("steps_taken", true);
  TORCH_CHECK(taken >= 0 && taken <= kMaxScheduleSteps, "checkpoint: lr_schedule steps_taken ", taken, " is out of range");
  if (steps_taken) *steps_taken = taken;
  return s;
}

}  // namespace mfsdp
