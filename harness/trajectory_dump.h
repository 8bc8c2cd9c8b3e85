// The conformance trajectory format (docs/conformance.md): what any implementation writes so that
// `mfsdp conform` can check it against the reference, step by step.
//
//   DIR/trajectory.json               the header and the step list (below)
//   DIR/params_00000000.safetensors   every parameter in full under the model's names, before step 1
//   DIR/params_0000000N.safetensors   ... after step N
//   DIR/grads_0000000N.safetensors    optional: step N's gradients as its update used them
//
// trajectory.json: {"format": "mfsdp-trajectory", "format_version": 1, "producer": free text,
// "complete": bool, the compared fields (kComparedFields: model, optimizer, world_size, precision,
// seed, data, max_norm, lr_schedule) and "steps": [{"step": N, "params": FILE, "grads": FILE
// (optional), "loss": the mean of the ranks' losses (absent for the state before step 1),
// "grad_norm": the clipping norm (optional)}]. Non-finite numbers are the strings "nan", "inf" and
// "-inf" (JSON has none). The header is rewritten atomically after every step, so an interrupted
// run leaves a readable dump that says it is incomplete.
#pragma once

#include "core/runtime/param_map.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

struct TrainConfig;
struct RankContext;

constexpr const char* kTrajectoryFormat = "mfsdp-trajectory";
constexpr int kTrajectoryFormatVersion = 1;
constexpr const char* kTrajectoryHeaderFile = "trajectory.json";
// The header fields two dumps must agree on before their steps are compared.
inline const std::vector<std::string> kComparedFields = {"model",     "optimizer", "world_size", "precision",
                                                         "seed",      "data",      "max_norm",   "lr_schedule"};

// The header of a run of `config` on `world_size` ranks (without "steps" and "complete").
nlohmann::json trajectory_header(const TrainConfig& config, int world_size, const std::string& producer);

struct TrajectoryStep {
  int64_t step = 0;
  std::optional<double> loss, grad_norm;
  std::string params, grads;  // file names inside the dump ("" = none)
};

// Writes a dump as a run goes (rank 0). The directory must be absent or empty.
class TrajectoryWriter {
 public:
  TrajectoryWriter(std::string dir, nlohmann::json header);
  void add(const TrajectoryStep& step, const ParamMap& params, const ParamMap* grads);
  void finish();  // marks the dump complete

 private:
  void write_header(bool complete);
  std::string dir_;
  nlohmann::json header_;
  std::vector<TrajectoryStep> steps_;
};

// A run's dump (mfsdp train --dump-trajectory): rank 0 opens a writer for `dir` with the header of
// `config`, every rank fails together when it cannot (a directory that holds anything, one that
// cannot be created), and config.on_full_state feeds it every step, the state before the first
// included (with config.full_grads when `grads`). Returns the writer on rank 0 (null elsewhere):
// keep it for the run and finish() it after.
std::unique_ptr<TrajectoryWriter> attach_trajectory_dump(RankContext& ctx, TrainConfig& config, const std::string& dir,
                                                         bool grads, const std::string& producer);

struct TrajectoryDump {
  std::string dir;
  nlohmann::json header;
  std::vector<TrajectoryStep> steps;  // in step order
};

// Reads and checks a dump's header: the format, the compared fields present, the step list
// consecutive and each listed file present. Throws naming the dump and what is wrong.
TrajectoryDump read_trajectory(const std::string& dir);

// A double as the format stores it: a number, or "nan" / "inf" / "-inf".
nlohmann::json trajectory_number(double v);
double trajectory_number_of(const nlohmann::json& j, const std::string& what);

}  // namespace mfsdp
