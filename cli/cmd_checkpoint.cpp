// `mfsdp export CKPT --out FILE` and `mfsdp checkpoint inspect CKPT`: what a checkpoint holds, its
// checksums, and the consolidated model in one safetensors file that Python loads.
#include "cli/commands.h"
#include "core/io/checkpoint.h"
#include "core/util/files.h"

#include <cstdio>
#include <iostream>

namespace mfsdp::cli {
namespace {

struct ExportArgs {
  std::string checkpoint;
  std::string out;
};

int run_export(const ExportArgs& a) {
  const std::string dir = resolve_checkpoint(a.checkpoint);
  check_output_flag("export", a.out, "--out");  // not inside the checkpoint, not a link
  export_model(dir, a.out);
  std::printf("export: %s -> %s\n", dir.c_str(), a.out.c_str());
  return kExitOk;
}

struct InspectArgs {
  std::string checkpoint;
  bool no_verify = false;
};

int run_inspect(const InspectArgs& a) {
  const std::string dir = resolve_checkpoint(a.checkpoint);
  std::string report;
  const bool ok = inspect_checkpoint(dir, !a.no_verify, report);
  std::cout << report << std::flush;
  return ok ? kExitOk : kExitFailure;
}

}  // namespace

void add_checkpoint_commands(CLI::App& app, Action& run) {
  auto* exp = app.add_subcommand("export", "Write a checkpoint's consolidated model (the model's parameter names) to one safetensors file");
  auto e = std::make_shared<ExportArgs>();
  exp->add_option("checkpoint", e->checkpoint, "A checkpoint (step directory) or a checkpoint directory (its latest)")->required();
  exp->add_option("--out", e->out, "Output .safetensors file (written atomically)")->required();
  exp->callback([&run, e] { run = [e] { return run_export(*e); }; });

  auto* ckpt = app.add_subcommand("checkpoint", "Checkpoint tools");
  ckpt->require_subcommand(1);
  auto* inspect = ckpt->add_subcommand("inspect", "Print a checkpoint's layout and verify every file's checksums");
  auto i = std::make_shared<InspectArgs>();
  inspect->add_option("checkpoint", i->checkpoint, "A checkpoint (step directory) or a checkpoint directory (its latest)")->required();
  inspect->add_flag("--no-verify", i->no_verify, "Print the layout only");
  inspect->callback([&run, i] { run = [i] { return run_inspect(*i); }; });
}

}  // namespace mfsdp::cli
