// Checkpoints of the owner runtime (docs/checkpoints.md): written by every rank into a temporary
// directory and committed with one rename; loaded onto any world size, planner, tail policy or
// owner-runtime placement, each rank reading only the byte ranges it needs; consolidated into
// one safetensors file of the model for export.
#pragma once

#include "core/io/checkpoint_format.h"
#include "core/io/load_report.h"
#include "core/runtime/owner_runtime.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mfsdp {

std::string checkpoint_name(int64_t step);  // "step_00000010"

// What a checkpoint records besides the runtime's tensors and plan.
struct CheckpointContext {
  int64_t step = 0;
  std::string placement = "owner";
  nlohmann::json model;       // the model's configuration
  nlohmann::json optimizers;  // kinds, hyperparameters, groups (optimizers_to_json)
  nlohmann::json sampler;     // this rank's data sampler
  nlohmann::json lr_schedule;  // the schedule and the optimizer steps taken (null: none recorded)
  // `latest` may move backwards (a run resumed from an earlier step rolls back); otherwise a
  // `latest` naming a newer step than this one refuses the commit (another run writes here).
  bool allow_rollback = false;
  // Rank 0: throws when the directory's lock was taken from this run (CheckpointDirLock::check_held),
  // checked before the temporary directory is made and again before the commit.
  std::function<void()> check_lock;
  // Fault injection for tests: called after this rank's file is written, before the commit.
  std::function<void()> after_rank_file;
};

nlohmann::json optimizers_to_json(const RuntimeOptions& options);

// Every rank calls it (collective, phase `checkpoint`). Writes root/.step_N.tmp/, then rank 0
// writes layout.json, renames the directory to root/step_N and replaces root/latest atomically; a
// failure or crash at any point leaves the previous checkpoint and `latest` as they were. A
// failure on any rank fails every rank, naming it. Returns the committed directory.
// HSDP (the runtime has replica groups): `world` is the whole mesh, whose rank g = replica * S +
// shard rank writes rank file g; replica 0 writes the parameters, the stepping replica each
// optimizer state (CheckpointMesh), so every tensor is written once.
std::string save_checkpoint(const std::string& root, OwnerRuntime& rt, const CheckpointContext& ctx,
                            Communicator* world = nullptr);

// `path` itself when it holds layout.json, else the checkpoint its `latest` names (checked against
// the layout CRC-32 `latest` records); throws when neither. has_checkpoint: whether `root` has a
// `latest`.
std::string resolve_checkpoint(const std::string& path);
bool has_checkpoint(const std::string& root);

// One parameter's optimizer state (for the rows asked for).
struct OptimizerStateEntry {
  OptimizerKind kind = OptimizerKind::adamw;
  std::map<std::string, at::Tensor> state;
  std::map<std::string, double> scalars;
};

// Reads a checkpoint's tensors by parameter rows, from whichever rank files hold them, verifying
// every byte read. Opens files lazily; counts what it read.
class CheckpointSource {
 public:
  explicit CheckpointSource(std::string dir);
  CheckpointSource(std::string dir, CheckpointLayout layout);
  ~CheckpointSource();

  const CheckpointLayout& layout() const { return layout_; }
  const std::string& dir() const { return dir_; }
  VerifiedFile& file(int rank);

  // Rows [row_begin, row_begin + rows) of parameter `param`, or of its (row-shaped) state.
  at::Tensor rows(const std::string& param, const std::string& state, int64_t row_begin, int64_t rows);
  // The optimizer state of those rows: matrix optimizers' state whole (the rows must be the whole
  // parameter), element-wise state (AdamW, Muon's momentum) assembled from every source slice.
  // nullopt when the checkpoint was written before any step.
  std::optional<OptimizerStateEntry> optimizer_state(const std::string& param, int64_t row_begin, int64_t rows);

  int64_t bytes_read() const;
  int64_t bytes_total() const;  // of every rank file

 private:
  std::string dir_;
  CheckpointLayout layout_;
  std::map<int, std::unique_ptr<VerifiedFile>> files_;
};

// Verifies every byte of the rank files i with i % parts == part against the manifest, and that
// each holds every tensor the layout records there; throws naming the file. Returns the size of
// the files it verified.
int64_t verify_checkpoint_files(const std::string& dir, const CheckpointLayout& layout, int part, int parts);

// Throws naming the checkpoint and the first difference when the checkpoint's parameters (names,
// shapes, dtypes) are not those of `plan`.
void check_same_model(const CheckpointLayout& layout, const OwnershipPlan& plan, const std::string& dir);

// Loads `checkpoint` (a directory with layout.json) into `rt`: parameters and optimizer state of
// what this rank stores. Any world size, planner, tail policy or owner-runtime placement. First
// every file is verified (each by one rank) and nothing is applied unless all passed: a failure
// anywhere fails every rank, naming the rank and the file.
// HSDP: `world` is the whole mesh, as for save_checkpoint; every replica loads the parameters it
// stores, and the optimizer state of what it steps (dedup: only the stepping replica).
LoadReport load_checkpoint(const std::string& checkpoint, OwnerRuntime& rt, Communicator* world = nullptr);

// The whole model (and, if asked, every parameter's whole optimizer state), as CPU tensors, after
// verifying every file of the checkpoint.
struct FullState {
  int64_t step = 0;
  ParamMap params;
  std::map<std::string, OptimizerStateEntry> optimizers;  // absent: not stepped yet
  CheckpointLayout layout;
};
FullState read_full_state(const std::string& checkpoint, bool with_optimizer_state = true);

// The consolidated model, parameters under the model's names, into one safetensors file.
void export_model(const std::string& checkpoint, const std::string& out);

// A readable description of the layout; with `verify`, every file's checksums are checked and
// each file's line says OK or what is wrong. Returns false when something failed verification.
bool inspect_checkpoint(const std::string& checkpoint, bool verify, std::string& report);

}  // namespace mfsdp
