// The embedded default dataset: a real text read byte by byte (vocabulary 256), sampled
// deterministically per (seed, step, rank) so the runtime and the oracle see the same batches.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mfsdp {

// The GNU GPL v3 text that every Debian system ships (package base-files), about 35 KB.
constexpr const char* kDefaultCorpus = "/usr/share/common-licenses/GPL-3";

// Checks, before any rank starts, that the corpus at `path` (kDefaultCorpus when empty) is a
// readable regular file of at most 1 GiB holding one sequence of `seq` tokens and its target;
// throws a message starting with `what` otherwise.
void check_corpus(const std::string& path, int64_t seq, const std::string& what);

class ByteCorpus {
 public:
  // Reads `path` (kDefaultCorpus when empty); throws naming the file when unreadable or shorter
  // than 2 bytes.
  static ByteCorpus load(const std::string& path = "");

  const std::string& path() const { return path_; }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  uint32_t crc32() const { return crc32_; }  // of the whole text (checkpoints record it)

  // Rank `rank`'s micro-batch for `step`: B windows of S + 1 bytes at offsets drawn from a
  // generator seeded by (seed, step, rank); returns (tokens [B, S], targets [B, S]) as int64.
  std::pair<at::Tensor, at::Tensor> batch(uint64_t seed, int64_t step, int rank, int64_t batch, int64_t seq) const;

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
  uint32_t crc32_ = 0;
};

}  // namespace mfsdp
