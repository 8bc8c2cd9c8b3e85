#include "core/train/data.h"

#include "core/util/crc32.h"
#include "core/util/files.h"
#include "core/dist/determinism.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/randint.h>
#include <c10/util/Exception.h>

#include <sys/stat.h>


namespace mfsdp {

void check_corpus(const std::string& path, int64_t seq, const std::string& what) {
  const std::string data = path.empty() ? kDefaultCorpus : path;
  check_input_file(data, what, int64_t{1} << 30);
  struct stat st {};
  TORCH_CHECK(::stat(data.c_str(), &st) == 0 && st.st_size >= seq + 1, what, ": '", data, "' has ",
              static_cast<int64_t>(st.st_size), " bytes; a sequence of --seq ", seq, " needs ", seq + 1);
}
namespace {

// The corpus is read whole into memory; a larger file is refused rather than exhausting it.
constexpr int64_t kMaxCorpusBytes = int64_t{1} << 30;

}  // namespace

ByteCorpus ByteCorpus::load(const std::string& path) {
  ByteCorpus c;
  c.path_ = path.empty() ? kDefaultCorpus : path;
  TORCH_CHECK(!path.empty() || path_exists(c.path_), "data: cannot read '", c.path_,
              "' (the default corpus from Debian's base-files; pass --data FILE)");
  const std::string text = read_file(c.path_, "data", kMaxCorpusBytes);
  c.bytes_.assign(text.begin(), text.end());
  TORCH_CHECK(c.bytes_.size() >= 2, "data: '", c.path_, "' has ", c.bytes_.size(), " bytes; need at least 2");
  c.crc32_ = mfsdp::crc32(c.bytes_.data(), c.bytes_.size());
  return c;
}

std::pair<at::Tensor, at::Tensor> ByteCorpus::batch(uint64_t seed, int64_t step, int rank, int64_t B, int64_t S) const {
  TORCH_CHECK(B > 0 && S > 0, "data: batch and sequence length must be positive");
  TORCH_CHECK(S + 1 <= size(), "data: sequence length ", S, " needs ", S + 1, " bytes but '", path_, "' has ", size());
  at::Generator gen = make_rank_generator(seed * 1000003ull + static_cast<uint64_t>(step), rank);
  at::Tensor starts = at::randint(size() - S, {B}, gen, at::TensorOptions().dtype(at::kLong));
  at::Tensor tokens = at::empty({B, S}, at::TensorOptions().dtype(at::kLong));
  at::Tensor targets = at::empty({B, S}, at::TensorOptions().dtype(at::kLong));
  auto* tk = tokens.mutable_data_ptr<int64_t>();
  auto* tg = targets.mutable_data_ptr<int64_t>();
  const auto* st = starts.const_data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      tk[b * S + s] = bytes_[st[b] + s];
      tg[b * S + s] = bytes_[st[b] + s + 1];
    }
  }
  return {tokens, targets};
}

}  // namespace mfsdp
