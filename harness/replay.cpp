#include "harness/replay.h"

#include "core/io/checkpoint.h"
#include "core/io/safetensors.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer_routing.h"
#include "core/plan/model_spec.h"
#include "core/plan/presets.h"
#include "core/runtime/owner_runtime.h"
#include "core/train/trainer.h"
#include "harness/conform.h"
#include "harness/trajectory_dump.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>

namespace mfsdp {
namespace {

using Json = nlohmann::json;
using TensorMap = std::map<std::string, at::Tensor>;

// ---- The reference's configuration, rebuilt from its header (and checked by writing it back) ----

template <typename T>
T field(const Json& j, const std::string& key, const std::string& where) {
  TORCH_CHECK(j.is_object() && j.contains(key), "replay: the reference's ", where, " has no '", key, "'");
  try {
    return j.at(key).get<T>();
  } catch (const Json::exception&) {
    TORCH_CHECK(false, "replay: the reference's ", where, ".", key, " is ", j.at(key).dump(), ", not of the expected type");
  }
}

TransformerConfig model_from_header(const Json& j) {
  TransformerConfig c;
  c.name = field<std::string>(j, "name", "model");
  c.vocab = field<int64_t>(j, "vocab", "model");
  c.hidden = field<int64_t>(j, "hidden", "model");
  c.intermediate = field<int64_t>(j, "intermediate", "model");
  c.layers = field<int64_t>(j, "layers", "model");
  c.heads = field<int64_t>(j, "heads", "model");
  c.kv_heads = field<int64_t>(j, "kv_heads", "model");
  c.qkv_bias = field<bool>(j, "qkv_bias", "model");
  const std::string dtype = field<std::string>(j, "dtype", "model");
  TORCH_CHECK(dtype == "Float" || dtype == "BFloat16", "replay: the reference's model.dtype ", dtype, " is not Float or BFloat16");
  c.dtype = dtype == "Float" ? c10::kFloat : c10::kBFloat16;
  c.tie_embeddings = j.value("tie_embeddings", false);
  c.gated_mlp = j.value("gated_mlp", true);
  if (j.contains("experts")) {
    c.experts = field<int64_t>(j, "experts", "model");
    c.top_k = field<int64_t>(j, "top_k", "model");
    c.shared_experts = field<int64_t>(j, "shared_experts", "model");
    c.moe_intermediate = field<int64_t>(j, "moe_intermediate", "model");
    c.first_dense = field<int64_t>(j, "first_dense", "model");
  }
  const std::string d = json_difference(j, model_config_json(c), "model");
  TORCH_CHECK(d.empty(), "replay: the reference's model is not one replay rebuilds (", d, ")");
  return c;
}

OptimizerOptions optimizers_from_header(const Json& j) {
  RuntimeOptions o;
  static_cast<OptimizerOptions&>(o) = training_defaults();
  const std::string matrix = field<std::string>(j, "matrix", "optimizer");
  o.optimizer = optimizer_kind_from_string(matrix);
  TORCH_CHECK(o.optimizer != OptimizerKind::shampoo && o.optimizer != OptimizerKind::soap, "replay: the reference's matrix "
              "optimizer is ", matrix, "; replay rebuilds muon, normuon, adamuon and adamw");
  TORCH_CHECK(field<std::string>(j, "other", "optimizer") == "adamw", "replay: optimizer.other is not adamw");
  if (j.contains("muon")) {
    const Json& m = j["muon"];
    o.muon.lr = field<double>(m, "lr", "optimizer.muon");
    o.muon.weight_decay = field<double>(m, "weight_decay", "optimizer.muon");
    o.muon.momentum = field<double>(m, "momentum", "optimizer.muon");
    o.muon.nesterov = field<bool>(m, "nesterov", "optimizer.muon");
    const auto abc = field<std::vector<double>>(m, "ns_coefficients", "optimizer.muon");
    TORCH_CHECK(abc.size() == 3, "replay: optimizer.muon.ns_coefficients is not three numbers");
    o.muon.ns_a = abc[0], o.muon.ns_b = abc[1], o.muon.ns_c = abc[2];
    o.muon.eps = field<double>(m, "eps", "optimizer.muon");
    o.muon.ns_steps = field<int>(m, "ns_steps", "optimizer.muon");
    o.muon.adjust_lr = muon_lr_adjustment_from_string(field<std::string>(m, "adjust_lr_fn", "optimizer.muon"));
    o.muon.batched_ns = m.value("batched_ns", false);
    if (m.contains("ns_variant")) o.muon.ns_variant = ns_variant_from_string(field<std::string>(m, "ns_variant", "optimizer.muon"));
  }
  if (j.contains("normuon")) {
    const Json& m = j["normuon"];
    o.normuon.lr = field<double>(m, "lr", "optimizer.normuon");
    o.normuon.weight_decay = field<double>(m, "weight_decay", "optimizer.normuon");
    o.normuon.momentum = field<double>(m, "momentum", "optimizer.normuon");
    o.normuon.beta2 = field<double>(m, "beta2", "optimizer.normuon");
    o.normuon.nesterov = field<bool>(m, "nesterov", "optimizer.normuon");
    o.normuon.eps = field<double>(m, "eps", "optimizer.normuon");
    o.normuon.update_scale = normuon_scale_from_string(field<std::string>(m, "update_scale", "optimizer.normuon"));
    o.normuon.adjust_lr = muon_lr_adjustment_from_string(field<std::string>(m, "adjust_lr_fn", "optimizer.normuon"));
  }
  if (j.contains("adamuon")) {
    const Json& m = j["adamuon"];
    o.adamuon.lr = field<double>(m, "lr", "optimizer.adamuon");
    const auto betas = field<std::vector<double>>(m, "betas", "optimizer.adamuon");
    TORCH_CHECK(betas.size() == 2, "replay: optimizer.adamuon.betas is not two numbers");
    o.adamuon.beta1 = betas[0], o.adamuon.beta2 = betas[1];
    o.adamuon.weight_decay = field<double>(m, "weight_decay", "optimizer.adamuon");
    o.adamuon.eps = field<double>(m, "eps", "optimizer.adamuon");
    o.adamuon.adjust_lr = muon_lr_adjustment_from_string(field<std::string>(m, "adjust_lr_fn", "optimizer.adamuon"));
  }
  const Json& a = j.contains("adamw") ? j["adamw"] : Json();
  o.adamw.lr = field<double>(a, "lr", "optimizer.adamw");
  const auto betas = field<std::vector<double>>(a, "betas", "optimizer.adamw");
  TORCH_CHECK(betas.size() == 2, "replay: optimizer.adamw.betas is not two numbers");
  o.adamw.beta1 = betas[0], o.adamw.beta2 = betas[1];
  o.adamw.eps = field<double>(a, "eps", "optimizer.adamw");
  o.adamw.weight_decay = field<double>(a, "weight_decay", "optimizer.adamw");
  for (const Json& g : field<Json>(j, "groups", "optimizer")) {
    ParamGroup p;
    p.pattern = field<std::string>(g, "pattern", "optimizer.groups[]");
    if (g.contains("lr")) p.lr = field<double>(g, "lr", "optimizer.groups[]");
    if (g.contains("weight_decay")) p.weight_decay = field<double>(g, "weight_decay", "optimizer.groups[]");
    o.groups.push_back(p);
  }
  // Written back, every section the header has must read the same: nothing was dropped.
  const Json back = optimizers_to_json(o);
  for (const auto& [k, v] : j.items()) {
    TORCH_CHECK(back.contains(k), "replay: optimizer.", k, " is not a section replay knows");
    const std::string d = json_difference(v, back[k], "optimizer." + k);
    TORCH_CHECK(d.empty(), "replay: the reference's optimizer is not one replay rebuilds (", d, ")");
  }
  return o;
}

// ---- Tensors -----------------------------------------------------------------------------

TensorMap load_file(const TrajectoryDump& d, const std::string& file) {
  const SafetensorsHeader h = read_safetensors_header(d.dir + "/" + file);
  TensorMap out;
  for (const SafetensorsEntry& e : h.entries) out.emplace(e.name, read_safetensors_tensor(h, e.name));
  return out;
}

const at::Tensor& tensor_of(const TensorMap& m, const std::string& name, const std::string& what) {
  auto it = m.find(name);
  TORCH_CHECK(it != m.end(), "replay: ", what, " has no tensor '", name, "'");
  TORCH_CHECK(it->second.scalar_type() == at::kFloat, "replay: ", what, "'s '", name, "' is not float32");
  return it->second;
}

// The state entries of parameter `name` in a flat state file: tensors, and 0-d counters as scalars.
void state_of(const TensorMap& flat, const std::string& name, TensorMap& tensors, std::map<std::string, double>& scalars) {
  const std::string prefix = name + ".";
  for (const auto& [k, t] : flat) {
    if (k.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string entry = k.substr(prefix.size());
    if (entry.find('.') != std::string::npos) continue;  // another parameter's (its name extends this one)
    if (t.dim() == 0)
      scalars[entry] = t.item<double>();
    else
      tensors[entry] = t;
  }
}

// -1, 0 or +1 unit in the last place, element by element: a float32 ULP (bits 0) or the ULP of a
// format with `bits` significand bits (bf16: 8, fp16: 11). Zeros stay.
at::Tensor perturb(const at::Tensor& t, int bits, std::mt19937_64& rng) {
  at::Tensor out = t.clone();
  float* x = out.data_ptr<float>();
  std::uniform_int_distribution<int> pick(-1, 1);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int s = pick(rng);
    if (s == 0 || x[i] == 0 || !std::isfinite(x[i])) continue;
    if (bits == 0) {
      x[i] = std::nextafter(x[i], s > 0 ? INFINITY : -INFINITY);
    } else {
      int e = 0;
      std::frexp(x[i], &e);
      x[i] += static_cast<float>(s) * std::ldexp(1.0f, e - bits);
    }
  }
  return out;
}

struct Stats {
  double v[kReplayStats] = {0, 0, 0, 0};
};

// The four statistics of update C (= after - before) against the reference update R.
Stats stats_of(const at::Tensor& before, const at::Tensor& ref_after, const at::Tensor& after) {
  const float* p = before.data_ptr<float>();
  const float* r = ref_after.data_ptr<float>();
  const float* c = after.data_ptr<float>();
  double rr = 0, cc = 0, rc = 0, ee = 0, ep = 0, pp = 0;
  for (int64_t i = 0; i < before.numel(); ++i) {
    const double R = static_cast<double>(r[i]) - p[i], C = static_cast<double>(c[i]) - p[i], E = C - R;
    rr += R * R, cc += C * C, rc += R * C, ee += E * E, ep += E * p[i], pp += static_cast<double>(p[i]) * p[i];
  }
  Stats s;
  if (rr == 0) {  // the reference did not move it: any move is infinitely far
    for (double& x : s.v) x = ee == 0 ? 0 : INFINITY;
    return s;
  }
  const double nr = std::sqrt(rr), nc = std::sqrt(cc);
  s.v[0] = std::sqrt(ee) / nr;
  s.v[1] = nc == 0 ? 1 : std::max(0.0, 1 - rc / (nr * nc));
  s.v[2] = std::fabs(nc / nr - 1);
  s.v[3] = pp == 0 ? 0 : std::fabs(ep) / (nr * std::sqrt(pp));
  return s;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

}  // namespace

ReplayReport replay_conform(const TrajectoryDump& ref, const TrajectoryDump& cand, const ReplayOptions& opt) {
  TORCH_CHECK(opt.min_runs >= 1 && opt.max_runs >= opt.min_runs && std::isfinite(opt.factor) && opt.factor >= 1,
              "replay: runs ", opt.min_runs, "..", opt.max_runs, " and factor ", opt.factor,
              " (need 1 <= min <= max runs and a finite factor >= 1)");
  TORCH_CHECK(cand.is_replay(), "replay: '", cand.dir, "' is not a replay dump (its header has no 'replay'; "
              "mfsdp_kit.replay writes one)");
  TORCH_CHECK(!ref.is_replay(), "replay: the reference '", ref.dir, "' is itself a replay dump");
  // The compared fields must agree; a replay may cover the reference's first steps only.
  const std::string d = header_difference(ref, cand);
  TORCH_CHECK(d.empty() || (d.rfind("steps:", 0) == 0 && cand.steps.back().step <= ref.steps.back().step),
              "replay: the headers disagree, so the runs are not comparable: ", d);
  const TransformerConfig model = model_from_header(ref.header.at("model"));
  const OptimizerOptions options = optimizers_from_header(ref.header.at("optimizer"));
  int64_t steps_taken = 0;
  Json schedule_json = ref.header.at("lr_schedule");
  schedule_json["steps_taken"] = 0;  // the dump's header leaves the counter out (trajectory_header)
  const LrSchedule schedule = lr_schedule_from_json(schedule_json, &steps_taken);
  const ModelSpec spec = transformer_spec(model);

  ReplayReport report;
  report.factor = opt.factor;
  std::mt19937_64 rng(opt.seed);
  for (const TrajectoryStep& cs : cand.steps) {
    if (cs.step == 0) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const TrajectoryStep* before = ref.step(cs.step - 1);
    const TrajectoryStep* after = ref.step(cs.step);
    TORCH_CHECK(before && after, "replay: the reference has no steps ", cs.step - 1, " and ", cs.step);
    TORCH_CHECK(!after->grads.empty(), "replay: the reference has no gradients at step ", cs.step,
                " (dump it with --dump-grads --dump-state)");
    TORCH_CHECK(cs.step == 1 || !before->state.empty(), "replay: the reference has no optimizer state after step ",
                cs.step - 1, " (dump it with --dump-state)");
    const TensorMap P = load_file(ref, before->params), Pk = load_file(ref, after->params), G = load_file(ref, after->grads);
    const TensorMap S = before->state.empty() ? TensorMap{} : load_file(ref, before->state);
    const TensorMap C = load_file(cand, cs.params);
    const double lr_factor = lr_lambda(resolve_decay_steps(schedule, 0), cs.step - 1);
    const std::string at_step = "step " + std::to_string(cs.step);

    // What is compared: every parameter, and every optimizer state tensor the candidate also
    // dumped (after the step; counters compare exactly). Each has a `before` the update is taken
    // from (the parameter after step k - 1; the state after it, zeros at step 1).
    struct Item {
      std::string name;
      at::Tensor before, ref_after, cand_after;
      std::vector<at::Tensor> runs;  // the perturbed re-runs' results
      std::string unit;
    };
    struct Entry {
      const ParamSpec* spec;
      TensorMap state;
      std::map<std::string, double> scalars;
      int bits;
    };
    std::vector<Entry> entries;
    for (const ParamSpec& p : spec.params) {
      Entry e{&p, {}, {}, 0};
      state_of(S, p.name, e.state, e.scalars);
      const bool ns = matrix_kind(p.kind) && uses_newton_schulz(options_for(options, p.name).optimizer);
      e.bits = ns ? (ns_variant_info(options.muon.ns_variant).dtype == NsDtype::bf16 ? 8 : 11) : 0;
      entries.push_back(std::move(e));
    }
    const TensorMap cand_state = cs.state.empty() ? TensorMap{} : load_file(cand, cs.state);
    const TensorMap ref_state = after->state.empty() ? TensorMap{} : load_file(ref, after->state);
    // One re-run of the reference optimizer over every tensor, inputs perturbed (or not): the
    // parameter after the step and the state it keeps.
    auto run = [&](bool perturbed, const std::function<void(Entry&, const at::Tensor&, const TensorOptimizer&)>& use) {
      for (Entry& e : entries) {
        const std::string& n = e.spec->name;
        auto o = make_optimizer(options, n, matrix_kind(e.spec->kind), e.spec->shape);
        TensorMap st = e.state;
        if (perturbed)
          for (auto& [k, t] : st) t = perturb(t, e.bits, rng);
        if (!st.empty() || !e.scalars.empty()) o->load_state(st, e.scalars, e.spec->shape);  // none: not stepped yet
        o->set_lr_factor(lr_factor);
        at::Tensor param = tensor_of(P, n, "the reference at step " + std::to_string(cs.step - 1)).clone();
        const at::Tensor& g = tensor_of(G, n, "the reference's gradients at " + at_step);
        o->step(param, perturbed ? perturb(g, e.bits, rng) : g);
        use(e, param, *o);
      }
    };
    std::vector<Item> items;
    std::map<std::string, size_t> item_of;
    std::vector<std::string> counters_differ;
    run(false, [&](Entry& e, const at::Tensor& param, const TensorOptimizer& o) {
      const std::string& n = e.spec->name;
      const at::Tensor& ref_p = tensor_of(Pk, n, "the reference at " + at_step);
      TORCH_CHECK(at::equal(param, ref_p), "replay: ", at_step, ": mfsdp's optimizer, as the reference's header describes it, "
                  "does not reproduce the reference's own step of '", n, "' bit for bit, so its noise floor cannot be measured "
                  "(is the reference an mfsdp oracle dump?)");
      const at::Tensor& c = tensor_of(C, n, "the candidate at " + at_step);
      TORCH_CHECK(c.sizes() == ref_p.sizes(), "replay: ", at_step, ": the candidate's '", n, "' has shape ", c.sizes(),
                  ", the reference's ", ref_p.sizes());
      item_of[n] = items.size();
      items.push_back({n, tensor_of(P, n, "the reference"), ref_p, c, {}, e.bits == 8 ? "bf16 ULP" : e.bits == 11 ? "fp16 ULP" : "fp32 ULP"});
      for (const auto& [entry, t] : o.state()) {
        const std::string sn = n + "." + entry;
        auto it = cand_state.find(sn);
        if (!t.defined() || it == cand_state.end() || !ref_state.count(sn)) continue;
        TORCH_CHECK(it->second.sizes() == t.sizes() && it->second.scalar_type() == at::kFloat, "replay: ", at_step,
                    ": the candidate's state '", sn, "' has shape ", it->second.sizes(), ", the reference's ", t.sizes());
        auto prev = e.state.find(entry);
        item_of[sn] = items.size();
        items.push_back({sn, prev != e.state.end() ? prev->second : at::zeros_like(t), t.clone(), it->second, {}, "fp32 ULP"});
      }
      for (const auto& [entry, v] : o.scalars()) {
        auto it = cand_state.find(n + "." + entry);
        if (it != cand_state.end() && it->second.numel() == 1 && it->second.item<double>() != v)
          counters_differ.push_back(n + "." + entry);
      }
    });
    // The perturbed re-runs, doubling from min_runs until no floor grows by more than a quarter.
    auto floors_of = [&](const Item& it, int n) {
      // Each run against the mean of the others (leave one out), as the candidate is against all.
      Stats f;
      for (int r = 0; r < n; ++r) {
        const Stats s = stats_of(it.before, it.ref_after, it.runs[r]);
        for (int i = 0; i < kReplayStats; ++i) f.v[i] = std::max(f.v[i], s.v[i]);
      }
      return f;
    };
    ReplayStep rs;
    rs.step = cs.step;
    std::vector<Stats> floors(items.size());
    for (int target = std::max(2, opt.min_runs);; target = std::min(opt.max_runs, target * 2)) {
      while (rs.runs < target) {
        run(true, [&](Entry& e, const at::Tensor& param, const TensorOptimizer& o) {
          items[item_of.at(e.spec->name)].runs.push_back(param);
          for (const auto& [entry, t] : o.state()) {
            auto it = item_of.find(e.spec->name + "." + entry);
            if (t.defined() && it != item_of.end()) items[it->second].runs.push_back(t.clone());
          }
        });
        ++rs.runs;
      }
      bool grew = false;
      for (size_t i = 0; i < items.size(); ++i) {
        const Stats f = floors_of(items[i], rs.runs);
        for (int k = 0; k < kReplayStats; ++k) grew = grew || f.v[k] > 1.25 * floors[i].v[k];
        floors[i] = f;
      }
      if (!grew || rs.runs >= opt.max_runs) break;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      ReplayTensor t;
      t.step = cs.step;
      t.name = it.name;
      t.unit = it.unit;
      const Stats s = stats_of(it.before, it.ref_after, it.cand_after);
      for (int k = 0; k < kReplayStats; ++k) t.stat[k] = s.v[k], t.floor[k] = floors[i].v[k];
      if (at::equal(it.cand_after, it.ref_after)) {
        t.verdict = "bitwise";
        ++rs.bitwise;
      } else {
        for (int k = 0; k < kReplayStats; ++k)
          if (!(s.v[k] <= opt.factor * floors[i].v[k]))
            t.reason += (t.reason.empty() ? "" : ", ") + std::string(kReplayStatNames[k]) + " " + num(s.v[k]) + " > " +
                        num(opt.factor) + " x floor " + num(floors[i].v[k]);
        t.verdict = t.reason.empty() ? "within the noise" : "systematic";
        ++(t.reason.empty() ? rs.within : rs.systematic);
      }
      report.tensors.push_back(t);
    }
    for (const std::string& c : counters_differ) {
      ReplayTensor t;
      t.step = cs.step;
      t.name = c;
      t.verdict = "systematic";
      t.reason = "the counter differs from the reference's";
      t.unit = "exact";
      report.tensors.push_back(t);
      ++rs.systematic;
    }
    if (rs.systematic && !report.first_systematic_step) report.first_systematic_step = cs.step;
    rs.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report.steps.push_back(rs);
  }
  TORCH_CHECK(!report.steps.empty(), "replay: the candidate '", cand.dir, "' replays no step (only step 0 is listed)");
  return report;
}

std::string replay_text(const ReplayReport& r) {
  std::ostringstream out;
  out << "replay: each step from the reference's parameters, gradients and state; noise floor: mfsdp's optimizer re-run "
         "with gradients and state perturbed by -1/0/+1 ULP (bf16 for Newton-Schulz matrices, fp32 otherwise); "
         "systematic: a statistic beyond "
      << num(r.factor) << " x its floor\n";
  out << "step  runs  seconds  bitwise  within  systematic\n";
  for (const ReplayStep& s : r.steps) {
    char line[96];
    std::snprintf(line, sizeof(line), "%4lld  %4d  %7.3f  %7d  %6d  %10d\n", static_cast<long long>(s.step), s.runs, s.seconds,
                  s.bitwise, s.within, s.systematic);
    out << line;
  }
  out << "\n";
  for (const ReplayTensor& t : r.tensors) {
    if (t.verdict != "systematic") continue;
    out << "step " << t.step << " " << t.name << ": SYSTEMATIC: " << t.reason << " (noise floor over ±1 " << t.unit
        << ": rel_error " << num(t.floor[0]) << ", one_minus_cos " << num(t.floor[1]) << ", norm_ratio " << num(t.floor[2])
        << ", along_param " << num(t.floor[3]) << ")\n";
  }
  if (r.clean()) {
    int within = 0;
    for (const ReplayStep& s : r.steps) within += s.within;
    out << "replay: " << (within ? "WITHIN THE NOISE" : "BITWISE") << " at every step (" << within
        << " tensor-steps within the noise, the rest bitwise)\n";
  } else {
    out << "replay: SYSTEMATIC from step " << *r.first_systematic_step << "\n";
  }
  return out.str();
}

nlohmann::json replay_json(const ReplayReport& r, const TrajectoryDump& ref, const TrajectoryDump& cand) {
  Json j{{"reference", ref.dir}, {"candidate", cand.dir}, {"factor", r.factor},
         {"verdict", r.clean() ? "within_noise" : "systematic"}};
  if (r.first_systematic_step) j["first_systematic_step"] = *r.first_systematic_step;
  j["steps"] = Json::array();
  for (const ReplayStep& s : r.steps)
    j["steps"].push_back({{"step", s.step}, {"runs", s.runs}, {"seconds", s.seconds}, {"bitwise", s.bitwise},
                          {"within_noise", s.within}, {"systematic", s.systematic}});
  j["tensors"] = Json::array();
  for (const ReplayTensor& t : r.tensors) {
    Json e{{"step", t.step}, {"name", t.name}, {"verdict", t.verdict}, {"unit", t.unit}};
    for (int i = 0; i < kReplayStats; ++i) {
      e[kReplayStatNames[i]] = trajectory_number(t.stat[i]);
      e[std::string(kReplayStatNames[i]) + "_floor"] = trajectory_number(t.floor[i]);
    }
    if (!t.reason.empty()) e["reason"] = t.reason;
    j["tensors"].push_back(e);
  }
  return j;
}

}  // namespace mfsdp
