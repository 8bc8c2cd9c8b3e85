// What `mfsdp train` starts from, written for ground_truth.py to compare with its own PyTorch
// rebuild: the tiny model's initial parameters (TransformerModel::init, the call train_loop makes)
// and every rank's batch of every step (ByteCorpus::batch, likewise).
// Usage: torch_ground_truth_dump OUTDIR SEED STEPS WORLD_SIZE BATCH SEQ
// Writes OUTDIR/init.safetensors (parameter names as the model's) and OUTDIR/batches.safetensors
// (tokens.s<step>.r<rank>, targets.s<step>.r<rank>, int64).
#include "core/io/safetensors.h"
#include "core/train/data.h"
#include "core/train/model.h"

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace mfsdp;

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s OUTDIR SEED STEPS WORLD_SIZE BATCH SEQ\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  const int steps = std::atoi(argv[3]), world_size = std::atoi(argv[4]);
  const int64_t batch = std::atoll(argv[5]), seq = std::atoll(argv[6]);
  const TransformerModel model(preset_config("tiny"));
  std::vector<std::pair<std::string, at::Tensor>> init;
  for (const auto& [name, t] : model.init(seed)) init.emplace_back(name, t);
  write_safetensors(dir + "/init.safetensors", init);
  const ByteCorpus corpus = ByteCorpus::load();
  std::vector<std::pair<std::string, at::Tensor>> batches;
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world_size; ++r) {
      auto [tokens, targets] = corpus.batch(seed, s, r, batch, seq);
      const std::string key = ".s" + std::to_string(s) + ".r" + std::to_string(r);
      batches.emplace_back("tokens" + key, tokens);
      batches.emplace_back("targets" + key, targets);
    }
  }
  write_safetensors(dir + "/batches.safetensors", batches);
  std::printf("wrote %zu parameters and %zu batches to %s\n", init.size(), batches.size() / 2, dir.c_str());
  return 0;
}
