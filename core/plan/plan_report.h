// What `mfsdp plan` reports about a plan, as one JSON object (--json) or as text: the plan's
// summary, HSDP mesh, expert ranges and tied parameters, the per-rank table of the memory model,
// the imbalances, the four placements' memory, and the --recommend sweep when it ran.
#pragma once

#include "core/plan/memory_model.h"
#include "core/plan/model_spec.h"
#include "core/plan/ownership_plan.h"
#include "core/plan/planner.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace mfsdp {

struct PlanReport {
  const ModelSpec& spec;
  const OwnershipPlan& plan;
  const PlannerOptions& options;
  const MemoryModelOptions& memory;  // its replicas, step mode and prefetch are the run's
  const PlanUsage& usage;
  int world_size = 0;  // all R x S ranks
  double plan_seconds = 0;
  std::optional<nlohmann::ordered_json> recommend;  // to_json(recommend_world_size(...)) with hsdp_for_world_size
  double bound = 0;                                 // the --recommend bound
};

nlohmann::ordered_json plan_report_json(const PlanReport& r);
std::string plan_report_text(const PlanReport& r);

}  // namespace mfsdp
