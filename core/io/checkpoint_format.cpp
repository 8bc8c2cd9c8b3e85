#include "core/io/checkpoint_format.h"

#include "core/optim/lr_schedule.h"
#include "core/plan/plan_json.h"
#include "core/plan/planner.h"
#include "core/plan/precision.h"

#include "core/util/crc32.h"
#include "core/util/files.h"
#include "core/util/json_fields.h"
#include "core/util/json_limits.h"

#include <c10/util/Exception.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace mfsdp {
namespace {

constexpr const char* kCheckpoint = "checkpoint";

[[noreturn]] void bad_layout(const std::string& path, const std::string& where, const std::string& what) {
  bad_json(kCheckpoint, path, where, what);
}

using Fields = JsonFields;

template <typename F>
auto in_context(const std::string& path, const std::string& where, F&& f) {
  return in_json_context(kCheckpoint, path, where, std::forward<F>(f));
}


constexpr int64_t kMaxElements = kMaxPlanElements;
// layout.json is a few KB per rank; a larger one is not a layout.
constexpr int64_t kMaxLayoutBytes = int64_t{256} << 20;

bool plain_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}


}  // namespace

int64_t chunk_bytes_for(int64_t file_bytes) {
  int64_t chunk = kMinChecksumChunkBytes;
  while (file_bytes / chunk > kMaxChecksumChunks) chunk *= 2;
  return chunk;
}

FileManifest compute_manifest(const std::string& dir, const std::string& file) {
  const std::string path = dir + "/" + file;
  const OpenedFile opened = open_regular_file(path, "checkpoint", std::numeric_limits<int64_t>::max());
  const int fd = opened.fd;
  FileManifest m;
  m.file = file;
  m.chunk_bytes = chunk_bytes_for(opened.bytes);
  std::vector<char> buf(static_cast<size_t>(m.chunk_bytes));
  while (true) {
    size_t got = 0;
    while (got < buf.size()) {
      const ssize_t r = ::read(fd, buf.data() + got, buf.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    if (got == 0) break;
    m.chunk_crc32.push_back(crc32(buf.data(), got));
    m.crc32 = crc32(buf.data(), got, m.crc32);
    m.bytes += static_cast<int64_t>(got);
    if (got < buf.size()) break;
  }
  ::close(fd);
  return m;
}

const FileManifest& CheckpointLayout::manifest_of(const std::string& file) const {
  for (const FileManifest& m : manifest)
    if (m.file == file) return m;
  TORCH_CHECK(false, "checkpoint: the manifest has no entry for '", file, "'");
}

nlohmann::json to_json(const CheckpointRank& r) {
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const CheckpointTensor& t : r.tensors)
    tensors.push_back({{"tensor", t.tensor}, {"param", t.param}, {"state", t.state}, {"row_begin", t.row_begin}, {"rows", t.rows}});
  nlohmann::ordered_json optimizers = nlohmann::ordered_json::array();
  for (const CheckpointOptimizer& o : r.optimizers)
    optimizers.push_back({{"param", o.param}, {"kind", to_string(o.kind)}, {"row_begin", o.row_begin}, {"rows", o.rows}, {"scalars", o.scalars}});
  return nlohmann::json(nlohmann::ordered_json{{"rank", r.rank}, {"file", r.file}, {"sampler", r.sampler}, {"rng_tensor", r.rng_tensor},
                                               {"tensors", tensors}, {"optimizers", optimizers}});
}

nlohmann::json to_json(const FileManifest& m) {
  return nlohmann::json(nlohmann::ordered_json{{"file", m.file}, {"bytes", m.bytes}, {"crc32", m.crc32},
                                               {"chunk_bytes", m.chunk_bytes}, {"chunk_crc32", m.chunk_crc32}});
}

std::string layout_json(const CheckpointLayout& layout, const std::vector<nlohmann::json>& ranks,
                        const std::vector<nlohmann::json>& manifest) {
  nlohmann::ordered_json j{{"format", kCheckpointFormat},
                           {"format_version", layout.format_version},
                           {"step", layout.step},
                           {"world_size", layout.world_size()},
                           {"torch_version", layout.torch_version},
                           {"placement", layout.placement},
                           {"model", layout.model},
                           {"optimizers", layout.optimizers},
                           {"plan", plan_to_json(*layout.plan)},
                           {"ranks", ranks},
                           {"manifest", manifest}};
  if (layout.format_version >= 3) j["precision"] = layout.precision;
  if (!layout.lr_schedule.is_null()) j["lr_schedule"] = layout.lr_schedule;
  if (layout.format_version >= 4)
    j["mesh"] = nlohmann::ordered_json{{"replicas", layout.mesh.replicas}, {"shard_group", layout.plan->world_size()},
                                       {"step_mode", layout.mesh.step_mode}};
  if (layout.format_version < 2) return j.dump(1) + "\n";
  j["layout_crc32"] = "00000000";
  return seal_layout(j.dump(1) + "\n");
}

namespace {

constexpr const char kSealKey[] = "\"layout_crc32\": \"";
constexpr size_t kSealKeyBytes = sizeof(kSealKey) - 1;

// Where the seal's 8 digits start, or npos when the text has no seal field; throws when it has
// more than one (a key inside a string value is escaped, so this finds real keys only).
size_t seal_digits(const std::string& text, const std::string& path) {
  const size_t at = text.find(kSealKey);
  if (at == std::string::npos) return at;
  TORCH_CHECK(text.find(kSealKey, at + 1) == std::string::npos, "checkpoint: '", path,
              "' holds layout_crc32 twice (corrupted)");
  TORCH_CHECK(text.size() >= at + kSealKeyBytes + 9 && text[at + kSealKeyBytes + 8] == '"', "checkpoint: '", path,
              "': its layout_crc32 is not 8 hex digits (corrupted)");
  return at + kSealKeyBytes;
}

std::string hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

bool parse_hex8(const std::string& digits, uint32_t& out) {
  if (digits.size() != 8) return false;
  out = 0;
  for (char c : digits) {
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return false;
    out = out << 4 | static_cast<uint32_t>(v);
  }
  return true;
}

}  // namespace

std::string seal_layout(std::string text) {
  const size_t at = seal_digits(text, "layout.json");
  TORCH_CHECK(at != std::string::npos, "checkpoint: seal_layout: the text has no layout_crc32 field");
  text.replace(at, 8, "00000000");
  text.replace(at, 8, hex8(crc32(text.data(), text.size())));
  return text;
}

void check_layout_seal(const std::string& text, const std::string& path) {
  const size_t at = seal_digits(text, path);
  TORCH_CHECK(at != std::string::npos, "checkpoint: '", path,
              "' is corrupted: format 2 requires its layout_crc32 field, which is missing or damaged");
  uint32_t recorded = 0;
  TORCH_CHECK(parse_hex8(text.substr(at, 8), recorded), "checkpoint: '", path,
              "' is corrupted: its layout_crc32 is not 8 lowercase hex digits");
  std::string zeroed = text;
  zeroed.replace(at, 8, "00000000");
  const uint32_t actual = crc32(zeroed.data(), zeroed.size());
  TORCH_CHECK(actual == recorded, "checkpoint: '", path, "' is corrupted: its layout_crc32 says ", hex8(recorded),
              " but its bytes give ", hex8(actual));
}

std::string latest_text(const std::string& step_name, const std::string& layout_text) {
  return step_name + "\nlayout_crc32 " + hex8(crc32(layout_text.data(), layout_text.size())) + "\n";
}

std::optional<int64_t> parse_step_name(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0 || name.size() > 5 + 18) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

LatestRecord parse_latest(const std::string& text, const std::string& path) {
  LatestRecord out;
  const size_t nl = text.find('\n');
  out.name = text.substr(0, nl);
  const std::string rest = nl == std::string::npos ? "" : text.substr(nl + 1);
  TORCH_CHECK(plain_file_name(out.name), "checkpoint: '", path, "' does not name a checkpoint directory (it holds '", out.name,
              "'): corrupted or not written by mfsdp");
  if (rest.empty()) return out;  // before format 2: the name alone
  const std::string prefix = "layout_crc32 ";
  TORCH_CHECK(rest.size() == prefix.size() + 9 && rest.compare(0, prefix.size(), prefix) == 0 && rest.back() == '\n' &&
                  parse_hex8(rest.substr(prefix.size(), 8), out.layout_crc32),
              "checkpoint: '", path, "' is corrupted: after the step name it must hold 'layout_crc32 <8 hex digits>'");
  out.has_layout_crc32 = true;
  return out;
}

std::string layout_to_json(const CheckpointLayout& layout) {
  std::vector<nlohmann::json> ranks, manifest;
  for (const CheckpointRank& r : layout.ranks) ranks.push_back(to_json(r));
  for (const FileManifest& m : layout.manifest) manifest.push_back(to_json(m));
  return layout_json(layout, ranks, manifest);
}

CheckpointLayout parse_layout(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = parse_json(text, "checkpoint: '" + path + "'");
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "checkpoint: '", path, "' is not JSON: ", e.what());
  }
  const Fields f{j, path, "layout", kCheckpoint};
  if (f.string("format") != kCheckpointFormat)
    bad_layout(path, f.in("format"), "is '" + f.string("format") + "', not " + kCheckpointFormat);
  CheckpointLayout L;
  L.format_version = static_cast<int>(f.integer("format_version", 0, INT32_MAX));
  if (L.format_version < kOldestReadableFormatVersion || L.format_version > kCheckpointFormatVersion)
    bad_layout(path, f.in("format_version"), "unknown format version " + std::to_string(L.format_version) +
                                                 " (this build reads versions " + std::to_string(kOldestReadableFormatVersion) +
                                                 " to " + std::to_string(kCheckpointFormatVersion) + ")");
  // Before any other field is believed: every byte of a format-2 layout is checked.
  if (L.format_version >= 2) check_layout_seal(text, path);
  else if (j.contains("layout_crc32")) bad_layout(path, "layout.layout_crc32", "is not part of format version 1 (corrupted version?)");
  // A field a later format introduced cannot be in an earlier one: a layout whose version was
  // lowered (to shed its seal) still holds them.
  if (L.format_version < 3 && j.contains("precision"))
    bad_layout(path, "layout.precision", "is a field of format 3 and later, in a format-" + std::to_string(L.format_version) +
                                             " layout (a downgraded version?)");
  if (L.format_version < 4 && j.contains("mesh"))
    bad_layout(path, "layout.mesh", "is a field of format 4 and later, in a format-" + std::to_string(L.format_version) +
                                        " layout (a downgraded version?)");
  L.step = f.integer("step");
  L.torch_version = f.string("torch_version");
  L.placement = f.string("placement");
  if (L.placement != "owner" && L.placement != "reconstruct" && L.placement != "alltoall")
    bad_layout(path, f.in("placement"), "is '" + L.placement + "', not a placement that writes checkpoints (owner, reconstruct, alltoall)");
  if (L.step < 0) bad_layout(path, f.in("step"), "is negative");
  L.model = f.object("model");
  // The model's sizes in their domains (the plan is checked below; these are what a resume compares).
  for (const char* key : {"vocab", "hidden", "intermediate", "layers", "heads", "kv_heads"}) {
    if (!L.model.contains(key)) continue;
    const nlohmann::json& v = L.model[key];
    if (!v.is_number_integer() || v.get<int64_t>() < (std::string(key) == "kv_heads" ? 0 : 1) || v.get<int64_t>() > (int64_t{1} << 40))
      bad_layout(path, f.in("model") + "." + key, "is " + v.dump() + ", not a positive integer");
  }
  for (const char* key : {"experts", "top_k", "shared_experts", "moe_intermediate", "first_dense"}) {
    if (!L.model.contains(key)) continue;
    const nlohmann::json& v = L.model[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 40))
      bad_layout(path, f.in("model") + "." + key, "is " + v.dump() + ", not an integer >= 0");
  }
  L.optimizers = f.object("optimizers");
  if (L.format_version >= 3) {
    L.precision = f.object("precision");
    const Fields p{f.object("precision"), path, f.in("precision"), kCheckpoint};
    for (const char* key : {"master_dtype", "param_dtype", "reduce_dtype"}) {
      const std::string d = p.string(key);
      if (d != "fp32" && d != "bf16") bad_layout(path, p.in(key), "is '" + d + "', not fp32 or bf16");
    }
  } else {
    L.precision = precision_to_json(PrecisionPolicy{});
  }
  if (j.contains("lr_schedule")) {  // checked here, so inspect and every reader refuse what training would
    L.lr_schedule = f.object("lr_schedule");
    in_context(path, f.in("lr_schedule"), [&] { return lr_schedule_from_json(L.lr_schedule, nullptr); });
  }
  L.plan = std::make_shared<OwnershipPlan>(plan_from_json(f.object("plan"), path));
  const OwnershipPlan& plan = *L.plan;
  const int S = plan.world_size();
  if (L.format_version >= 4) {
    const Fields m{f.object("mesh"), path, f.in("mesh"), kCheckpoint};
    L.mesh.replicas = static_cast<int>(m.integer("replicas", 1, 1 << 16));
    if (m.integer("shard_group", 1, 1 << 20) != S) bad_layout(path, m.in("shard_group"), "differs from the plan's world size");
    L.mesh.step_mode = m.string("step_mode");
    in_context(path, m.in("step_mode"), [&] { return parse_name(kStepModeNames, L.mesh.step_mode, "step mode"); });
    if (static_cast<int64_t>(L.mesh.replicas) * S > (1 << 20)) bad_layout(path, m.in("replicas"), "makes too many ranks");
  }
  const int W = L.world_size();  // rank files: every rank of the mesh
  if (f.integer("world_size", 1, 1 << 20) != W)
    bad_layout(path, f.in("world_size"), L.mesh.replicas == 1 ? "differs from the plan's world size"
                                                               : "differs from the mesh's replicas x shard group");

  // Manifest first: rank records name files that must be in it.
  std::set<std::string> files;
  for (size_t i = 0; i < f.array("manifest").size(); ++i) {
    const Fields m = f.element("manifest", i);
    FileManifest e;
    e.file = m.string("file");
    if (!plain_file_name(e.file)) bad_layout(path, m.in("file"), "'" + e.file + "' is not a plain file name");
    if (!files.insert(e.file).second) bad_layout(path, m.in("file"), "'" + e.file + "' is listed twice");
    e.bytes = m.integer("bytes", 0, int64_t{1} << 50);
    e.crc32 = static_cast<uint32_t>(m.integer("crc32", 0, UINT32_MAX));
    e.chunk_bytes = m.integer("chunk_bytes", 1, int64_t{1} << 40);
    const int64_t chunks = (e.bytes + e.chunk_bytes - 1) / e.chunk_bytes;
    const nlohmann::json& crcs = m.array("chunk_crc32");
    if (static_cast<int64_t>(crcs.size()) != chunks)
      bad_layout(path, m.in("chunk_crc32"), "has " + std::to_string(crcs.size()) + " entries for " + std::to_string(chunks) + " chunks");
    for (const nlohmann::json& c : crcs) {
      if (!c.is_number_unsigned() || c.get<uint64_t>() > UINT32_MAX) bad_layout(path, m.in("chunk_crc32"), "holds a value that is not a CRC-32");
      e.chunk_crc32.push_back(c.get<uint32_t>());
    }
    L.manifest.push_back(std::move(e));
  }

  // What each rank file holds of each parameter, its state and optimizer records: every row once.
  struct Rows {
    int64_t begin, rows;
    int rank;
    std::string where;
  };
  std::map<std::string, std::vector<Rows>> written;
  const nlohmann::json& ranks = f.array("ranks");
  if (static_cast<int>(ranks.size()) != W)
    bad_layout(path, f.in("ranks"), "has " + std::to_string(ranks.size()) + " entries for world size " + std::to_string(W));
  std::set<std::string> rank_files;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Fields r = f.element("ranks", i);
    CheckpointRank R;
    R.rank = static_cast<int>(r.integer("rank", 0, W - 1));
    if (R.rank != static_cast<int>(i)) bad_layout(path, r.in("rank"), "ranks are not in rank order");
    R.file = r.string("file");
    if (!files.count(R.file)) bad_layout(path, r.in("file"), "'" + R.file + "' is not in the manifest");
    if (!rank_files.insert(R.file).second) bad_layout(path, r.in("file"), "'" + R.file + "' belongs to two ranks");
    R.sampler = r.object("sampler");
    R.rng_tensor = r.string("rng_tensor");
    // Rows of a parameter a record names must be exactly what the plan stores on this rank.
    auto check_stored = [&](const std::string& where, const std::string& param, int64_t b, int64_t n) {
      const ShardSlice* mine = plan.shard(param).slice_on(L.shard_rank(R.rank));
      if (!mine || mine->rows == 0 || mine->row_begin != b || mine->rows != n)
        bad_layout(path, where, "rows [" + std::to_string(b) + ", " + std::to_string(b + n) + ") of '" + param +
                                    "' are not what the plan stores on " +
                                    (L.mesh.replicas == 1 ? "rank " + std::to_string(R.rank)
                                                          : "shard rank " + std::to_string(L.shard_rank(R.rank)) +
                                                                " (rank " + std::to_string(R.rank) + ")"));
    };
    std::set<std::string> names;
    for (size_t k = 0; k < r.array("tensors").size(); ++k) {
      const Fields t = r.element("tensors", k);
      CheckpointTensor T;
      T.tensor = t.string("tensor");
      T.param = t.string("param");
      T.state = t.string("state");
      if (T.tensor.empty() || T.tensor == "__metadata__" || !names.insert(T.tensor).second)
        bad_layout(path, t.in("tensor"), "'" + T.tensor + "' is empty, reserved or given twice");
      if (!plan.has_shard(T.param)) bad_layout(path, t.in("param"), "'" + T.param + "' is not a parameter of the plan");
      const MatrixShard& s = plan.shard(T.param);
      const int64_t total = s.shape.empty() ? 1 : s.shape[0];
      T.row_begin = t.integer("row_begin", 0, total);
      T.rows = t.integer("rows", 1, total - T.row_begin);
      check_stored(t.in("rows"), T.param, T.row_begin, T.rows);
      written[T.param + (T.state.empty() ? "" : " state " + T.state)].push_back({T.row_begin, T.rows, R.rank, t.in("rows")});
      R.tensors.push_back(std::move(T));
    }
    if (!R.rng_tensor.empty() && names.count(R.rng_tensor)) bad_layout(path, r.in("rng_tensor"), "names a parameter or state tensor");
    std::set<std::string> stepped;
    for (size_t k = 0; k < r.array("optimizers").size(); ++k) {
      const Fields o = r.element("optimizers", k);
      CheckpointOptimizer O;
      O.param = o.string("param");
      if (!plan.has_shard(O.param)) bad_layout(path, o.in("param"), "'" + O.param + "' is not a parameter of the plan");
      if (!stepped.insert(O.param).second) bad_layout(path, o.in("param"), "'" + O.param + "' has two optimizers on this rank");
      O.kind = in_context(path, o.in("kind"), [&] { return optimizer_kind_from_string(o.string("kind")); });
      const MatrixShard& s = plan.shard(O.param);
      const int64_t total = s.shape.empty() ? 1 : s.shape[0];
      O.row_begin = o.integer("row_begin", 0, total);
      O.rows = o.integer("rows", 1, total - O.row_begin);
      check_stored(o.in("rows"), O.param, O.row_begin, O.rows);
      written[O.param + " optimizer"].push_back({O.row_begin, O.rows, R.rank, o.in("rows")});
      const nlohmann::json& sc = o.object("scalars");
      for (auto it = sc.begin(); it != sc.end(); ++it) {
        if (!it.value().is_number() || !std::isfinite(it.value().get<double>()))
          bad_layout(path, o.in("scalars"), "'" + it.key() + "' is not a finite number");
        O.scalars[it.key()] = it.value().get<double>();
      }
      R.optimizers.push_back(std::move(O));
    }
    for (const CheckpointTensor& T : R.tensors)
      if (!T.state.empty() && !stepped.count(T.param))
        bad_layout(path, r.in("tensors"), "state '" + T.state + "' of '" + T.param + "' has no optimizer record");
    L.ranks.push_back(std::move(R));
  }
  for (auto& [what, pieces] : written) {
    std::sort(pieces.begin(), pieces.end(), [](const Rows& a, const Rows& b) { return a.begin < b.begin; });
    for (size_t k = 1; k < pieces.size(); ++k)
      if (pieces[k].begin < pieces[k - 1].begin + pieces[k - 1].rows)
        bad_layout(path, pieces[k].where, "rows [" + std::to_string(pieces[k].begin) + ", " +
                                              std::to_string(pieces[k].begin + pieces[k].rows) + ") of '" + what +
                                              "' are also written by rank " + std::to_string(pieces[k - 1].rank) +
                                              " (each row is written once)");
  }
  for (const MatrixShard& s : plan.shards()) {
    int64_t rows = 0;
    if (auto it = written.find(s.name); it != written.end())
      for (const Rows& p : it->second) rows += p.rows;
    const int64_t total = s.shape.empty() ? 1 : s.shape[0];
    if (rows != total)
      bad_layout(path, "layout.ranks", "holds " + std::to_string(rows) + " of the " + std::to_string(total) + " rows of '" +
                                           s.name + "' (every parameter row is in exactly one rank file)");
  }
  return L;
}

namespace {
// The format version a layout text declares (0 when it declares none readable): a cheap look, not
// a validation.
int declared_format(const std::string& text) {
  try {
    const nlohmann::json j = parse_json(text, "layout");
    return j.is_object() && j.contains("format_version") && j["format_version"].is_number_integer() ? j["format_version"].get<int>() : 0;
  } catch (const std::exception&) {
    return 0;
  }
}
}  // namespace

CheckpointLayout read_layout(const std::string& dir) {
  const std::string path = dir + "/layout.json";
  TORCH_CHECK(path_exists(path), "checkpoint: cannot read '", path, "' (not a checkpoint directory?)");
  CheckpointLayout L = parse_layout(read_file(path, "checkpoint", kMaxLayoutBytes), path);
  // A step directory's name and its layout's step agree.
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.find_last_of('/');
  const std::string name = slash == std::string::npos ? d : d.substr(slash + 1);
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : d.substr(0, slash);
  if (const std::optional<int64_t> named = parse_step_name(name))
    TORCH_CHECK(*named == L.step, "checkpoint: '", path, "' says step ", L.step, " but its directory is '", name,
                "' (moved, copied over or edited)");
  // No unsealed downgrade: an unsealed (format 1) layout is read only where nothing declares a
  // sealed format: not a `latest` carrying a CRC, not another step of the same directory.
  if (L.format_version < 2) {
    const std::string latest = parent + "/latest";
    if (path_exists(latest)) {
      const LatestRecord rec = parse_latest(read_file(latest, "checkpoint", 4096), latest);
      TORCH_CHECK(!rec.has_layout_crc32, "checkpoint: '", path, "' is an unsealed format-1 layout, but '", latest,
                  "' carries a layout CRC (format 2 or later): refusing a downgraded layout");
    }
    if (DIR* dd = ::opendir(parent.c_str())) {
      std::string newer;
      while (dirent* e = ::readdir(dd)) {
        const std::string other = e->d_name;
        if (other == name || other.compare(0, 5, "step_") != 0) continue;
        const std::string other_layout = parent + "/" + other + "/layout.json";
        struct stat st {};
        if (::stat(other_layout.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        try {
          if (declared_format(read_file(other_layout, "checkpoint", kMaxLayoutBytes)) >= 2) newer = other;
        } catch (const std::exception&) {
        }
        if (!newer.empty()) break;
      }
      ::closedir(dd);
      TORCH_CHECK(newer.empty(), "checkpoint: '", path, "' is an unsealed format-1 layout, but '", parent, "/", newer,
                  "' of the same directory is sealed (format 2 or later): refusing a downgraded layout");
    }
  }
  return L;
}

VerifiedFile::VerifiedFile(const std::string& dir, const FileManifest& manifest)
    : path_(dir + "/" + manifest.file), manifest_(manifest) {
  // A regular file only (a FIFO in its place is refused, not waited on).
  TORCH_CHECK(path_exists(path_), "checkpoint: cannot open '", path_, "': ", std::strerror(ENOENT),
              " (a rank file of the layout is missing)");
  const OpenedFile f = open_regular_file(path_, "checkpoint", std::numeric_limits<int64_t>::max());
  fd_ = f.fd;
  if (f.bytes != manifest_.bytes) {
    ::close(fd_);
    fd_ = -1;
    TORCH_CHECK(false, "checkpoint: '", path_, "' is ", f.bytes, " bytes but the manifest says ",
                manifest_.bytes, f.bytes < manifest_.bytes ? " (truncated)" : " (bytes appended or replaced)");
  }
}

VerifiedFile::~VerifiedFile() {
  if (fd_ >= 0) ::close(fd_);
}

const std::vector<char>& VerifiedFile::chunk(int64_t c) {
  for (auto& [index, bytes] : cache_)
    if (index == c) return bytes;
  const int64_t cb = manifest_.chunk_bytes, begin = c * cb, len = std::min(cb, manifest_.bytes - begin);
  std::vector<char> bytes(static_cast<size_t>(len));
  int64_t got = 0;
  while (got < len) {
    const ssize_t r = ::pread(fd_, bytes.data() + got, static_cast<size_t>(len - got), begin + got);
    if (r < 0 && errno == EINTR) continue;
    TORCH_CHECK(r > 0, "checkpoint: '", path_, "' ends early at byte ", begin + got, " (truncated while reading?)");
    got += r;
  }
  bytes_read_ += len;
  TORCH_CHECK(crc32(bytes.data(), bytes.size()) == manifest_.chunk_crc32[static_cast<size_t>(c)], "checkpoint: '", path_,
              "' is corrupted: checksum mismatch in bytes [", begin, ", ", begin + len, ") (chunk ", c, ")");
  // A few recent chunks stay: neighbouring small tensors share them.
  if (cache_.size() >= kCachedChunks) cache_.erase(cache_.begin());
  cache_.emplace_back(c, std::move(bytes));
  return cache_.back().second;
}

void VerifiedFile::read(void* out, size_t n, int64_t offset) {
  TORCH_CHECK(offset >= 0 && static_cast<uint64_t>(offset) <= static_cast<uint64_t>(manifest_.bytes) &&
                  n <= static_cast<uint64_t>(manifest_.bytes - offset),
              "checkpoint: '", path_, "': a read of ", n, " bytes at offset ", offset, " runs past its ", manifest_.bytes, " bytes");
  if (n == 0) return;
  const int64_t cb = manifest_.chunk_bytes;
  char* dst = static_cast<char*>(out);
  for (int64_t c = offset / cb; c <= (offset + static_cast<int64_t>(n) - 1) / cb; ++c) {
    const std::vector<char>& bytes = chunk(c);
    const int64_t begin = c * cb, len = static_cast<int64_t>(bytes.size());
    const int64_t from = std::max(offset, begin), to = std::min(offset + static_cast<int64_t>(n), begin + len);
    std::memcpy(dst + (from - offset), bytes.data() + (from - begin), static_cast<size_t>(to - from));
  }
}

void VerifiedFile::verify_all() {
  uint32_t whole = 0;
  for (int64_t c = 0; c * manifest_.chunk_bytes < manifest_.bytes; ++c) {
    const std::vector<char>& bytes = chunk(c);
    whole = crc32(bytes.data(), bytes.size(), whole);
  }
  TORCH_CHECK(whole == manifest_.crc32, "checkpoint: '", path_, "' is corrupted: its CRC-32 is ", whole,
              " but the manifest says ", manifest_.crc32);
}

const SafetensorsHeader& VerifiedFile::header() {
  if (!header_) {
    header_ = std::make_unique<SafetensorsHeader>(parse_safetensors_header(
        path_, manifest_.bytes, [this](void* out, size_t n, int64_t offset) { read(out, n, offset); }));
  }
  return *header_;
}

at::Tensor VerifiedFile::read_rows(const std::string& tensor, int64_t row_begin, int64_t rows) {
  return read_safetensors_rows(header(), tensor, row_begin, rows,
                               [this](void* out, size_t n, int64_t offset) { read(out, n, offset); });
}

at::Tensor VerifiedFile::read_tensor(const std::string& tensor) {
  const SafetensorsEntry& e = header().at(tensor);
  return read_rows(tensor, 0, e.shape.empty() ? 1 : e.shape[0]);
}

}  // namespace mfsdp
