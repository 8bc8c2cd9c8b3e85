// The safetensors reader and writer: round trips of every supported dtype, row-range reads, and
// clear errors (naming the file) for every way a header can lie.
#include "core/util/errors.h"
#include "core/util/files.h"
#include "core/io/safetensors.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace mfsdp {
namespace {

std::filesystem::path temp_dir() {
  return std::filesystem::temp_directory_path() / ("mfsdp_st_" + std::to_string(::getpid()));
}

std::string temp_path(const std::string& name) {
  std::filesystem::create_directories(temp_dir());
  return (temp_dir() / name).string();
}

// Removes this process's scratch directory (flat) when a test ends. POSIX calls on purpose:
// libtorch.so exports its own std::filesystem::remove_all, which crashes when it interposes ours
// (docs/gloo-notes.md).
struct Scratch {
  ~Scratch() {
    const std::string dir = temp_dir().string();
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ::unlink((dir + "/" + e->d_name).c_str());
      ::closedir(d);
    }
    ::rmdir(dir.c_str());
  }
};

std::string slurp(const std::string& path) { return read_file(path, "test"); }

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A file with a header written by hand: 8-byte length, JSON, data.
std::string hand_made(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + json + data;
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  Scratch scratch;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (c10::ScalarType t : {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong, at::kInt, at::kShort, at::kChar,
                            at::kByte, at::kBool})
    tensors.emplace_back(std::string("t.") + safetensors_dtype(t), at::arange(24).reshape({4, 6}).to(t));
  tensors.emplace_back("empty", at::randn({0, 3}));
  tensors.emplace_back("strided", at::randn({5, 4}).t());  // not contiguous
  const std::string path = temp_path("round.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}, {"step", "7"}});
  const SafetensorsHeader h = read_safetensors_header(path);
  EXPECT_EQ(h.metadata.at("step"), "7");
  EXPECT_EQ(h.data_start % 8, 0);
  for (const auto& [name, t] : tensors) {
    at::Tensor back = read_safetensors_tensor(h, name);
    EXPECT_TRUE(back.scalar_type() == t.scalar_type() && at::equal(back, t.contiguous())) << name;
  }
  at::Tensor rows = read_safetensors_rows(h, "t.F32", 1, 2);
  EXPECT_TRUE(at::equal(rows, tensors[1].second.narrow(0, 1, 2)));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST(Safetensors, EveryLieInAHeaderIsAClearError) {
  Scratch scratch;
  const std::string path = temp_path("bad.safetensors");
  const std::string data(16, '\x01');
  struct Case {
    std::string bytes, message;
  };
  const std::vector<Case> cases{
      {"abc", "shorter than the 8-byte header length"},
      {hand_made("{}", "").substr(0, 8), "claims a header of 2 bytes but the file has 0"},
      {hand_made("not json", ""), "header that is not JSON"},
      {hand_made(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data.substr(0, 12)),
       "lie outside the 12-byte data area"},
      {hand_made(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data), "covers 16 bytes but its dtype and shape need 12"},
      {hand_made(R"({"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", data), "unknown or unsupported dtype 'Q7'"},
      {hand_made(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data), "negative or non-integer dimension"},
      {hand_made(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                 data.substr(0, 12)),
       "overlaps the previous tensor"},
      {hand_made(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data), "a hole precedes it"},
      {hand_made(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data), "truncated or trailing bytes"},
      {hand_made(R"({"a":{"dtype":"F32","shape":[2]}})", data), "needs dtype, shape and data_offsets"},
  };
  for (const Case& c : cases) {
    spit(path, c.bytes);
    const std::string err = error_of([&] { read_safetensors_header(path); });
    EXPECT_NE(err.find(c.message), std::string::npos) << "expected '" << c.message << "', got: " << err;
    EXPECT_NE(err.find(path), std::string::npos) << "error does not name the file: " << err;
  }
  EXPECT_NE(error_of([&] { read_safetensors_header(temp_path("missing.safetensors")); }).find("cannot read"), std::string::npos);
}

// Mutated and truncated files: the reader either returns a header whose every tensor reads back,
// or throws c10::Error; it never crashes or reads outside the file. (Run the binary built with
// -fsanitize=address,undefined to check the last part; see docs/checkpoints.md.)
RC_GTEST_PROP(SafetensorsFuzz, MutatedFilesNeverCrashTheReader, ()) {
  const std::string path = temp_path("fuzz.safetensors");
  static const std::string valid = [] {
    const std::string p = temp_path("fuzz_seed.safetensors");
    write_safetensors(p, {{"w", at::arange(12, at::kFloat).reshape({3, 4})}, {"b", at::arange(5, at::kLong)}}, {{"k", "v"}});
    return slurp(p);
  }();
  std::string bytes = valid;
  const int flips = *rc::gen::inRange(0, 8);
  for (int i = 0; i < flips; ++i) {
    const size_t at = *rc::gen::inRange<size_t>(0, bytes.size());
    bytes[at] = *rc::gen::arbitrary<char>();
  }
  if (*rc::gen::arbitrary<bool>()) bytes.resize(*rc::gen::inRange<size_t>(0, bytes.size() + 1));
  Scratch scratch;
  spit(path, bytes);
  try {
    const SafetensorsHeader h = read_safetensors_header(path);
    for (const auto& e : h.entries) read_safetensors_tensor(h, e.name);
  } catch (const c10::Error&) {
    // a clear error is the other allowed outcome
  }
}

}  // namespace
}  // namespace mfsdp
