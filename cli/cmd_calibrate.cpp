// `mfsdp calibrate`: this machine's collectives and matmul rate, measured and written as a hardware
// profile for `mfsdp simulate` (docs/simulate.md). The measurement and the profile are
// sim/calibrate.h's; the fit of the collectives sim/collective_fit.h's.
#include "cli/commands.h"
#include "core/util/files.h"
#include "sim/calibrate.h"

// c10's operator<< for std::vector, which the other commands see through ATen's headers: with it
// CLI11's help writes a vector's default as "2 4 8" rather than "[2,4,8]", as it always has.
#include <c10/util/Logging.h>

#include <cstdio>

namespace mfsdp::cli {
namespace {

struct CalibrateArgs {
  std::string out = std::string(MFSDP_PROFILE_DIR) + "/cpu-local.json";
  CalibrateOptions options;
};

int run_calibrate(const CalibrateArgs& a) {
  check_output_flag("calibrate", a.out, "--out");  // before the measuring, not after it
  const HardwareProfile p = calibrate_this_machine(a.options, [](const std::string& line) { std::printf("%s\n", line.c_str()); });
  write_file_atomic(a.out, hardware_profile_to_json(p));
  std::printf("calibrate: wrote %s\n", a.out.c_str());
  return kExitOk;
}

}  // namespace

void add_calibrate_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("calibrate", "Measure this machine's collectives and matmul rate; write a hardware profile for simulate");
  auto a = std::make_shared<CalibrateArgs>();
  CalibrateOptions& o = a->options;
  cmd->add_option("--out", a->out, "Profile file to write (atomically)");
  cmd->add_option("--name", o.name, "The profile's name");
  cmd->add_option("--world-sizes", o.world_sizes, "Thread ranks to measure at")->check(CLI::Range(2, 64));
  cmd->add_option("--sizes", o.sizes, "Collective sizes in bytes")->check(CLI::Range(int64_t{64}, int64_t{1} << 30));
  cmd->add_flag("--verbose", o.verbose, "Print every measured point beside the fit");
  cmd->add_option("--reps", o.reps, "Timed calls per point (the median is kept)")->check(CLI::Range(1, 1000));
  cmd->callback([&run, a] { run = [a] { return run_calibrate(*a); }; });
}

}  // namespace mfsdp::cli
