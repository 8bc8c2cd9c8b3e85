// The conformance trajectory format (docs/conformance.md): what any implementation writes so that
// `mfsdp conform` can check it against the reference, step by step.
//
//   DIR/trajectory.json               the header and the step list (below)
//   DIR/params_00000000.safetensors   every parameter in full under the model's names, before step 1
//   DIR/params_0000000N.safetensors   ... after step N
//   DIR/grads_0000000N.safetensors    optional: step N's gradients as its update used them
//   DIR/state_0000000N.safetensors    optional (format 2): the optimizer state after step N, each
//                                     tensor under its parameter's name and a suffix
//                                     (layers.0.attn.q.weight.momentum_buffer, embed.weight.exp_avg;
//                                     counters such as embed.weight.step as 0-d float32 tensors)
//
// trajectory.json: {"format": "mfsdp-trajectory", "format_version": 2 (1 is read too), "producer":
// free text, "complete": bool, the compared fields (kComparedFields: model, optimizer, world_size,
// precision, seed, data, max_norm, lr_schedule; format 2 adds "mesh": {"replicas", "shard_group",
// "step_mode"}, compared where both dumps have it), optionally "replay" (format 2: the dump is a
// one-step replay of a reference, see harness/replay.h) and "steps": [{"step": N, "params": FILE,
// "grads": FILE (optional), "state": FILE (optional), "loss": the mean of the ranks' losses (absent
// for the state before step 1), "grad_norm": the clipping norm (optional)}]. Non-finite numbers are
// the strings "nan", "inf" and "-inf" (JSON has none). The header is rewritten atomically after
// every step, so an interrupted run leaves a readable dump that says it is incomplete.
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
constexpr int kTrajectoryFormatVersion = 2;  // what the writer writes; the reader takes 1 and 2
constexpr const char* kTrajectoryHeaderFile = "trajectory.json";
// The header fields two dumps must agree on before their steps are compared.
inline const std::vector<std::string> kComparedFields = {"model",     "optimizer", "world_size", "precision",
                                                         "seed",      "data",      "max_norm",   "lr_schedule"};
// Format 2's mesh of the gradient reduction: {"replicas": R, "shard_group": W / R, "step_mode"}; a
// flat run (DDP, FSDP2 on one mesh dimension, mfsdp without --replicas) is replicas 1.
constexpr const char* kMeshField = "mesh";
nlohmann::json mesh_json(int replicas, int world_size, const std::string& step_mode);

// The header of a run of `config` on `world_size` ranks (without "steps" and "complete").
nlohmann::json trajectory_header(const TrainConfig& config, int world_size, const std::string& producer);

struct TrajectoryStep {
  int64_t step = 0;
  std::optional<double> loss, grad_norm;
  std::string params, grads, state;  // file names inside the dump ("" = none)
};

// Writes a dump as a run goes (rank 0). The directory must be absent or empty.
class TrajectoryWriter {
 public:
  TrajectoryWriter(std::string dir, nlohmann::json header);
  void add(const TrajectoryStep& step, const ParamMap& params, const ParamMap* grads, const ParamMap* state = nullptr);
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
// included (with config.full_grads when `grads`, config.full_state when `state`). Returns the
// writer on rank 0 (null elsewhere): keep it for the run and finish() it after.
std::unique_ptr<TrajectoryWriter> attach_trajectory_dump(RankContext& ctx, TrainConfig& config, const std::string& dir,
                                                         bool grads, const std::string& producer, bool state = false);

struct TrajectoryDump {
  std::string dir;
  nlohmann::json header;
  std::vector<TrajectoryStep> steps;  // in step order
  int version() const;
  bool has_mesh() const;
  bool is_replay() const;  // a one-step replay (harness/replay.h)
  const TrajectoryStep* step(int64_t n) const;  // null when not listed
};

// Reads and checks a dump's header: the format (version 1 or 2), the compared fields present (and
// the mesh in version 2), the step list consecutive and each listed file present. Throws naming the
// dump and what is wrong.
TrajectoryDump read_trajectory(const std::string& dir);

// A double as the format stores it: a number, or "nan" / "inf" / "-inf".
nlohmann::json trajectory_number(double v);
double trajectory_number_of(const nlohmann::json& j, const std::string& what);

}  // namespace mfsdp
