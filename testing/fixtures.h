// What the tests share to build runs and scratch space (target mfsdp_testing; tests only):
//   tiny_config   the narrow tiny model most multi-rank tests train, from a few named knobs
//   TempDir       a scratch directory made by mkdtemp, removed (whole tree) when it goes away
// Error text of a throwing call: error_of in core/util/errors.h.
#pragma once

#include "core/train/trainer.h"

#include <cstdint>
#include <string>

namespace mfsdp {

struct TinyRun {
  int64_t hidden = 32, intermediate = 64;  // the preset's tiny model, narrowed
  int steps = 10;
  int64_t batch = 2, seq = 8;
  uint64_t seed = 0;
  OptimizerKind optimizer = OptimizerKind::muon;
  // The tests' learning rates: Muon 0.02, AdamW, Shampoo and SOAP 3e-3 (else the training defaults).
  bool test_rates = false;
  // Shampoo's and SOAP's precondition frequency (0: the default), so roots and eigenbases are
  // refreshed within a short run.
  int precondition_frequency = 0;
};
TrainConfig tiny_config(const TinyRun& run);

class TempDir {
 public:
  explicit TempDir(const std::string& tag);  // /tmp/mfsdp_<tag>_XXXXXX
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace mfsdp
