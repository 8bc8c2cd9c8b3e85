// An OwnershipPlan as JSON (checkpoints record it whole): every shard, slice and segment, the
// planner, the tail policy and the hash. The reader is strict and bounded: it accepts what
// plan_to_json wrote, refuses anything else naming the field, and the plan it rebuilds validates
// itself and must hash to the recorded hash.
#pragma once

#include "core/plan/ownership_plan.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace mfsdp {

// Bound on element counts and offsets read from a file: arithmetic on them cannot overflow.
constexpr int64_t kMaxPlanElements = int64_t{1} << 50;

nlohmann::json plan_to_json(const OwnershipPlan& plan);
// Throws "<kind>: '<path>': plan.<field>: ..." naming the bad field.
OwnershipPlan plan_from_json(const nlohmann::json& j, const std::string& path, const char* kind = "checkpoint");

}  // namespace mfsdp
