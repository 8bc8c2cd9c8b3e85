// `mfsdp launch`: W rank processes on this machine, torchrun-style.
//
// The launcher hosts the TCP store on 127.0.0.1 (ephemeral port) and starts W children of the
// given command with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and
// TORCHELASTIC_USE_AGENT_STORE=True set, so every child joins as a store client. Each child's
// output is forwarded line by line with a "[rank r] " prefix. When a child fails, the others get
// `grace` to finish (they normally fail themselves, naming the lost peer), then are terminated.
#pragma once

#include "core/dist/ranks.h"
#include "core/util/enum_names.h"

#include <chrono>
#include <string>
#include <vector>

namespace mfsdp {

struct LaunchOptions {
  int world_size = 1;
  std::vector<std::string> command;  // argv of each child; command[0] is the program
  std::chrono::milliseconds grace{30'000};
  bool prefix_output = true;
};

// Returns 0 when every child exits 0; otherwise the exit status of the first child that failed
// (128 + signal for a signalled child). Writes one line per failed child to stderr.
int launch_processes(const LaunchOptions& options);

// Path of the running executable (/proc/self/exe), for relaunching ourselves.
std::string self_executable();

// How a command's ranks run: threads of this process over a shared store, or rank processes
// (launch_processes) each running the command again.
enum class Launcher { threads, processes };
constexpr NameTable<Launcher, 2> kLauncherNames{{{Launcher::threads, "threads"}, {Launcher::processes, "processes"}}};

// Runs `fn` on every rank, the one way every command does: as the one rank a launcher (torchrun,
// Slurm, mfsdp launch) started this process as, when the environment says so (its world size
// wins over ranks.world_size); else on ranks.world_size thread ranks (a failed rank throws, naming
// it); else, with `processes`, as ranks.world_size children running `relaunch` (argv; each child
// sees the launch environment and takes the first branch), a failed child's peers given `grace`.
// Returns the exit code: 0, or launch_processes' code for a failed child.
int run_ranks(const RanksOptions& ranks, Launcher launcher, const std::vector<std::string>& relaunch,
              std::chrono::milliseconds grace, const RankFn& fn);

}  // namespace mfsdp
