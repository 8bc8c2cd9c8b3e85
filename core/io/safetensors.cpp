#include "core/io/safetensors.h"

#include "core/util/files.h"
#include "core/util/json_limits.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <limits>

namespace mfsdp {
namespace {

constexpr int64_t kMaxHeaderBytes = 100 << 20;  // as the Python library
// A tensor's name: far above any model's (the longest here are optimizer-state names of about 80
// bytes), and short enough that nothing downstream (a tolerance pattern, a report) meets a
// pathological one.
constexpr size_t kMaxTensorNameBytes = 1024;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void read_at(int fd, void* data, size_t n, int64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, offset);
    if (r < 0 && errno == EINTR) continue;
    TORCH_CHECK(r > 0, "safetensors: '", path, "' ends early (wanted ", n, " more bytes at offset ", offset, ")");
    p += r, n -= static_cast<size_t>(r), offset += r;
  }
}

// A regular file only (a FIFO is refused, not waited on); any size (tensors are read in pieces).
int open_read(const std::string& path) {
  return open_regular_file(path, "safetensors", std::numeric_limits<int64_t>::max()).fd;
}

}  // namespace

const SafetensorsEntry& SafetensorsHeader::at(const std::string& name) const {
  for (const auto& e : entries)
    if (e.name == name) return e;
  TORCH_CHECK(false, "safetensors: '", path, "' has no tensor '", name, "'");
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, WriteScope scope) {
  std::vector<std::pair<std::string, at::Tensor>> sorted;
  for (const auto& [name, t] : tensors) {
    TORCH_CHECK(name != "__metadata__", "safetensors: '__metadata__' is reserved");
    sorted.emplace_back(name, t.to(at::kCPU).contiguous());
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < sorted.size(); ++i)
    TORCH_CHECK(sorted[i].first != sorted[i - 1].first, "safetensors: tensor name '", sorted[i].first, "' given twice");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& [name, t] : sorted) {
    const int64_t n = static_cast<int64_t>(t.nbytes());
    header[name] = {{"dtype", safetensors_dtype(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data area 8-byte aligned
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  AtomicFile out(path, scope);  // complete or absent, never half-written
  out.write(len, 8);
  out.write(text);
  for (const auto& [name, t] : sorted) out.write(t.const_data_ptr(), t.nbytes());
  out.commit();
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  Fd in;
  in.fd = open_read(path);
  struct stat st {};
  TORCH_CHECK(::fstat(in.fd, &st) == 0, "safetensors: cannot stat '", path, "'");
  return parse_safetensors_header(path, st.st_size,
                                  [&](void* out, size_t n, int64_t offset) { read_at(in.fd, out, n, offset, path); });
}

SafetensorsHeader parse_safetensors_header(const std::string& path, int64_t size, const ReadAt& read) {
  TORCH_CHECK(size >= 8, "safetensors: '", path, "' is ", size, " bytes, shorter than the 8-byte header length");
  unsigned char len[8];
  read(len, 8, 0);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  TORCH_CHECK(n <= static_cast<uint64_t>(kMaxHeaderBytes) && static_cast<int64_t>(n) <= size - 8, "safetensors: '", path,
              "' claims a header of ", n, " bytes but the file has ", size - 8, " after the length");
  std::string text(n, '\0');
  read(text.data(), n, 8);
  nlohmann::json j;
  try {
    j = parse_json(text, "safetensors: '" + path + "' header");
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "safetensors: '", path, "' has a header that is not JSON: ", e.what());
  }
  TORCH_CHECK(j.is_object(), "safetensors: '", path, "': the header is not a JSON object");
  SafetensorsHeader h;
  h.path = path;
  h.data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_size = size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      TORCH_CHECK(v.is_object(), "safetensors: '", path, "': __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        TORCH_CHECK(m.value().is_string(), "safetensors: '", path, "': metadata '", m.key(), "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    TORCH_CHECK(name.size() <= kMaxTensorNameBytes, "safetensors: '", path, "': a tensor name of ", name.size(),
                " bytes (at most ", kMaxTensorNameBytes, "), starting '", name.substr(0, 40), "'");
    const auto bad = [&](const std::string& what) { TORCH_CHECK(false, "safetensors: '", path, "', tensor '", name, "': ", what); };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) bad("needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) bad("dtype is not a string");
    SafetensorsEntry e;
    e.name = name;
    try {
      e.dtype = dtype_from_safetensors(v["dtype"].get<std::string>());
    } catch (const c10::Error& err) {
      bad(err.what_without_backtrace());
    }
    if (!v["shape"].is_array()) bad("shape is not an array");
    int64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("shape has a negative or non-integer dimension");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 40) || (dim > 0 && static_cast<uint64_t>(numel) > (uint64_t{1} << 50) / dim)) bad("shape is absurdly large");
      numel *= static_cast<int64_t>(dim);
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets is not two non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (b > en || en > static_cast<uint64_t>(data_size))
      bad("data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + ") lie outside the " + std::to_string(data_size) + "-byte data area");
    e.begin = static_cast<int64_t>(b), e.end = static_cast<int64_t>(en);
    const int64_t want = numel * static_cast<int64_t>(c10::elementSize(e.dtype));
    if (e.end - e.begin != want)
      bad("covers " + std::to_string(e.end - e.begin) + " bytes but its dtype and shape need " + std::to_string(want));
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const auto& a, const auto& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  int64_t cursor = 0;
  for (const auto& e : h.entries) {
    TORCH_CHECK(e.begin == cursor, "safetensors: '", path, "': tensor '", e.name, "' starts at byte ", e.begin, " of the data area, expected ",
                cursor, e.begin < cursor ? " (it overlaps the previous tensor)" : " (a hole precedes it)");
    cursor = e.end;
  }
  TORCH_CHECK(cursor == data_size, "safetensors: '", path, "': the tensors cover ", cursor, " bytes but the data area has ", data_size,
              " (truncated or trailing bytes)");
  return h;
}

at::Tensor read_safetensors_rows(const SafetensorsHeader& h, const std::string& name, int64_t row_begin, int64_t rows,
                                 const ReadAt& read) {
  const SafetensorsEntry& e = h.at(name);
  TORCH_CHECK(!e.shape.empty() || (row_begin == 0 && rows == 1), "safetensors: '", h.path, "', tensor '", name, "' is a scalar");
  const int64_t total_rows = e.shape.empty() ? 1 : e.shape[0];
  TORCH_CHECK(row_begin >= 0 && rows >= 0 && row_begin <= total_rows && rows <= total_rows - row_begin, "safetensors: '",
              h.path, "', tensor '", name, "': rows [", row_begin, ", ", row_begin + rows, ") outside its ", total_rows);
  std::vector<int64_t> shape = e.shape;
  if (!shape.empty()) shape[0] = rows;
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(e.dtype));
  const int64_t row_bytes = total_rows == 0 ? 0 : (e.end - e.begin) / total_rows;
  if (out.nbytes() == 0) return out;
  read(out.mutable_data_ptr(), out.nbytes(), h.data_start + e.begin + row_begin * row_bytes);
  return out;
}

at::Tensor read_safetensors_rows(const SafetensorsHeader& h, const std::string& name, int64_t row_begin, int64_t rows) {
  Fd in;
  in.fd = open_read(h.path);
  return read_safetensors_rows(h, name, row_begin, rows,
                               [&](void* out, size_t n, int64_t offset) { read_at(in.fd, out, n, offset, h.path); });
}

at::Tensor read_safetensors_tensor(const SafetensorsHeader& h, const std::string& name) {
  const SafetensorsEntry& e = h.at(name);
  return read_safetensors_rows(h, name, 0, e.shape.empty() ? 1 : e.shape[0]);
}

}  // namespace mfsdp
