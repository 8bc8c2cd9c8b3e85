// Writes every Newton–Schulz variant's table and coefficient sequence (ns_tables.json), and the
// inputs and outputs of orthogonalize() for the variants that have a counterpart to call
// (torch.optim.Muon's, pytorch-optimizer 4.1.0's zero_power_via_*), so that check_ns.py can pin
// every coefficient to its source and compare the outputs bit for bit; and NorMuon and AdaMuon
// trajectories (muon_family.json) for check_muon_family.py to rerun with pytorch-optimizer's.
// Usage: ns_parity_dump OUTDIR
#include "core/dist/determinism.h"
#include "core/optim/optim.h"
#include "regression/optim_parity/write_raw.h"

#include <ATen/ops/empty.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

using namespace mfsdp;

namespace {

const char* indexing_name(NsIndexing i) { return i == NsIndexing::cycle ? "cycle" : "repeat_last"; }

nlohmann::json triple(const NsTriple& t) { return nlohmann::json::array({t.a, t.b, t.c}); }

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = optim_parity::out_dir_arg(argc, argv);
  const MuonOptions defaults;
  const NsTriple torch_triple{defaults.ns_a, defaults.ns_b, defaults.ns_c};
  nlohmann::json tables = nlohmann::json::array();
  for (const NsVariantInfo& v : ns_variants()) {
    nlohmann::json table = nlohmann::json::array(), sequences = nlohmann::json::object();
    for (const NsTriple& t : v.table) table.push_back(triple(t));
    // The coefficients each step count uses: before, at and past the table's end.
    for (int steps = 1; steps <= 12; ++steps) {
      nlohmann::json seq = nlohmann::json::array();
      for (int i = 0; i < steps; ++i) seq.push_back(triple(ns_coefficients(v, i, torch_triple)));
      sequences[std::to_string(steps)] = seq;
    }
    tables.push_back({{"name", v.name}, {"source", v.source}, {"url", v.url}, {"table", table},
                      {"indexing", indexing_name(v.indexing)}, {"fixed_steps", v.fixed_steps},
                      {"steps_run", ns_steps_of(v, defaults.ns_steps)}, {"safety", v.safety},
                      {"eps", v.eps < 0 ? defaults.eps : v.eps}, {"sequences", sequences}});
  }
  std::ofstream(dir + "/ns_tables.json") << tables.dump(2);

  // Outputs: each shape (square, tall, wide, odd, a single row, a stack of experts either way) under
  // each comparable variant and step count (past the 8-triple tables' end; Gram before, at and after
  // its restart).
  struct Run {
    NsVariant variant;
    int steps;
  };
  const std::vector<Run> runs{{NsVariant::torch, 5},
                              {NsVariant::torch, 3},
                              {NsVariant::polar_express_pyopt, 5},
                              {NsVariant::polar_express_pyopt, 10},
                              {NsVariant::polar_express_safer_pyopt, 5},
                              {NsVariant::polar_express_safer_pyopt, 9},
                              {NsVariant::gram_pyopt, 5},
                              {NsVariant::gram_pyopt, 2},
                              {NsVariant::gram_pyopt, 3},
                              {NsVariant::gram_pyopt, 7},
                              {NsVariant::heavyball, 5}};
  const std::vector<std::vector<int64_t>> shapes{{32, 32}, {48, 16}, {16, 48}, {64, 192}, {192, 64}, {7, 13},
                                                 {1, 40},  {3, 24, 40}, {3, 40, 24}, {4, 16, 16}};
  at::Generator gen = make_shared_generator(4242);
  nlohmann::json manifest = nlohmann::json::array();
  int id = 0;
  for (const auto& shape : shapes) {
    const at::Tensor g = at::empty(shape, at::kFloat).normal_(0, 1, gen);
    for (const Run& r : runs) {
      MuonOptions o;
      o.ns_variant = r.variant;
      o.ns_steps = r.steps;
      const at::Tensor out = orthogonalize(g, o).to(at::kFloat);
      const std::string prefix = dir + "/ns" + std::to_string(id);
      optim_parity::write_raw(prefix + "_in.bin", g);
      optim_parity::write_raw(prefix + "_out.bin", out);
      manifest.push_back({{"id", id}, {"variant", to_string(r.variant)}, {"steps", r.steps}, {"shape", shape}});
      ++id;
    }
  }
  std::ofstream(dir + "/ns_manifest.json") << manifest.dump(2);

  // NorMuon and AdaMuon: defaults and every hyperparameter moved, with the Newton–Schulz variants
  // pytorch-optimizer's optimizers can call (its zero_power_via_newton_schulz_5 tables).
  struct Case {
    std::string name, optimizer;
    NorMuonOptions normuon;
    AdaMuonOptions adamuon;
    NsVariant variant = NsVariant::torch;
  };
  std::vector<Case> cases;
  cases.push_back({"normuon", "normuon", {}, {}});
  {
    Case c{"normuon_custom", "normuon", {}, {}};
    c.normuon.lr = 0.05, c.normuon.weight_decay = 0.1, c.normuon.momentum = 0.8, c.normuon.beta2 = 0.9;
    c.normuon.nesterov = false, c.normuon.eps = 1e-6;
    cases.push_back(c);
    c = Case{"normuon_match_rms", "normuon", {}, {}};
    c.normuon.update_scale = NorMuonScale::match_rms;
    cases.push_back(c);
    c = Case{"normuon_moonlight_lr_polar_express", "normuon", {}, {}, NsVariant::polar_express_pyopt};
    c.normuon.adjust_lr = MuonLrAdjustment::match_rms_adamw;
    cases.push_back(c);
  }
  cases.push_back({"adamuon", "adamuon", {}, {}});
  {
    Case c{"adamuon_custom", "adamuon", {}, {}};
    c.adamuon.lr = 0.01, c.adamuon.beta1 = 0.8, c.adamuon.beta2 = 0.99, c.adamuon.weight_decay = 0.05, c.adamuon.eps = 1e-6;
    cases.push_back(c);
    c = Case{"adamuon_keller_lr_polar_express_safer", "adamuon", {}, {}, NsVariant::polar_express_safer_pyopt};
    c.adamuon.adjust_lr = MuonLrAdjustment::original;
    cases.push_back(c);
  }
  constexpr int kFamilySteps = 6;
  nlohmann::json family = nlohmann::json::array();
  int fid = 0;
  for (const std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{{32, 32}, {48, 16}, {16, 48}, {7, 13}}) {
    for (const Case& c : cases) {
      MuonOptions ns;
      ns.ns_variant = c.variant;
      const at::Tensor p0 = at::empty(shape, at::kFloat).normal_(0, 0.5, gen);
      std::vector<at::Tensor> grads;
      for (int s = 0; s < kFamilySteps; ++s) grads.push_back(at::empty(shape, at::kFloat).normal_(0, 1, gen));
      at::Tensor p = p0.clone();
      auto opt = c.optimizer == "normuon" ? make_normuon(c.normuon, ns, shape) : make_adamuon(c.adamuon, ns, shape);
      for (const at::Tensor& g : grads) opt->step(p, g);
      const std::string prefix = dir + "/family" + std::to_string(fid);
      optim_parity::write_raw(prefix + "_p0.bin", p0);
      for (int s = 0; s < kFamilySteps; ++s) optim_parity::write_raw(prefix + "_g" + std::to_string(s) + ".bin", grads[s]);
      optim_parity::write_raw(prefix + "_final.bin", p);
      nlohmann::json state = nlohmann::json::object();
      for (const auto& [name, t] : opt->state()) {
        optim_parity::write_raw(prefix + "_state_" + name + ".bin", t);
        state[name] = t.sizes().vec();
      }
      nlohmann::json hyper;
      if (c.optimizer == "normuon")
        hyper = {{"lr", c.normuon.lr}, {"weight_decay", c.normuon.weight_decay}, {"momentum", c.normuon.momentum},
                 {"beta2", c.normuon.beta2}, {"nesterov", c.normuon.nesterov}, {"eps", c.normuon.eps},
                 {"update_scale", to_string(c.normuon.update_scale)},
                 {"use_adjusted_lr", c.normuon.adjust_lr == MuonLrAdjustment::match_rms_adamw}};
      else
        hyper = {{"lr", c.adamuon.lr}, {"betas", {c.adamuon.beta1, c.adamuon.beta2}}, {"weight_decay", c.adamuon.weight_decay},
                 {"eps", c.adamuon.eps}, {"use_adjusted_lr", c.adamuon.adjust_lr == MuonLrAdjustment::match_rms_adamw}};
      family.push_back({{"id", fid}, {"name", c.name}, {"optimizer", c.optimizer}, {"shape", shape}, {"steps", kFamilySteps},
                        {"ns_variant", to_string(c.variant)}, {"hyper", hyper}, {"state", state}});
      ++fid;
    }
  }
  std::ofstream(dir + "/muon_family.json") << family.dump(2);
  std::printf("wrote %zu variant tables, %d outputs and %d NorMuon/AdaMuon trajectories to %s\n", ns_variants().size(), id,
              fid, dir.c_str());
  return 0;
}
