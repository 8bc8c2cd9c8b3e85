#include "testing/fixtures.h"

#include <c10/util/Exception.h>

#include <ftw.h>
#include <stdlib.h>

#include <cstdio>

namespace mfsdp {

TrainConfig tiny_config(const TinyRun& run) {
  TrainConfig c;
  c.model = preset_config("tiny");
  c.model.hidden = run.hidden;
  c.model.intermediate = run.intermediate;
  c.steps = run.steps;
  c.batch = run.batch;
  c.seq = run.seq;
  c.seed = run.seed;
  set_optimizer(c, run.optimizer);
  if (run.test_rates) {
    c.runtime.muon.lr = 0.02;
    c.runtime.adamw.lr = c.runtime.shampoo.lr = c.runtime.soap.lr = 3e-3;
    c.runtime.normuon.weight_decay = c.runtime.adamuon.weight_decay = 0.1;  // their default 0 leaves the decay untested
  }
  if (run.precondition_frequency > 0)
    c.runtime.shampoo.precondition_frequency = c.runtime.soap.precondition_frequency = run.precondition_frequency;
  return c;
}

TempDir::TempDir(const std::string& tag) : path_("/tmp/mfsdp_" + tag + "_XXXXXX") {
  TORCH_CHECK(::mkdtemp(path_.data()), "TempDir: mkdtemp failed for ", path_);
}

// POSIX calls on purpose: libtorch.so exports its own std::filesystem::remove_all, which crashes
// when it interposes ours (docs/gloo-notes.md).
TempDir::~TempDir() {
  ::nftw(path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
         FTW_DEPTH | FTW_PHYS);
}

}  // namespace mfsdp
