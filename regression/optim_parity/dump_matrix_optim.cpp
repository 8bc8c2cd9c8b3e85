// Writes the inputs and the C++ results of Shampoo and SOAP for several shapes and
// hyperparameter sets, so that check_matrix_optim.py can run an external implementation
// (pytorch-optimizer's Shampoo, ScalableShampoo and SOAP) on the same tensors and compare. Each
// case's hyperparameters are the ones under which the external optimizer computes what ours does
// (check_matrix_optim.py's docstring names every remaining difference and how it is handled).
// Usage: matrix_optim_parity_dump OUTDIR
#include "core/dist/determinism.h"
#include "core/optim/optim.h"
#include "regression/optim_parity/write_raw.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

using namespace mfsdp;

namespace {

using optim_parity::write_raw;

struct Case {
  std::string name;
  std::string optimizer;  // "shampoo" or "soap"
  std::string external;   // the external class it is compared with
  std::vector<int64_t> shape;
  int steps;
  ShampooOptions shampoo;
  SoapOptions soap;
};

nlohmann::json to_json(const ShampooOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"epsilon", o.epsilon},
          {"weight_decay", o.weight_decay},
          {"max_preconditioner_dim", o.max_preconditioner_dim},
          {"precondition_frequency", o.precondition_frequency},
          {"start_preconditioning_step", o.start_preconditioning_step},
          {"use_bias_correction", o.use_bias_correction},
          {"adam_grafting", o.adam_grafting},
          {"grafting_beta2", o.grafting_beta2},
          {"grafting_epsilon", o.grafting_epsilon}};
}

nlohmann::json to_json(const SoapOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"shampoo_beta", o.shampoo_beta},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"precondition_frequency", o.precondition_frequency},
          {"max_precond_dim", o.max_precond_dim},
          {"correct_bias", o.correct_bias}};
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // Basic Shampoo (pytorch_optimizer.Shampoo): no momentum, running sums, no grafting, roots every
  // step from the first.
  const std::vector<std::vector<int64_t>> shapes{{32, 32}, {48, 16}, {16, 48}};
  for (const auto& shape : shapes) {
    Case c{"shampoo_sum", "shampoo", "Shampoo", shape, 5, {}, {}};
    ShampooOptions& o = c.shampoo;
    o.lr = 1e-2, o.beta1 = 0, o.beta2 = 1, o.epsilon = 1e-6, o.weight_decay = 0.1;
    o.precondition_frequency = 1, o.start_preconditioning_step = 1;
    o.use_bias_correction = true, o.adam_grafting = false;
    out.push_back(c);
  }
  // ScalableShampoo: EMA statistics (beta2 = 1 - 2^-4), roots every 4 steps from step 4 (by then
  // a 48-side factor has seen 64 gradient rows: well conditioned), the RMSProp-grafted gradient
  // before; RMSProp grafting = our Adam grafting with beta1 = 0 and no bias correction.
  for (const auto& shape : shapes) {
    Case c{"scalable_graft", "shampoo", "ScalableShampoo", shape, 9, {}, {}};
    ShampooOptions& o = c.shampoo;
    o.lr = 1e-2, o.beta1 = 0, o.beta2 = 0.9375, o.epsilon = 1e-6, o.weight_decay = 0.1;
    o.precondition_frequency = 4, o.start_preconditioning_step = 4;
    o.use_bias_correction = false, o.adam_grafting = true, o.grafting_beta2 = 0.9375, o.grafting_epsilon = 1e-8;
    out.push_back(c);
  }
  // Blocked by max_preconditioner_dim (40 x 64 in blocks of 24: 24/16 x 24/24/16), no grafting.
  // No block side is below 16: for 8-wide factors MKL rounds our fused addmm_ and their mm + add_
  // differently (check_matrix_optim.py, S5).
  {
    Case c{"scalable_blocked", "shampoo", "ScalableShampoo", {40, 64}, 9, {}, {}};
    ShampooOptions& o = c.shampoo;
    o.lr = 1e-2, o.beta1 = 0, o.beta2 = 0.9375, o.epsilon = 1e-6, o.weight_decay = 0.1;
    o.max_preconditioner_dim = 24, o.precondition_frequency = 4, o.start_preconditioning_step = 4;
    o.use_bias_correction = false, o.adam_grafting = false;
    out.push_back(c);
  }
  // SOAP with beta1 = 0 (m is then the projected gradient in both representations) and lr,
  // lr * wd powers of two (both weight-decay spellings round the same): 8 calls = 7 updates,
  // bases refreshed after updates 3 and 6. The 24 x 40 case has its right side unrotated.
  const std::vector<std::vector<int64_t>> soap_shapes{{32, 32}, {48, 16}, {16, 48}, {24, 40}};
  for (const auto& shape : soap_shapes) {
    Case c{"soap_beta1_0", "soap", "SOAP", shape, 8, {}, {}};
    SoapOptions& o = c.soap;
    o.lr = 0.001953125, o.beta1 = 0, o.beta2 = 0.95, o.shampoo_beta = 0.9, o.eps = 1e-8, o.weight_decay = 0.125;
    o.precondition_frequency = 3, o.max_precond_dim = 32, o.correct_bias = true;
    out.push_back(c);
  }
  // SOAP at its defaults (but the refresh every 3 updates): differs by rounding only.
  for (const auto& shape : soap_shapes) {
    Case c{"soap_default", "soap", "SOAP", shape, 8, {}, {}};
    SoapOptions& o = c.soap;
    o.precondition_frequency = 3, o.max_precond_dim = 32;
    out.push_back(c);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = mfsdp::optim_parity::out_dir_arg(argc, argv);
  // One thread here and in check_matrix_optim.py: the same BLAS code paths on both sides.
  at::set_num_threads(1);
  nlohmann::json manifest = nlohmann::json::array();
  at::Generator gen = make_shared_generator(2025);
  int id = 0;
  for (const Case& c : cases()) {
    at::Tensor p0 = at::empty(c.shape, at::kFloat).normal_(0, 0.5, gen);
    std::vector<at::Tensor> grads;
    for (int s = 0; s < c.steps; ++s) grads.push_back(at::empty(c.shape, at::kFloat).normal_(0, 1, gen));
    at::Tensor p = p0.clone();
    std::unique_ptr<TensorOptimizer> opt =
        c.optimizer == "shampoo" ? make_shampoo(c.shampoo, c.shape) : make_soap(c.soap, c.shape);
    for (int s = 0; s < c.steps; ++s) opt->step(p, grads[s]);
    const std::string prefix = dir + "/case" + std::to_string(id);
    write_raw(prefix + "_p0.bin", p0);
    for (int s = 0; s < c.steps; ++s) write_raw(prefix + "_g" + std::to_string(s) + ".bin", grads[s]);
    write_raw(prefix + "_final.bin", p);
    nlohmann::json state = nlohmann::json::object();
    for (const auto& [name, t] : opt->state()) {
      if (!t.defined()) continue;
      write_raw(prefix + "_state_" + name + ".bin", t);
      state[name] = t.sizes().vec();
    }
    manifest.push_back({{"id", id},
                        {"name", c.name},
                        {"optimizer", c.optimizer},
                        {"external", c.external},
                        {"shape", c.shape},
                        {"steps", c.steps},
                        {"options", c.optimizer == "shampoo" ? to_json(c.shampoo) : to_json(c.soap)},
                        {"state", state},
                        {"scalars", opt->scalars()}});
    ++id;
  }
  std::ofstream(dir + "/manifest.json") << manifest.dump(2);
  std::printf("wrote %d cases to %s\n", id, dir.c_str());
  return 0;
}
