#include "core/optim/optimizer_routing.h"

#include <c10/util/Exception.h>

#include <fnmatch.h>

#include <cmath>

namespace mfsdp {

ParamGroup param_group_from_string(const std::string& spec) {
  ParamGroup g;
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = spec.find(':', start)) != std::string::npos; start = colon + 1)
    parts.push_back(spec.substr(start, colon - start));
  parts.push_back(spec.substr(start));
  g.pattern = parts[0];
  TORCH_CHECK(!g.pattern.empty(), "group '", spec, "': empty pattern (expected PATTERN:lr=X:wd=Y)");
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    TORCH_CHECK(eq != std::string::npos, "group '", spec, "': '", parts[i], "' is not key=value (lr or wd)");
    const std::string key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
    double v = 0;
    try {
      size_t used = 0;
      v = std::stod(value, &used);
      TORCH_CHECK(used == value.size(), "");
    } catch (...) {
      TORCH_CHECK(false, "group '", spec, "': ", key, " '", value, "' is not a number");
    }
    TORCH_CHECK(std::isfinite(v) && v >= 0, "group '", spec, "': ", key, " must be finite and >= 0, got ", value);
    if (key == "lr") g.lr = v;
    else if (key == "wd") g.weight_decay = v;
    else TORCH_CHECK(false, "group '", spec, "': unknown key '", key, "' (lr or wd)");
  }
  return g;
}

OptimizerOptions options_for(const OptimizerOptions& options, const std::string& name) {
  OptimizerOptions o = options;
  for (const ParamGroup& g : options.groups) {
    if (fnmatch(g.pattern.c_str(), name.c_str(), 0) != 0) continue;
    if (g.lr) o.muon.lr = o.normuon.lr = o.adamuon.lr = o.adamw.lr = o.shampoo.lr = o.soap.lr = *g.lr;
    if (g.weight_decay) {
      o.muon.weight_decay = o.normuon.weight_decay = o.adamuon.weight_decay = o.adamw.weight_decay =
          o.shampoo.weight_decay = o.soap.weight_decay = *g.weight_decay;
    }
    break;
  }
  return o;
}

void check_groups(const OptimizerOptions& options, const std::vector<std::string>& names) {
  for (const ParamGroup& g : options.groups) {
    bool any = false;
    for (const std::string& n : names) any = any || fnmatch(g.pattern.c_str(), n.c_str(), 0) == 0;
    TORCH_CHECK(any, "parameter group '", g.pattern, "' matches no parameter of the model");
  }
}

std::unique_ptr<TensorOptimizer> make_optimizer(const OptimizerOptions& all, const std::string& name, bool hidden_matrix,
                                                const std::vector<int64_t>& shape) {
  const OptimizerOptions options = options_for(all, name);
  if (!hidden_matrix || options.optimizer == OptimizerKind::adamw) return make_adamw(options.adamw);
  auto matrix = [&](const std::vector<int64_t>& m) -> std::unique_ptr<TensorOptimizer> {
    switch (options.optimizer) {
      case OptimizerKind::muon: return make_muon(options.muon, m);
      case OptimizerKind::normuon: return make_normuon(options.normuon, options.muon, m);
      case OptimizerKind::adamuon: return make_adamuon(options.adamuon, options.muon, m);
      case OptimizerKind::shampoo: return make_shampoo(options.shampoo, m);
      case OptimizerKind::soap: return make_soap(options.soap, m);
      case OptimizerKind::adamw: break;
    }
    TORCH_INTERNAL_ASSERT(false, "unknown OptimizerKind");
  };
  if (shape.size() != 3) return matrix(shape);
  if (options.optimizer == OptimizerKind::muon && options.muon.batched_ns) return make_batched_muon(options.muon, shape);
  std::vector<std::unique_ptr<TensorOptimizer>> slices;  // experts: one matrix optimizer per slice
  for (int64_t e = 0; e < shape[0]; ++e) slices.push_back(matrix({shape[1], shape[2]}));
  return make_per_slice(std::move(slices));
}

}  // namespace mfsdp
