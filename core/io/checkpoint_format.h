// The on-disk checkpoint format (docs/checkpoints.md): a directory with layout.json and one
// safetensors file per rank. This file holds the format itself — the layout record, its strict
// parser, the checksums and a reader that verifies every byte it returns — and nothing of the
// runtime, so the readers can be fuzzed on their own (regression/fuzz/fuzz_readers.cpp).
#pragma once

#include "core/plan/optimizer_config.h"
#include "core/plan/ownership_plan.h"
#include "core/plan/plan_json.h"
#include "core/io/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mfsdp {

constexpr const char* kCheckpointFormat = "mfsdp-checkpoint";
// Version 2 seals layout.json with its own checksum (layout_crc32) and binds `latest` to the
// layout it names; version 1 (no seal) is still read, its rank files verified as before.
// Version 3 records the precision policy; version 4 the HSDP mesh (one rank file per rank of the
// whole mesh, each tensor written once).
constexpr int kCheckpointFormatVersion = 4;
constexpr int kOldestReadableFormatVersion = 1;
// Chunk checksums: 4 KiB chunks, doubled until a file has at most 1024 of them, so a reader of a
// few byte ranges verifies (and reads) at most two chunks more per range than it needs.
constexpr int64_t kMinChecksumChunkBytes = 4 << 10;
constexpr int64_t kMaxChecksumChunks = 1024;
int64_t chunk_bytes_for(int64_t file_bytes);

// A file of the checkpoint: its size, its CRC-32 and one CRC-32 per kChecksumChunkBytes chunk
// (so a reader that needs a few byte ranges verifies just the chunks holding them).
struct FileManifest {
  std::string file;  // a plain name inside the checkpoint directory
  int64_t bytes = 0;
  uint32_t crc32 = 0;
  int64_t chunk_bytes = kMinChecksumChunkBytes;
  std::vector<uint32_t> chunk_crc32;
};
// Reads `dir`/`file` once, in chunks.
FileManifest compute_manifest(const std::string& dir, const std::string& file);

// One tensor of a rank file: a parameter's rows or the optimizer state of those rows.
struct CheckpointTensor {
  std::string tensor;  // its name in the file: "<param>|param|rows=B:E" or "<param>|state.<name>|rows=B:E"
  std::string param;
  std::string state;   // empty for the parameter itself, else the optimizer state's name
  int64_t row_begin = 0, rows = 0;  // the parameter rows it belongs to
};

// The optimizer that stepped rows [row_begin, row_begin + rows) of a parameter on one rank.
struct CheckpointOptimizer {
  std::string param;
  OptimizerKind kind = OptimizerKind::adamw;
  int64_t row_begin = 0, rows = 0;
  std::map<std::string, double> scalars;  // e.g. the step count
};

struct CheckpointRank {
  int rank = 0;
  std::string file;
  nlohmann::json sampler;   // the data sampler's state (seed, next step, batch, corpus)
  std::string rng_tensor;   // the tensor holding the CPU generator's state, "" if none
  std::vector<CheckpointTensor> tensors;
  std::vector<CheckpointOptimizer> optimizers;
};

// The HSDP mesh a checkpoint was written on (format 4; earlier formats: one replica group). The
// plan is the shard group's; rank file g = replica * S + shard rank. The parameters are written
// once, by replica 0; each optimizer state once, by the replica that steps it (replicated: 0;
// dedup: the stepping replica), so the files of the other replicas may hold nothing.
struct CheckpointMesh {
  int replicas = 1;
  std::string step_mode = "replicated";  // kStepModeNames
};

struct CheckpointLayout {
  int format_version = kCheckpointFormatVersion;
  int64_t step = 0;
  std::string torch_version;
  std::string placement;
  std::shared_ptr<const OwnershipPlan> plan;  // world size, planner, tail policy, shards, segments
  nlohmann::json model;       // the model's configuration
  nlohmann::json optimizers;  // kinds and hyperparameters, parameter groups
  // The precision policy the run trained under (format 3; precision_to_json). Read from older
  // formats as the float32 policy they all ran: the stored tensors are float32 masters either way.
  nlohmann::json precision;
  // The learning-rate schedule and the optimizer steps taken (lr_schedule_to_json); null when the
  // writer recorded none (earlier checkpoints: a constant rate, every step taken).
  nlohmann::json lr_schedule;
  CheckpointMesh mesh;
  std::vector<CheckpointRank> ranks;  // one per rank of the mesh (world_size()), in rank order
  std::vector<FileManifest> manifest;  // one per rank file

  int world_size() const { return mesh.replicas * plan->world_size(); }  // rank files: R x S
  int shard_rank(int rank) const { return rank % plan->world_size(); }
  const FileManifest& manifest_of(const std::string& file) const;
};

nlohmann::json to_json(const CheckpointRank& rank);
nlohmann::json to_json(const FileManifest& manifest);
std::string layout_to_json(const CheckpointLayout& layout);
// The same with the rank records and the manifest given as JSON (as the ranks sent them).
std::string layout_json(const CheckpointLayout& layout, const std::vector<nlohmann::json>& ranks,
                        const std::vector<nlohmann::json>& manifest);
// Parses layout.json strictly: every field present with its type, the plan valid, every record
// consistent with it (names, row ranges, ranks, files), file names plain. Throws naming `path`.
// Format 2 checks the seal first (check_layout_seal): a layout.json with any byte changed is refused.
CheckpointLayout parse_layout(const std::string& text, const std::string& path);
CheckpointLayout read_layout(const std::string& checkpoint_dir);

// The seal of layout.json: its last field, "layout_crc32": "<8 hex digits>", is the CRC-32 of the
// whole text with those 8 digits written as "00000000". seal_layout fills it in (the text must
// hold exactly one such field); check_layout_seal throws, naming `path`, unless it matches.
std::string seal_layout(std::string text);
void check_layout_seal(const std::string& text, const std::string& path);

// `latest` (format 2): the step directory's name, then "layout_crc32 <8 hex digits>" of its
// layout.json, one per line, so a `latest` that was damaged or names another step is refused.
std::string latest_text(const std::string& step_name, const std::string& layout_text);
// "step_<digits>" (at most 18 digits) -> the number; nullopt otherwise.
std::optional<int64_t> parse_step_name(const std::string& name);
struct LatestRecord {
  std::string name;
  bool has_layout_crc32 = false;  // false: written before format 2 (the name alone)
  uint32_t layout_crc32 = 0;
};
LatestRecord parse_latest(const std::string& text, const std::string& path);

// A checkpoint file whose every returned byte was checked against the manifest: a read fetches the
// whole chunks around the range and verifies their CRC-32s; the file's size is checked on open.
class VerifiedFile {
 public:
  VerifiedFile(const std::string& dir, const FileManifest& manifest);
  ~VerifiedFile();
  VerifiedFile(const VerifiedFile&) = delete;
  VerifiedFile& operator=(const VerifiedFile&) = delete;

  // Fills n bytes at `offset` (whole chunks read and verified; a few recent ones cached).
  void read(void* out, size_t n, int64_t offset);
  // Streams the whole file, checking every chunk and the file's CRC-32.
  void verify_all();
  const SafetensorsHeader& header();  // parsed (once) from verified bytes
  at::Tensor read_rows(const std::string& tensor, int64_t row_begin, int64_t rows);
  at::Tensor read_tensor(const std::string& tensor);
  int64_t bytes_read() const { return bytes_read_; }  // from the disk, chunks included
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FileManifest manifest_;
  int fd_ = -1;
  int64_t bytes_read_ = 0;
  std::unique_ptr<SafetensorsHeader> header_;
  static constexpr size_t kCachedChunks = 4;
  std::vector<std::pair<int64_t, std::vector<char>>> cache_;
  const std::vector<char>& chunk(int64_t c);  // read, verified, cached
};

}  // namespace mfsdp
