// What `mfsdp train` starts from, written for ground_truth.py to compare with its own PyTorch
// rebuild: the tiny model's initial parameters (TransformerModel::init, the call train_loop makes)
// and every rank's batch of every step (ByteCorpus::batch, likewise).
// Usage: torch_ground_truth_dump OUTDIR SEED STEPS WORLD_SIZE BATCH SEQ
// Writes OUTDIR/init.safetensors (parameter names as the model's) and OUTDIR/batches.safetensors
// (tokens.s<step>.r<rank>, targets.s<step>.r<rank>, int64), and OUTDIR/lr_schedules.json: for each
// schedule of a fixed table, the learning rates base · λ(t) an optimizer steps with for t = 0 ..
// kScheduleSteps - 1 (as TensorOptimizer::set_lr_factor forms them), as exact hexadecimal doubles.
#include "core/io/safetensors.h"
#include "core/optim/lr_schedule.h"
#include "core/train/data.h"
#include "core/train/model.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

using namespace mfsdp;

namespace {

constexpr int64_t kScheduleSteps = 300;

// Every schedule kind, with and without warm-up, a floor, wsd's stable phase, a decay that ends
// well before the last step, and a decay length left to its default.
std::vector<LrSchedule> schedule_table() {
  auto make = [](LrScheduleKind k, int64_t warmup, int64_t stable, std::optional<int64_t> decay, double min_ratio) {
    LrSchedule s;
    s.kind = k, s.warmup_steps = warmup, s.stable_steps = stable, s.decay_steps = decay, s.min_lr_ratio = min_ratio;
    return resolve_decay_steps(s, kScheduleSteps);
  };
  using K = LrScheduleKind;
  return {make(K::constant, 0, 0, std::nullopt, 0),      make(K::constant, 5, 0, std::nullopt, 0),
          make(K::warmup_cosine, 10, 0, 100, 0),         make(K::warmup_cosine, 0, 0, 37, 0.1),
          make(K::warmup_cosine, 3, 0, std::nullopt, 0.05), make(K::warmup_linear, 10, 0, 100, 0),
          make(K::warmup_linear, 7, 0, 50, 0.2),         make(K::wsd, 10, 50, 40, 0),
          make(K::wsd, 0, 5, 3, 0.1),                    make(K::wsd, 2, 100, std::nullopt, 0.01)};
}

std::string hex(double x) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%a", x);
  return buf;
}

void write_schedules(const std::string& path) {
  nlohmann::json out = nlohmann::json::array();
  for (const LrSchedule& s : schedule_table()) {
    for (double base : {0.02, 3e-3}) {  // Muon's and AdamW's defaults (training_defaults())
      nlohmann::json lrs = nlohmann::json::array();
      for (int64_t t = 0; t < kScheduleSteps; ++t) lrs.push_back(hex(base * lr_lambda(s, t)));
      nlohmann::json j = lr_schedule_to_json(s, 0);
      j.erase("steps_taken");
      j["base_lr"] = hex(base), j["lrs"] = lrs;
      out.push_back(j);
    }
  }
  std::ofstream(path) << out.dump(1) << "\n";
}

}  // namespace

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
  write_schedules(dir + "/lr_schedules.json");
  std::printf("wrote %zu parameters, %zu batches and %zu learning-rate schedules to %s\n", init.size(), batches.size() / 2,
              schedule_table().size(), dir.c_str());
  return 0;
}
