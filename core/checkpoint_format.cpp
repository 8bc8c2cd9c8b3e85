#include "core/checkpoint_format.h"

#include <c10/util/Exception.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace mfsdp {
namespace {

// Slicing-by-8 tables for the reflected polynomial 0xEDB88320.
struct Crc32Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Crc32Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};

const Crc32Tables& crc_tables() {
  static const Crc32Tables tables;
  return tables;
}

[[noreturn]] void bad_layout(const std::string& path, const std::string& where, const std::string& what) {
  TORCH_CHECK(false, "checkpoint: '", path, "': ", where, ": ", what);
}

// Strict field access: the field must exist with the expected JSON type.
struct Fields {
  const nlohmann::json& j;
  const std::string& path;
  std::string where;

  const nlohmann::json& at(const char* key) const {
    if (!j.is_object()) bad_layout(path, where, "is not an object");
    auto it = j.find(key);
    if (it == j.end()) bad_layout(path, where, std::string("lacks the field \"") + key + "\"");
    return *it;
  }
  std::string in(const char* key) const { return where + "." + key; }
  int64_t integer(const char* key, int64_t lo = 0, int64_t hi = INT64_MAX) const {
    const nlohmann::json& v = at(key);
    if (!v.is_number_integer()) bad_layout(path, in(key), "is not an integer");
    // Reading a large unsigned value as int64 would wrap; compare as unsigned first.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      bad_layout(path, in(key), "is out of range");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      bad_layout(path, in(key), std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  std::string string(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_string()) bad_layout(path, in(key), "is not a string");
    return v.get<std::string>();
  }
  const nlohmann::json& array(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_array()) bad_layout(path, in(key), "is not an array");
    return v;
  }
  const nlohmann::json& object(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_object()) bad_layout(path, in(key), "is not an object");
    return v;
  }
  Fields element(const char* key, size_t i) const {
    return Fields{array(key)[i], path, in(key) + "[" + std::to_string(i) + "]"};
  }
};

// Runs `f`, turning its c10::Error into one naming the layout and the field.
template <typename F>
auto in_context(const std::string& path, const std::string& where, F&& f) {
  try {
    return f();
  } catch (const c10::Error& e) {
    bad_layout(path, where, e.what_without_backtrace());
  }
}

Role role_from_string(const std::string& name) {
  for (Role r : {Role::owned_matrix, Role::even_shard, Role::owned_tail})
    if (name == to_string(r)) return r;
  TORCH_CHECK(false, "unknown role '", name, "' (owned_matrix, even_shard, owned_tail)");
}

// Bound on element counts and offsets read from a layout: arithmetic on them cannot overflow.
constexpr int64_t kMaxElements = int64_t{1} << 50;

bool plain_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

bool known_optimizer(const std::string& kind) {
  return kind == "muon" || kind == "adamw" || kind == "shampoo" || kind == "soap";
}

}  // namespace

int64_t chunk_bytes_for(int64_t file_bytes) {
  int64_t chunk = kMinChecksumChunkBytes;
  while (file_bytes / chunk > kMaxChecksumChunks) chunk *= 2;
  return chunk;
}

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto& t = crc_tables().t;
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint32_t lo = c ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    const uint32_t hi = uint32_t{p[4]} | uint32_t{p[5]} << 8 | uint32_t{p[6]} << 16 | uint32_t{p[7]} << 24;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
        t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8, n -= 8;
  }
  while (n-- > 0) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

FileManifest compute_manifest(const std::string& dir, const std::string& file) {
  const std::string path = dir + "/" + file;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "checkpoint: cannot open '", path, "': ", std::strerror(errno));
  FileManifest m;
  m.file = file;
  struct stat st {};
  TORCH_CHECK(::fstat(fd, &st) == 0, "checkpoint: cannot stat '", path, "'");
  m.chunk_bytes = chunk_bytes_for(st.st_size);
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

// Writes `text` to `path` atomically: a temporary file beside it, fsync, rename.
void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TORCH_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ::close(fd);
      TORCH_CHECK(false, "cannot write '", tmp, "': ", std::strerror(errno));
    }
    done += static_cast<size_t>(w);
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  TORCH_CHECK(rc == 0, "cannot sync '", tmp, "': ", std::strerror(errno));
  TORCH_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path, "': ",
              std::strerror(errno));
}

const FileManifest& CheckpointLayout::manifest_of(const std::string& file) const {
  for (const FileManifest& m : manifest)
    if (m.file == file) return m;
  TORCH_CHECK(false, "checkpoint: the manifest has no entry for '", file, "'");
}

nlohmann::json plan_to_json(const OwnershipPlan& plan) {
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const MatrixShard& s : plan.shards()) {
    nlohmann::ordered_json slices = nlohmann::ordered_json::array();
    for (const ShardSlice& sl : s.slices)
      slices.push_back({{"rank", sl.rank}, {"offset", sl.offset}, {"row_begin", sl.row_begin}, {"rows", sl.rows},
                        {"padded_rows", sl.padded_rows}});
    shards.push_back({{"name", s.name}, {"shape", s.shape}, {"dtype", safetensors_dtype(s.dtype)},
                      {"kind", to_string(s.kind)}, {"role", to_string(s.role)}, {"owner", s.owner}, {"unit", s.unit},
                      {"slices", slices}});
  }
  nlohmann::ordered_json units = nlohmann::ordered_json::array();
  for (const UnitLayout& u : plan.units()) {
    nlohmann::ordered_json segments = nlohmann::ordered_json::array();
    for (const Segment& g : u.segments) segments.push_back({{"offset", g.offset}, {"numel", g.numel}});
    units.push_back({{"name", u.name}, {"dtype", safetensors_dtype(u.dtype)}, {"numel", u.numel},
                     {"segments", segments}, {"shards", u.shards}, {"tail_owner", u.tail_owner}});
  }
  nlohmann::ordered_json j{{"world_size", plan.world_size()},
                           {"planner", to_string(plan.meta().planner)},
                           {"tail_policy", to_string(plan.meta().tail_policy)},
                           {"model", plan.meta().model},
                           {"hash", plan.hash_hex()},
                           {"shards", shards},
                           {"units", units}};
  return nlohmann::json(j);
}

OwnershipPlan plan_from_json(const nlohmann::json& j, const std::string& path) {
  const Fields f{j, path, "plan"};
  const int world = static_cast<int>(f.integer("world_size", 1, 1 << 20));
  PlanMeta meta;
  meta.planner = in_context(path, f.in("planner"), [&] { return planner_kind_from_string(f.string("planner")); });
  meta.tail_policy = in_context(path, f.in("tail_policy"), [&] { return tail_policy_from_string(f.string("tail_policy")); });
  meta.model = f.string("model");
  std::vector<MatrixShard> shards;
  const size_t num_shards = f.array("shards").size();
  for (size_t i = 0; i < num_shards; ++i) {
    const Fields s = f.element("shards", i);
    MatrixShard m;
    m.name = s.string("name");
    int64_t numel = 1;
    for (size_t d = 0; d < s.array("shape").size(); ++d) {
      const nlohmann::json& v = s.array("shape")[d];
      if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(kMaxElements))
        bad_layout(path, s.in("shape"), "has a bad dimension");
      m.shape.push_back(v.get<int64_t>());
      if (m.shape.back() > 0 && numel > kMaxElements / m.shape.back()) bad_layout(path, s.in("shape"), "is absurdly large");
      numel *= m.shape.back();
    }
    m.dtype = in_context(path, s.in("dtype"), [&] { return dtype_from_safetensors(s.string("dtype")); });
    m.kind = in_context(path, s.in("kind"), [&] { return param_kind_from_string(s.string("kind")); });
    m.role = in_context(path, s.in("role"), [&] { return role_from_string(s.string("role")); });
    m.owner = static_cast<int>(s.integer("owner", -1, world - 1));
    m.unit = static_cast<int>(s.integer("unit", 0, 1 << 20));
    for (size_t k = 0; k < s.array("slices").size(); ++k) {
      const Fields sl = s.element("slices", k);
      ShardSlice x;
      x.rank = static_cast<int>(sl.integer("rank", 0, world - 1));
      x.offset = sl.integer("offset", 0, kMaxElements);
      x.row_begin = sl.integer("row_begin", 0, kMaxElements);
      x.rows = sl.integer("rows", 0, kMaxElements);
      x.padded_rows = sl.integer("padded_rows", 0, kMaxElements);
      m.slices.push_back(x);
    }
    shards.push_back(std::move(m));
  }
  std::vector<UnitLayout> units;
  for (size_t i = 0; i < f.array("units").size(); ++i) {
    const Fields u = f.element("units", i);
    UnitLayout l;
    l.name = u.string("name");
    l.dtype = in_context(path, u.in("dtype"), [&] { return dtype_from_safetensors(u.string("dtype")); });
    l.numel = u.integer("numel", 0, kMaxElements);
    for (size_t k = 0; k < u.array("segments").size(); ++k) {
      const Fields g = u.element("segments", k);
      l.segments.push_back(Segment{g.integer("offset", 0, kMaxElements), g.integer("numel", 0, kMaxElements)});
    }
    for (const nlohmann::json& v : u.array("shards")) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() >= num_shards) bad_layout(path, u.in("shards"), "names a shard that does not exist");
      l.shards.push_back(v.get<int>());
    }
    l.tail_owner = static_cast<int>(u.integer("tail_owner", -1, world - 1));
    units.push_back(std::move(l));
  }
  for (const MatrixShard& m : shards)
    if (m.unit >= static_cast<int>(units.size())) bad_layout(path, "plan.shards", "'" + m.name + "' names a unit that does not exist");
  OwnershipPlan plan = in_context(path, "plan", [&] { return OwnershipPlan(world, meta, std::move(shards), std::move(units)); });
  const std::string hash = f.string("hash");
  if (hash != plan.hash_hex())
    bad_layout(path, "plan.hash", "is " + hash + " but the plan it describes hashes to " + plan.hash_hex() + " (edited?)");
  return plan;
}

nlohmann::json to_json(const CheckpointRank& r) {
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const CheckpointTensor& t : r.tensors)
    tensors.push_back({{"tensor", t.tensor}, {"param", t.param}, {"state", t.state}, {"row_begin", t.row_begin}, {"rows", t.rows}});
  nlohmann::ordered_json optimizers = nlohmann::ordered_json::array();
  for (const CheckpointOptimizer& o : r.optimizers)
    optimizers.push_back({{"param", o.param}, {"kind", o.kind}, {"row_begin", o.row_begin}, {"rows", o.rows}, {"scalars", o.scalars}});
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
  return j.dump(1) + "\n";
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
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "checkpoint: '", path, "' is not JSON: ", e.what());
  }
  const Fields f{j, path, "layout"};
  if (f.string("format") != kCheckpointFormat)
    bad_layout(path, f.in("format"), "is '" + f.string("format") + "', not " + kCheckpointFormat);
  CheckpointLayout L;
  L.format_version = static_cast<int>(f.integer("format_version", 0, INT32_MAX));
  if (L.format_version != kCheckpointFormatVersion)
    bad_layout(path, f.in("format_version"), "unknown format version " + std::to_string(L.format_version) +
                                                 " (this build reads version " + std::to_string(kCheckpointFormatVersion) + ")");
  L.step = f.integer("step");
  L.torch_version = f.string("torch_version");
  L.placement = f.string("placement");
  L.model = f.object("model");
  L.optimizers = f.object("optimizers");
  L.plan = std::make_shared<OwnershipPlan>(plan_from_json(f.object("plan"), path));
  const OwnershipPlan& plan = *L.plan;
  const int W = plan.world_size();
  if (f.integer("world_size", 1, 1 << 20) != W) bad_layout(path, f.in("world_size"), "differs from the plan's world size");

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
      const ShardSlice* mine = nullptr;
      for (const ShardSlice& sl : plan.shard(param).slices)
        if (sl.rank == R.rank && sl.rows > 0) mine = &sl;
      if (!mine || mine->row_begin != b || mine->rows != n)
        bad_layout(path, where, "rows [" + std::to_string(b) + ", " + std::to_string(b + n) + ") of '" + param +
                                    "' are not what the plan stores on rank " + std::to_string(R.rank));
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
      O.kind = o.string("kind");
      if (!known_optimizer(O.kind)) bad_layout(path, o.in("kind"), "unknown optimizer '" + O.kind + "'");
      const MatrixShard& s = plan.shard(O.param);
      const int64_t total = s.shape.empty() ? 1 : s.shape[0];
      O.row_begin = o.integer("row_begin", 0, total);
      O.rows = o.integer("rows", 1, total - O.row_begin);
      check_stored(o.in("rows"), O.param, O.row_begin, O.rows);
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
  return L;
}

CheckpointLayout read_layout(const std::string& dir) {
  const std::string path = dir + "/layout.json";
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, "checkpoint: cannot read '", path, "' (not a checkpoint directory?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_layout(ss.str(), path);
}

VerifiedFile::VerifiedFile(const std::string& dir, const FileManifest& manifest)
    : path_(dir + "/" + manifest.file), manifest_(manifest) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd_ >= 0, "checkpoint: cannot open '", path_, "': ", std::strerror(errno),
              errno == ENOENT ? " (a rank file of the layout is missing)" : "");
  struct stat st {};
  TORCH_CHECK(::fstat(fd_, &st) == 0, "checkpoint: cannot stat '", path_, "'");
  if (st.st_size != manifest_.bytes) {
    ::close(fd_);
    fd_ = -1;
    TORCH_CHECK(false, "checkpoint: '", path_, "' is ", static_cast<int64_t>(st.st_size), " bytes but the manifest says ",
                manifest_.bytes, st.st_size < manifest_.bytes ? " (truncated)" : " (bytes appended or replaced)");
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
