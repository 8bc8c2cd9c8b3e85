// Writes the inputs and the C++ results of Muon and AdamW for several shapes, so that
// check_optim.py can run the real torch.optim.Muon / torch.optim.AdamW on the same tensors and
// compare bit for bit. Usage: optim_conformance_dump OUTDIR
#include "core/dist/determinism.h"
#include "core/optim/optim.h"

#include <ATen/ops/empty.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

using namespace mfsdp;

namespace {

void write(const std::string& path, const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.const_data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  constexpr int kSteps = 6;
  const std::vector<std::vector<int64_t>> shapes{{32, 32}, {48, 16}, {16, 48}, {1, 40}, {40, 1}, {7, 13}};
  nlohmann::json manifest = nlohmann::json::array();
  at::Generator gen = make_shared_generator(2024);
  int id = 0;
  for (const auto& shape : shapes) {
    for (const std::string optimizer : {"muon", "muon_match_rms", "adamw"}) {
      at::Tensor p0 = at::empty(shape, at::kFloat).normal_(0, 0.5, gen);
      std::vector<at::Tensor> grads;
      for (int s = 0; s < kSteps; ++s) grads.push_back(at::empty(shape, at::kFloat).normal_(0, 1, gen));
      at::Tensor p = p0.clone();
      std::unique_ptr<TensorOptimizer> opt;
      MuonOptions m;
      m.lr = 0.02;
      AdamWOptions a;
      a.lr = 3e-3;
      if (optimizer == "muon") opt = make_muon(m, shape);
      if (optimizer == "muon_match_rms") {
        m.adjust_lr = MuonLrAdjustment::match_rms_adamw;
        opt = make_muon(m, shape);
      }
      if (optimizer == "adamw") opt = make_adamw(a);
      for (int s = 0; s < kSteps; ++s) opt->step(p, grads[s]);
      const std::string prefix = dir + "/case" + std::to_string(id);
      write(prefix + "_p0.bin", p0);
      for (int s = 0; s < kSteps; ++s) write(prefix + "_g" + std::to_string(s) + ".bin", grads[s]);
      write(prefix + "_final.bin", p);
      for (const auto& [name, t] : opt->state()) write(prefix + "_state_" + name + ".bin", t);
      manifest.push_back({{"id", id}, {"optimizer", optimizer}, {"shape", shape}, {"steps", kSteps},
                          {"lr", optimizer == "adamw" ? a.lr : m.lr}});
      ++id;
    }
  }
  std::ofstream(dir + "/manifest.json") << manifest.dump(2);
  std::printf("wrote %d cases to %s\n", id, dir.c_str());
  return 0;
}
