#include "core/train/placement.h"

#include "core/optim/optim.h"
#include "core/train/trainer.h"
#include "core/util/enum_names.h"

#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Exception.h>

#include <vector>

namespace mfsdp {
namespace {

constexpr NameTable<Placement, 5> kPlacementNames{{{Placement::owner, "owner"},
                                                   {Placement::reconstruct, "reconstruct"},
                                                   {Placement::alltoall, "alltoall"},
                                                   {Placement::zero1, "zero1"},
                                                   {Placement::ddp, "ddp"}}};

}  // namespace

const char* to_string(Placement placement) { return checked_name(kPlacementNames, placement); }

Placement placement_from_string(const std::string& name) {
  auto p = value_in(kPlacementNames, name);
  TORCH_CHECK(p, "placement '", name, "' is not available (", names_of(kPlacementNames), ")");
  return *p;
}

bool runs_on_owner_runtime(Placement placement) {
  return placement == Placement::owner || placement == Placement::reconstruct || placement == Placement::alltoall;
}

std::string PlacementRunner::save_checkpoint(const std::string&, int64_t, const TrainConfig& config, const LoopState&) {
  TORCH_CHECK(false, "train: placement ", to_string(config.placement),
              " does not write checkpoints (owner, reconstruct and alltoall do)");
}

ParamMap PlacementRunner::full_grads() {
  TORCH_CHECK(false, "gradients: this placement cannot report its gradients (owner, reconstruct, alltoall and ddp can)");
}

ParamMap PlacementRunner::full_state() {
  TORCH_CHECK(false, "optimizer state: this placement does not gather its optimizer state in full (ddp, the oracle, does)");
}

void add_full_state(ParamMap& out, const std::string& name, const TensorOptimizer& optimizer) {
  bool stepped = false;
  for (const auto& [entry, t] : optimizer.state()) {
    if (!t.defined()) continue;
    stepped = true;
    out.emplace(name + "." + entry, t.detach().to(at::kCPU).clone());
  }
  if (!stepped) return;  // a fresh optimizer: no state, counters included
  for (const auto& [entry, v] : optimizer.scalars()) out.emplace(name + "." + entry, at::scalar_tensor(v, at::kFloat));
}

void PlacementRunner::scale_rows(const std::string& name, const at::Tensor&) {
  TORCH_CHECK(false, "train: this placement cannot rescale rows of '", name, "' for QK-clip");
}

void scale_held_rows(const at::Tensor& held, const at::Tensor& row_scale, int64_t begin) {
  if (held.size(0) == 0) return;
  std::vector<int64_t> shape(held.dim(), 1);
  shape[0] = held.size(0);
  held.detach().mul_(row_scale.narrow(0, begin, held.size(0)).to(held.scalar_type()).view(shape));
}

ResumeInfo PlacementRunner::load_checkpoint(const std::string&, const TrainConfig& config) {
  TORCH_CHECK(false, "train: placement ", to_string(config.placement),
              " does not resume from checkpoints (owner, reconstruct, alltoall and ddp do)");
}

}  // namespace mfsdp
