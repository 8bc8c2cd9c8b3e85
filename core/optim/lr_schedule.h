// Learning-rate schedules (docs/schedules.md): lr_t = base_lr · λ(t) for every optimizer and
// parameter group alike, t = the optimizer steps taken so far (a step skipped for non-finite
// gradients takes none). Each λ is a closed form of the schedule's own settings only, evaluated in
// double in the operation order of the Python lambda the stock-PyTorch ground truth hands
// torch.optim.lr_scheduler.LambdaLR (regression/stock_pytorch/), so the two are bitwise equal.
#pragma once

#include "core/util/enum_names.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace mfsdp {

enum class LrScheduleKind { constant, warmup_cosine, warmup_linear, wsd };
constexpr NameTable<LrScheduleKind, 4> kLrScheduleNames{{{LrScheduleKind::constant, "constant"},
                                                         {LrScheduleKind::warmup_cosine, "warmup-cosine"},
                                                         {LrScheduleKind::warmup_linear, "warmup-linear"},
                                                         {LrScheduleKind::wsd, "wsd"}}};
inline const char* to_string(LrScheduleKind kind) { return checked_name(kLrScheduleNames, kind); }
LrScheduleKind lr_schedule_kind_from_string(const std::string& name);  // throws naming the known ones

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::constant;
  int64_t warmup_steps = 0;  // W: λ(t) = (t + 1) / (W + 1) for t < W
  int64_t stable_steps = 0;  // S (wsd): λ = 1 for W <= t < W + S
  // D: the decay's length; unset until the run resolves it (resolve_decay_steps).
  std::optional<int64_t> decay_steps;
  double min_lr_ratio = 0;  // m: λ's floor after the decay, in [0, 1]

  bool decays() const { return kind != LrScheduleKind::constant; }
};

// Whether λ is ever other than 1 (a decaying schedule, or a warm-up).
inline bool scheduled(const LrSchedule& s) { return s.decays() || s.warmup_steps > 0; }

// Throws naming the flag and value (warm-up, stable or decay steps < 0 or out of range, a decay of
// 0 steps, a min-lr ratio outside [0, 1], settings a schedule does not take).
void validate(const LrSchedule& s);

// The decay length a fresh run of `steps` steps gets when none was given: the steps left after
// warm-up (and wsd's stable phase), at least 1. Fixed from then on (checkpoints record it), so a
// resume that extends --steps keeps the schedule.
int64_t default_decay_steps(const LrSchedule& s, int64_t steps);
LrSchedule resolve_decay_steps(LrSchedule s, int64_t steps);

// λ(t), t >= 0 the optimizer steps taken (the schedule's decay length must be resolved).
double lr_lambda(const LrSchedule& s, int64_t t);

// One line for logs: "warmup-cosine (warm-up 2, decay 8, min ratio 0)".
std::string describe(const LrSchedule& s);

// Checkpoints: the schedule and the optimizer steps taken, as layout.json's "lr_schedule".
nlohmann::json lr_schedule_to_json(const LrSchedule& s, int64_t steps_taken);
// Throws naming the entry on a malformed record.
LrSchedule lr_schedule_from_json(const nlohmann::json& j, int64_t* steps_taken);

}  // namespace mfsdp
