// Writes every Newton–Schulz variant's table and coefficient sequence (ns_tables.json), and the
// inputs and outputs of orthogonalize() for the variants that have a counterpart to call
// (torch.optim.Muon's, pytorch-optimizer 4.1.0's zero_power_via_*), so that check_ns.py can pin
// every coefficient to its source and compare the outputs bit for bit.
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
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
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
                              {NsVariant::gram_pyopt, 7}};
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
  std::printf("wrote %zu variant tables and %d outputs to %s\n", ns_variants().size(), id, dir.c_str());
  return 0;
}
