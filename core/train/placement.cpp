#include "core/train/placement.h"

#include "core/train/trainer.h"
#include "core/util/enum_names.h"

#include <c10/util/Exception.h>

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

ResumeInfo PlacementRunner::load_checkpoint(const std::string&, const TrainConfig& config) {
  TORCH_CHECK(false, "train: placement ", to_string(config.placement),
              " does not resume from checkpoints (owner, reconstruct, alltoall and ddp do)");
}

}  // namespace mfsdp
