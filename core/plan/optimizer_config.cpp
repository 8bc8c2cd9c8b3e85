#include "core/plan/optimizer_config.h"

#include "core/util/enum_names.h"

#include <c10/util/Exception.h>

namespace mfsdp {
namespace {

constexpr NameTable<OptimizerKind, 6> kOptimizerNames{{{OptimizerKind::muon, "muon"},
                                                       {OptimizerKind::adamw, "adamw"},
                                                       {OptimizerKind::shampoo, "shampoo"},
                                                       {OptimizerKind::soap, "soap"},
                                                       {OptimizerKind::normuon, "normuon"},
                                                       {OptimizerKind::adamuon, "adamuon"}}};
constexpr NameTable<NorMuonScale, 2> kNorMuonScaleNames{
    {{NorMuonScale::preserve_norm, "preserve_norm"}, {NorMuonScale::match_rms, "match_rms"}}};
constexpr NameTable<MuonLrAdjustment, 2> kMuonLrNames{
    {{MuonLrAdjustment::original, "original"}, {MuonLrAdjustment::match_rms_adamw, "match_rms_adamw"}}};

}  // namespace

const char* to_string(OptimizerKind kind) { return checked_name(kOptimizerNames, kind); }

OptimizerKind optimizer_kind_from_string(const std::string& name) { return parse_name(kOptimizerNames, name, "optimizer"); }

bool uses_newton_schulz(OptimizerKind kind) {
  return kind == OptimizerKind::muon || kind == OptimizerKind::normuon || kind == OptimizerKind::adamuon;
}

const char* to_string(NorMuonScale s) { return checked_name(kNorMuonScaleNames, s); }
NorMuonScale normuon_scale_from_string(const std::string& name) { return parse_name(kNorMuonScaleNames, name, "NorMuon update_scale"); }

const char* to_string(MuonLrAdjustment adjustment) { return checked_name(kMuonLrNames, adjustment); }

MuonLrAdjustment muon_lr_adjustment_from_string(const std::string& name) {
  return parse_name(kMuonLrNames, name, "Muon adjust_lr_fn");
}

OptimizerOptions training_defaults() {
  OptimizerOptions o;
  o.muon.lr = 0.02;
  o.adamw.lr = 3e-3;
  o.shampoo.lr = 3e-3;
  o.soap.lr = 3e-3;
  o.shampoo.precondition_frequency = 10;
  o.soap.precondition_frequency = 10;
  return o;
}

void set_newton_schulz(MuonOptions& muon, OptimizerKind optimizer, const std::optional<std::string>& variant,
                       std::optional<int> steps) {
  if (!variant && !steps) return;
  TORCH_CHECK(uses_newton_schulz(optimizer), variant ? "--ns-variant" : "--ns-steps",
              " sets the Newton-Schulz iterations of Muon, NorMuon and AdaMuon, but the matrix optimizer is ",
              to_string(optimizer));
  if (variant) muon.ns_variant = ns_variant_from_string(*variant);
  const NsVariantInfo& v = ns_variant_info(muon.ns_variant);
  TORCH_CHECK(!(steps && v.fixed_steps > 0), "--ns-steps cannot be given with --ns-variant ", v.name, ": its table pins ",
              v.fixed_steps, " steps");
  muon.ns_steps = steps ? *steps : ns_steps_of(v, muon.ns_steps);
}

std::string describe_optimizer(const OptimizerOptions& o) {
  std::string out = to_string(o.optimizer);
  const MuonOptions d;
  if (uses_newton_schulz(o.optimizer) && (o.muon.ns_variant != d.ns_variant || o.muon.ns_steps != d.ns_steps))
    out += std::string(" (Newton-Schulz ") + to_string(o.muon.ns_variant) + ", " + std::to_string(o.muon.ns_steps) + " steps)";
  return out;
}

}  // namespace mfsdp
