// Fuzzes the checkpoint readers — layout.json's strict parser and the safetensors reader (header,
// row reads, checksummed reads) — with mutated copies of a real checkpoint's files. Built with
// AddressSanitizer and UndefinedBehaviorSanitizer (this target's sources only; libtorch is not
// instrumented). Every input must end in the reader's result or its c10::Error: nothing else.
//
// fuzz_readers CHECKPOINT_STEP_DIR INPUTS [SEED]
#include "core/util/files.h"
#include "core/io/checkpoint_format.h"
#include "core/io/safetensors.h"

#include <c10/util/Exception.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

namespace {

using mfsdp::FileManifest;

std::string slurp(const std::string& path) {
  try {
    return mfsdp::read_file(path, "fuzz");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: %s\n", e.what());
    std::exit(2);
  }
}

// Byte-level mutations: flips, random bytes, inserted and deleted runs, truncation, and numbers
// replaced by boundary values.
std::string mutate_bytes(std::string s, std::mt19937_64& rng) {
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const size_t at = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 7) {
      case 0: if (!s.empty()) s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8))); break;
      case 1: if (!s.empty()) s[at] = static_cast<char>(rng()); break;
      case 2: s.insert(at, std::string(1 + rng() % 16, static_cast<char>(rng()))); break;
      case 3: s.erase(at, rng() % 64); break;
      case 4: s.resize(at); break;
      case 5: if (!s.empty()) s.insert(at, s.substr(rng() % s.size(), rng() % 32)); break;
      default: {
        static const char* numbers[] = {"0", "-1", "4294967295", "9223372036854775807", "18446744073709551615",
                                        "99999999999999999999999", "1e308", "-0", "3.5"};
        size_t d = s.find_first_of("0123456789", at);
        if (d == std::string::npos) break;
        size_t e = s.find_first_not_of("0123456789", d);
        s.replace(d, (e == std::string::npos ? s.size() : e) - d, numbers[rng() % 9]);
      }
    }
  }
  return s;
}

// Structure-aware mutation of JSON: a random node replaced by a value of another type or a
// boundary value, or a random key removed — reaches the validation behind the JSON syntax.
void mutate_json(nlohmann::json& j, std::mt19937_64& rng, int depth = 0) {
  if ((j.is_object() || j.is_array()) && !j.empty() && depth < 12 && rng() % 5 != 0) {
    if (j.is_object() && rng() % 8 == 0) {
      auto it = j.begin();
      std::advance(it, static_cast<long>(rng() % j.size()));
      j.erase(it);
      return;
    }
    auto it = j.begin();
    std::advance(it, static_cast<long>(rng() % j.size()));
    mutate_json(*it, rng, depth + 1);
    return;
  }
  switch (rng() % 10) {
    case 0: j = nullptr; break;
    case 1: j = -1; break;
    case 2: j = 0; break;
    case 3: j = (uint64_t{1} << 63) + 5; break;
    case 4: j = static_cast<int64_t>(rng() % 1000); break;
    case 5: j = "../x"; break;
    case 6: j = nlohmann::json::array(); break;
    case 7: j = nlohmann::json::object(); break;
    case 8: j = 1.5; break;
    default: j = j.is_number_integer() ? nlohmann::json(j.get<int64_t>() + 1) : nlohmann::json("step_1"); break;
  }
}

struct Counts {
  long accepted = 0, rejected = 0;
};

// Runs `f`; a c10::Error is a rejection, anything else escapes and ends the run.
template <typename F>
void run(Counts& c, F&& f) {
  try {
    f();
    ++c.accepted;
  } catch (const c10::Error&) {
    ++c.rejected;
  }
}

void read_every_tensor(const mfsdp::SafetensorsHeader& h, const mfsdp::ReadAt& read, std::mt19937_64& rng) {
  for (const auto& e : h.entries) {
    const int64_t rows = e.shape.empty() ? 1 : e.shape[0];
    mfsdp::read_safetensors_rows(h, e.name, 0, rows, read);
    if (rows > 0) {
      const int64_t b = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
      mfsdp::read_safetensors_rows(h, e.name, b, static_cast<int64_t>(rng() % static_cast<uint64_t>(rows - b + 2)), read);
    }
  }
}

}  // namespace

// `text` with its layout_crc32 seal recomputed, or unchanged when it has no single intact seal field.
std::string resealed(const std::string& text) {
  try {
    return mfsdp::seal_layout(text);
  } catch (const c10::Error&) {
    return text;
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_readers CHECKPOINT_STEP_DIR INPUTS [SEED]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const long inputs = std::atol(argv[2]);
  std::mt19937_64 rng(argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1);
  const std::string layout_text = slurp(dir + "/layout.json");
  const std::string tensors = slurp(dir + "/rank_00000.safetensors");
  const nlohmann::json layout_json = nlohmann::json::parse(layout_text);
  // The seeds must be valid, or the fuzzing would start from a rejection.
  mfsdp::parse_layout(layout_text, "seed layout.json");
  char tmpl[] = "/tmp/mfsdp_fuzz_XXXXXX";
  const std::string work = ::mkdtemp(tmpl);

  Counts layout_bytes, layout_struct, st_memory, st_file;
  for (long i = 0; i < inputs; ++i) {
    switch (i % 4) {
      case 0: {
        // Half resealed: the seal refuses every changed byte, so without a fresh seal the strict
        // parser behind it would never see a mutated input.
        const std::string text = (i / 4) % 2 ? mutate_bytes(layout_text, rng) : resealed(mutate_bytes(layout_text, rng));
        run(layout_bytes, [&] { mfsdp::parse_layout(text, "fuzz layout.json"); });
        break;
      }
      case 1: {
        nlohmann::json j = layout_json;
        for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) mutate_json(j, rng);
        const std::string text = resealed(j.dump(1));
        run(layout_struct, [&] { mfsdp::parse_layout(text, "fuzz layout.json"); });
        break;
      }
      case 2: {  // the safetensors reader over memory
        const std::string bytes = mutate_bytes(tensors, rng);
        const mfsdp::ReadAt read = [&](void* out, size_t n, int64_t offset) {
          TORCH_CHECK(offset >= 0 && static_cast<size_t>(offset) <= bytes.size() && n <= bytes.size() - static_cast<size_t>(offset),
                      "fuzz: read past the end");
          std::memcpy(out, bytes.data() + offset, n);
        };
        run(st_memory, [&] {
          const mfsdp::SafetensorsHeader h = mfsdp::parse_safetensors_header("fuzz.safetensors", static_cast<int64_t>(bytes.size()), read);
          read_every_tensor(h, read, rng);
        });
        break;
      }
      default: {  // a mutated file behind the checksummed reader, with the original's or its own manifest
        const std::string bytes = mutate_bytes(tensors, rng);
        const std::string name = "rank_00000.safetensors";
        {
          std::ofstream out(work + "/" + name, std::ios::binary | std::ios::trunc);
          out << bytes;
        }
        FileManifest m = mfsdp::compute_manifest(work, name);
        if (rng() % 2 == 0) m = mfsdp::compute_manifest(dir, name);  // checksums of the original
        run(st_file, [&] {
          mfsdp::VerifiedFile f(work, m);
          const mfsdp::SafetensorsHeader& h = f.header();
          for (const auto& e : h.entries) f.read_tensor(e.name);
          f.verify_all();
        });
      }
    }
  }
  ::unlink((work + "/rank_00000.safetensors").c_str());
  ::rmdir(work.c_str());
  std::printf(
      "fuzz: %ld inputs under ASan+UBSan, no crash: layout.json byte-mutated %ld (%ld accepted), structure-mutated %ld "
      "(%ld accepted); safetensors in memory %ld (%ld accepted), through the checksummed reader %ld (%ld accepted)\n",
      inputs, layout_bytes.accepted + layout_bytes.rejected, layout_bytes.accepted,
      layout_struct.accepted + layout_struct.rejected, layout_struct.accepted, st_memory.accepted + st_memory.rejected,
      st_memory.accepted, st_file.accepted + st_file.rejected, st_file.accepted);
  return 0;
}
