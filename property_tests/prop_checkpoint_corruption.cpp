// No corrupted checkpoint is ever loaded, by any reader: random bytes flipped anywhere in any file
// of a checkpoint (a rank file's safetensors header, its first, middle or last checksum chunk, or
// anywhere in it; layout.json; latest) are refused by every read path — a resume at the same world
// size and plan, a resharded resume (another W, planner and tail policy), the DDP oracle's
// consolidation, export and inspect — with an error naming the damaged file, on every rank, and
// nothing written. The pristine copy passes every path (so a refusal is the corruption's doing).
// The same over an HSDP checkpoint (2 replica groups x 2, dedup: four rank files, each tensor in
// one of them), whose read paths are a resume on the same mesh, resharded resumes onto another mesh
// (1 x 3, 2 x 1), the consolidation, export and inspect: every file is verified by every load,
// whichever mesh rank reads it.
// Replay a failure with RC_PARAMS="seed=<printed seed>".
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/dist/rank_agreement.h"
#include "core/dist/ranks.h"
#include "core/io/checkpoint.h"
#include "core/util/errors.h"
#include "core/util/files.h"
#include "harness/placements.h"
#include "testing/fixtures.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mfsdp {
namespace {

constexpr int kSteps = 2;

// The checkpoint that gets corrupted: flat (W = 3) or HSDP (2 x 2, dedup).
enum class Source { flat, hsdp };
int written_world(Source s) { return s == Source::flat ? 3 : 4; }

TrainConfig base_config() {
  return tiny_config({.steps = kSteps, .batch = 1, .seed = 9});
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  TORCH_CHECK(out.good(), "cannot write ", path);
}

// A Muon checkpoint directory with steps 1 and 2 (`latest` names step 2), written once per source
// and removed when the test program ends.
const std::string& pristine(Source source) {
  static const TempDir flat("corrupt_pristine"), hsdp("corrupt_pristine_hsdp");
  const TempDir& made = source == Source::flat ? flat : hsdp;
  static bool written[2] = {false, false};
  if (!written[static_cast<int>(source)]) {
    TrainConfig c = base_config();
    c.checkpoint_dir = made.path();
    c.checkpoint_every = 1;
    if (source == Source::hsdp) c.runtime.replicas = 2, c.runtime.step_mode = StepMode::dedup;
    RanksOptions ranks;
    ranks.world_size = written_world(source);
    run_ranks_as_threads(ranks, [&](RankContext& ctx) { train_placement(ctx, c); });
    written[static_cast<int>(source)] = true;
  }
  return made.path();
}

// The files of one step: a rank file per written rank, then layout.json.
std::vector<std::string> step_files(Source source) {
  std::vector<std::string> files;
  for (int r = 0; r < written_world(source); ++r) {
    char name[32];
    std::snprintf(name, sizeof(name), "rank_%05d.safetensors", r);
    files.push_back(name);
  }
  files.push_back("layout.json");
  return files;
}

// A fresh copy of the pristine checkpoint directory, removed when it goes out of scope (also when a
// check throws: RC_FAIL, RC_PRE).
std::unique_ptr<TempDir> copy_pristine(Source source) {
  auto copy = std::make_unique<TempDir>("corrupt_case");
  const std::string& d = copy->path();
  spit(d + "/latest", read_file(pristine(source) + "/latest", "test"));
  for (const char* step : {"/step_00000001", "/step_00000002"}) {
    make_dirs(d + step);
    for (const std::string& f : step_files(source)) spit(d + step + "/" + f, read_file(pristine(source) + step + "/" + f, "test"));
  }
  return copy;
}

// One read path: returns "" when it loaded, else every error it raised (one per failing rank).
struct ReadPath {
  std::string name;
  std::function<std::vector<std::string>(const std::string& root)> run;
  int ranks = 1;  // how many errors a refusal must produce (every rank fails)
};

std::vector<std::string> resume(const std::string& root, int world_size, Placement placement, PlannerKind planner,
                                TailPolicy tail, int replicas = 1, StepMode mode = StepMode::replicated) {
  TrainConfig c = base_config();
  c.runtime.replicas = replicas;
  c.runtime.step_mode = mode;
  c.resume_from = root;  // through `latest`, as `mfsdp train --resume` does
  c.planner.planner = planner;
  c.planner.tail_policy = tail;
  apply_placement(placement, c);
  RanksOptions ranks;
  ranks.world_size = world_size;
  try {
    run_ranks_as_threads(ranks, [&](RankContext& ctx) { train_placement(ctx, c); });
  } catch (const RankError& e) {
    std::vector<std::string> out;
    for (const RankError::Failure& f : e.failures()) out.push_back("rank " + std::to_string(f.rank) + ": " + f.message);
    return out;
  }
  return {};
}

std::vector<std::string> errors_of(const std::function<void()>& f) {
  const std::string e = error_of(f);
  return e.empty() ? std::vector<std::string>{} : std::vector<std::string>{e};
}

std::vector<ReadPath> read_paths(Source source) {
  std::vector<ReadPath> paths;
  if (source == Source::flat) {
    paths = {
      {"resume at the same W and plan",
       [](const std::string& root) { return resume(root, 3, Placement::owner, PlannerKind::balanced, TailPolicy::even); }, 3},
      {"resharded resume (W = 2, round_robin, owner tail)",
       [](const std::string& root) { return resume(root, 2, Placement::owner, PlannerKind::round_robin, TailPolicy::owner); }, 2},
    };
  } else {
    paths = {
      {"resume on the same mesh (2 x 2, dedup)",
       [](const std::string& root) {
         return resume(root, 4, Placement::owner, PlannerKind::balanced, TailPolicy::even, 2, StepMode::dedup);
       }, 4},
      {"resharded resume onto a flat world (1 x 3, round_robin, owner tail)",
       [](const std::string& root) { return resume(root, 3, Placement::owner, PlannerKind::round_robin, TailPolicy::owner); }, 3},
      {"resharded resume onto another mesh (2 x 1, replicated)",
       [](const std::string& root) {
         return resume(root, 2, Placement::owner, PlannerKind::balanced, TailPolicy::even, 2, StepMode::replicated);
       }, 2},
    };
  }
  std::vector<ReadPath> shared{
      {"oracle consolidation (W = 2)",
       [](const std::string& root) { return resume(root, 2, Placement::ddp, PlannerKind::balanced, TailPolicy::even); }, 2},
      {"export",
       [](const std::string& root) {
         const std::string out = root + ".exported.safetensors";  // beside the checkpoint: nothing is written inside one
         std::vector<std::string> e = errors_of([&] { export_model(resolve_checkpoint(root), out); });
         if (!e.empty() && path_exists(out)) e.push_back("export left '" + out + "' behind after refusing");
         std::remove(out.c_str());
         return e;
       }},
      {"inspect",
       [](const std::string& root) {
         std::string report;
         bool ok = false;
         std::vector<std::string> e = errors_of([&] { ok = inspect_checkpoint(resolve_checkpoint(root), true, report); });
         if (e.empty() && !ok) e.push_back(report);  // refused by reporting: the report names the file
         return e;
       }},
  };
  paths.insert(paths.end(), shared.begin(), shared.end());
  return paths;
}

TEST(CheckpointCorruption, ThePristineCopyPassesEveryReadPath) {
  for (Source source : {Source::flat, Source::hsdp}) {
    const std::unique_ptr<TempDir> copy = copy_pristine(source);
    const std::string& root = copy->path();
    for (const ReadPath& p : read_paths(source)) {
      const std::vector<std::string> errors = p.run(root);
      EXPECT_TRUE(errors.empty()) << p.name << ": " << errors.front();
    }
  }
}

// A `latest` that names another step that exists (one changed digit): its layout CRC-32 refuses it.
TEST(CheckpointCorruption, LatestNamingAnotherExistingStepIsRefused) {
  const std::unique_ptr<TempDir> copy = copy_pristine(Source::flat);
  const std::string& root = copy->path();
  std::string latest = read_file(root + "/latest", "test");
  ASSERT_EQ(latest.substr(0, 13), "step_00000002");
  latest[12] = '1';
  spit(root + "/latest", latest);
  try {
    resolve_checkpoint(root);
    ADD_FAILURE() << "a latest naming step 1 with step 2's layout CRC-32 was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("names 'step_00000001' with layout CRC-32"), std::string::npos)
        << e.what_without_backtrace();
  }
}

enum class Region { safetensors_header, first_chunk, middle_chunk, last_chunk, anywhere };

void showValue(Region r, std::ostream& os) {
  const char* names[] = {"safetensors header", "first chunk", "middle chunk", "last chunk", "anywhere"};
  os << names[static_cast<int>(r)];
}

void any_flipped_byte_is_refused(Source source) {
  // Which file: a rank file of the step `latest` names, its layout.json, or `latest` itself.
  const std::vector<std::string> files = step_files(source);
  const int n_ranks = static_cast<int>(files.size()) - 1;
  const int which = *rc::gen::inRange(0, n_ranks + 2);
  const std::string file = which <= n_ranks ? "step_00000002/" + files[which] : "latest";
  const std::unique_ptr<TempDir> copy = copy_pristine(source);
  const std::string& root = copy->path();
  const std::string path = root + "/" + file;
  std::string bytes = read_file(path, "test");
  int64_t lo = 0, hi = static_cast<int64_t>(bytes.size());
  if (which < n_ranks) {
    const CheckpointLayout L = read_layout(root + "/step_00000002");
    const int64_t chunk = L.manifest_of(files[which]).chunk_bytes;
    const int64_t chunks = (hi + chunk - 1) / chunk;
    RC_PRE(chunks >= 3);
    const Region region = *rc::gen::element(Region::safetensors_header, Region::first_chunk, Region::middle_chunk,
                                            Region::last_chunk, Region::anywhere);
    RC_TAG(region);
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = header << 8 | static_cast<unsigned char>(bytes[i]);
    switch (region) {
      case Region::safetensors_header: hi = 8 + static_cast<int64_t>(header); break;
      case Region::first_chunk: hi = chunk; break;
      case Region::middle_chunk: lo = chunks / 2 * chunk, hi = lo + chunk; break;
      case Region::last_chunk: lo = (chunks - 1) * chunk; break;
      case Region::anywhere: break;
    }
  } else {
    RC_TAG(which == n_ranks ? "layout.json" : "latest");
  }
  const int flips = *rc::gen::inRange(1, 4);
  for (int i = 0; i < flips; ++i) {
    const int64_t at = *rc::gen::inRange<int64_t>(lo, hi);
    bytes[static_cast<size_t>(at)] ^= static_cast<char>(*rc::gen::inRange(1, 256));
  }
  spit(path, bytes);
  const std::string base = file.substr(file.find('/') + 1);
  for (const ReadPath& p : read_paths(source)) {
    const std::vector<std::string> errors = p.run(root);
    if (errors.empty()) RC_FAIL(p.name + " loaded a checkpoint whose '" + file + "' was corrupted");
    if (static_cast<int>(errors.size()) < p.ranks)
      RC_FAIL(p.name + ": only " + std::to_string(errors.size()) + " of " + std::to_string(p.ranks) + " ranks failed: " +
              errors.front());
    for (const std::string& e : errors)
      if (e.find(base) == std::string::npos) RC_FAIL(p.name + ": the error does not name '" + base + "': " + e);
  }
}

RC_GTEST_PROP(CheckpointCorruption, AnyFlippedByteIsRefusedByEveryReadPath, ()) { any_flipped_byte_is_refused(Source::flat); }

RC_GTEST_PROP(CheckpointCorruption, AnyFlippedByteOfAnHsdpCheckpointIsRefusedByEveryReadPathOnEveryMesh, ()) {
  any_flipped_byte_is_refused(Source::hsdp);
}

}  // namespace
}  // namespace mfsdp
