// The safetensors file format (https://huggingface.co/docs/safetensors), read and written without
// Python: an 8-byte little-endian header length N, N bytes of JSON ({"__metadata__": {str: str},
// name: {"dtype", "shape", "data_offsets": [begin, end]}}), then the tensor bytes, contiguous,
// little-endian, row-major, covering the data area exactly.
//
// The reader trusts nothing: every header field is checked against the file's real size, the dtype
// sizes and the other tensors (no overlap, no hole), and errors name the file and what is wrong.
// Tensors are read one byte range at a time, so a reader never loads a whole file it does not need.
#pragma once

#include "core/plan/dtype_names.h"
#include "core/util/files.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mfsdp {

struct SafetensorsEntry {
  std::string name;
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets in the data area
};

struct SafetensorsHeader {
  std::string path;
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> entries;  // in data-offset order
  int64_t data_start = 0;                 // file offset of the data area
  const SafetensorsEntry& at(const std::string& name) const;  // throws naming file and tensor
};

// Writes `tensors` (any order; stored sorted by name, as the Python library does) and `metadata`
// to `path` atomically: a temporary file in the same directory, fsync, rename. Tensors may live on
// any device and need not be contiguous. `scope`: a file a flag names (the path rule's checks,
// core/util/files.h) or one inside a directory this process writes (a checkpoint, a dump).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       WriteScope scope = WriteScope::user_output);

// Parses and validates the header of `path`.
SafetensorsHeader read_safetensors_header(const std::string& path);
// The same from any byte source: `read(out, n, offset)` fills n bytes at file offset `offset` of a
// file of `file_size` bytes (for readers that verify checksums as they read); `path` names it.
using ReadAt = std::function<void(void* out, size_t n, int64_t offset)>;
SafetensorsHeader parse_safetensors_header(const std::string& path, int64_t file_size, const ReadAt& read);

// Reads one tensor (CPU), or rows [row_begin, row_begin + rows) of it, reading only those bytes.
at::Tensor read_safetensors_tensor(const SafetensorsHeader& header, const std::string& name);
at::Tensor read_safetensors_rows(const SafetensorsHeader& header, const std::string& name, int64_t row_begin, int64_t rows);
// The same through `read` (see parse_safetensors_header).
at::Tensor read_safetensors_rows(const SafetensorsHeader& header, const std::string& name, int64_t row_begin, int64_t rows,
                                 const ReadAt& read);

}  // namespace mfsdp
