// Writes QK-clip cases for check_qk_clip.py: per case the largest logits S [layers, heads], tau, the
// q and k weights (and biases) before, and after our rule (QkClip::apply through a runner that holds
// the parameters in full), so that pytorch-optimizer 4.1.0's MuonClip.step(attention_max_logits=...)
// can be run on the same tensors and compared bit for bit (docs/qk_clip.md).
// Usage: qk_clip_parity_dump OUTDIR
#include "core/dist/determinism.h"
#include "core/train/placement.h"
#include "core/train/qk_clip.h"
#include "regression/optim_parity/write_raw.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <nlohmann/json.hpp>

#include <fstream>

using namespace mfsdp;

namespace {

using optim_parity::write_raw;

// A runner that only holds full parameters and scales their rows, as the oracle does.
class Holder final : public PlacementRunner {
 public:
  explicit Holder(ParamMap params) : params_(std::move(params)) {}
  Gradients forward_backward(const at::Tensor&, const at::Tensor&, const std::function<void()>&, const MicroBatch&) override {
    return {};
  }
  Update update() override { return {}; }
  void set_lr_factor(double) override {}
  ParamMap full_params() override { return params_; }
  int64_t resident_bytes() const override { return 0; }
  void scale_rows(const std::string& name, const at::Tensor& row_scale) override { scale_held_rows(params_.at(name), row_scale, 0); }

 private:
  ParamMap params_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = optim_parity::out_dir_arg(argc, argv);
  at::Generator gen = make_shared_generator(2026);
  nlohmann::json manifest = nlohmann::json::array();
  int id = 0;
  for (int64_t kv : {4, 2, 1}) {
    for (bool bias : {false, true}) {
      for (double tau : {1.0, 0.3}) {
        TransformerConfig m = preset_config("tiny");
        m.hidden = 32, m.heads = 4, m.kv_heads = kv, m.layers = 2, m.qkv_bias = bias;
        const int64_t d = m.head_dim();
        // Logits on both sides of tau, and exactly tau (scaled by exactly 1).
        at::Tensor s = at::empty({m.layers, m.heads}, at::kFloat).uniform_(0.05, 3.0, gen);
        s[0][1] = static_cast<float>(tau);
        QkLogits logits;
        logits.max_logits = s;
        ParamMap params;
        std::vector<std::string> names;
        for (int64_t l = 0; l < m.layers; ++l) {
          const std::string pre = "layers." + std::to_string(l) + ".attn.";
          params[pre + "q.weight"] = at::empty({m.heads * d, m.hidden}, at::kFloat).normal_(0, 1, gen);
          params[pre + "k.weight"] = at::empty({kv * d, m.hidden}, at::kFloat).normal_(0, 1, gen);
          names.insert(names.end(), {pre + "q.weight", pre + "k.weight"});
          if (bias) {
            params[pre + "q.bias"] = at::empty({m.heads * d}, at::kFloat).normal_(0, 1, gen);
            params[pre + "k.bias"] = at::empty({kv * d}, at::kFloat).normal_(0, 1, gen);
            names.insert(names.end(), {pre + "q.bias", pre + "k.bias"});
          }
        }
        nlohmann::json c{{"id", id}, {"kv_heads", kv}, {"heads", m.heads}, {"layers", m.layers}, {"tau", tau}, {"params", nlohmann::json::array()}};
        write_raw(dir + "/qk" + std::to_string(id) + "_s.bin", s);
        ParamMap before;
        for (const std::string& n : names) before[n] = params.at(n).clone();
        Holder runner(params);
        const QkClip clip(m, tau, at::kCPU);
        c["clipped_heads"] = clip.apply(runner, logits);
        for (size_t i = 0; i < names.size(); ++i) {
          const std::string tag = dir + "/qk" + std::to_string(id) + "_p" + std::to_string(i);
          write_raw(tag + "_before.bin", before.at(names[i]));
          write_raw(tag + "_after.bin", runner.full_params().at(names[i]));
          c["params"].push_back({{"name", names[i]}, {"shape", before.at(names[i]).sizes().vec()}});
        }
        manifest.push_back(c);
        ++id;
      }
    }
  }
  std::ofstream(dir + "/qk_clip.json") << manifest.dump(1) << "\n";
  std::printf("qk_clip_parity_dump: %d cases\n", id);
  return 0;
}
