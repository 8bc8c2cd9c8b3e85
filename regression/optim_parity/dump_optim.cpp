// Writes the inputs and the C++ results of Muon and AdamW for several shapes and hyperparameters, so that
// check_optim.py can run the real torch.optim.Muon / torch.optim.AdamW on the same tensors and
// compare bit for bit. Usage: optim_parity_dump OUTDIR
#include "core/dist/determinism.h"
#include "core/optim/optim.h"
#include "regression/optim_parity/write_raw.h"

#include <ATen/ops/empty.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

using namespace mfsdp;

namespace {

using optim_parity::write_raw;

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = optim_parity::out_dir_arg(argc, argv);
  constexpr int kSteps = 6;
  const std::vector<std::vector<int64_t>> shapes{{32, 32}, {48, 16}, {16, 48}, {1, 40}, {40, 1}, {7, 13}};
  nlohmann::json manifest = nlohmann::json::array();
  at::Generator gen = make_shared_generator(2024);
  int id = 0;
  // Each variant: the defaults, then every hyperparameter the CLI or a parameter group can change
  // away from its default (momentum, Nesterov off, weight decay, eps, Newton-Schulz steps and
  // coefficients, lr adjustment; AdamW's betas, eps, weight decay).
  struct Variant {
    std::string name;
    std::string optimizer;  // muon | adamw
    MuonOptions muon;
    AdamWOptions adamw;
  };
  std::vector<Variant> variants;
  {
    Variant v{"muon", "muon", {}, {}};
    v.muon.lr = 0.02;
    variants.push_back(v);
    v.name = "muon_match_rms";
    v.muon.adjust_lr = MuonLrAdjustment::match_rms_adamw;
    variants.push_back(v);
    v = Variant{"muon_custom", "muon", {}, {}};
    v.muon.lr = 0.05;
    v.muon.momentum = 0.8;
    v.muon.nesterov = false;
    v.muon.weight_decay = 0.03;
    v.muon.eps = 1e-5;
    v.muon.ns_steps = 3;
    v.muon.ns_a = 3.0, v.muon.ns_b = -3.2, v.muon.ns_c = 1.2;
    variants.push_back(v);
    v = Variant{"muon_no_wd_no_momentum", "muon", {}, {}};
    v.muon.lr = 0.01;
    v.muon.momentum = 0.0;
    v.muon.weight_decay = 0.0;
    variants.push_back(v);
    v = Variant{"adamw", "adamw", {}, {}};
    v.adamw.lr = 3e-3;
    variants.push_back(v);
    v = Variant{"adamw_custom", "adamw", {}, {}};
    v.adamw.lr = 1e-2;
    v.adamw.beta1 = 0.8;
    v.adamw.beta2 = 0.95;
    v.adamw.eps = 1e-6;
    v.adamw.weight_decay = 0.1;
    variants.push_back(v);
    v = Variant{"adamw_no_wd", "adamw", {}, {}};
    v.adamw.lr = 1e-3;
    v.adamw.beta1 = 0.0;
    v.adamw.beta2 = 0.5;
    v.adamw.weight_decay = 0.0;
    variants.push_back(v);
  }
  for (const auto& shape : shapes) {
    for (const Variant& v : variants) {
      at::Tensor p0 = at::empty(shape, at::kFloat).normal_(0, 0.5, gen);
      std::vector<at::Tensor> grads;
      for (int s = 0; s < kSteps; ++s) grads.push_back(at::empty(shape, at::kFloat).normal_(0, 1, gen));
      at::Tensor p = p0.clone();
      std::unique_ptr<TensorOptimizer> opt = v.optimizer == "muon" ? make_muon(v.muon, shape) : make_adamw(v.adamw);
      for (int s = 0; s < kSteps; ++s) opt->step(p, grads[s]);
      const std::string prefix = dir + "/case" + std::to_string(id);
      write_raw(prefix + "_p0.bin", p0);
      for (int s = 0; s < kSteps; ++s) write_raw(prefix + "_g" + std::to_string(s) + ".bin", grads[s]);
      write_raw(prefix + "_final.bin", p);
      for (const auto& [name, t] : opt->state()) write_raw(prefix + "_state_" + name + ".bin", t);
      nlohmann::json hyper;
      if (v.optimizer == "muon")
        hyper = {{"lr", v.muon.lr}, {"momentum", v.muon.momentum}, {"nesterov", v.muon.nesterov},
                 {"weight_decay", v.muon.weight_decay}, {"eps", v.muon.eps}, {"ns_steps", v.muon.ns_steps},
                 {"ns_coefficients", {v.muon.ns_a, v.muon.ns_b, v.muon.ns_c}},
                 {"adjust_lr_fn", v.muon.adjust_lr == MuonLrAdjustment::match_rms_adamw ? "match_rms_adamw" : "original"}};
      else
        hyper = {{"lr", v.adamw.lr}, {"betas", {v.adamw.beta1, v.adamw.beta2}}, {"eps", v.adamw.eps},
                 {"weight_decay", v.adamw.weight_decay}};
      manifest.push_back({{"id", id}, {"name", v.name}, {"optimizer", v.optimizer}, {"shape", shape}, {"steps", kSteps},
                          {"hyper", hyper}});
      ++id;
    }
  }
  std::ofstream(dir + "/manifest.json") << manifest.dump(2);
  std::printf("wrote %d cases to %s\n", id, dir.c_str());
  return 0;
}
