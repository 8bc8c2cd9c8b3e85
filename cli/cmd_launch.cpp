// `mfsdp launch -n W -- COMMAND...`: W rank processes over a TCP store on 127.0.0.1.
#include "cli/commands.h"
#include "core/dist/launcher.h"

#include <c10/util/Exception.h>

#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace mfsdp::cli {
namespace {

// COMMAND may be an mfsdp subcommand ("selfcheck ..."), a path, or a program on PATH.
std::vector<std::string> resolve(std::vector<std::string> command, const CLI::App& app) {
  const std::string& first = command.front();
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == first) {
      command.insert(command.begin(), self_executable());
      return command;
    }
  }
  if (first.find('/') != std::string::npos) return command;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + first;
    if (access(candidate.c_str(), X_OK) == 0) {
      command.front() = candidate;
      return command;
    }
  }
  TORCH_CHECK(false, "launch: '", first, "' is neither an mfsdp subcommand nor a program on PATH");
}

}  // namespace

void add_launch_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand(
      "launch",
      "Start W rank processes of COMMAND (an mfsdp subcommand or any program), torchrun-style:\n"
      "a TCP store on 127.0.0.1 and RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT per rank.");
  struct Opts {
    int world_size = 1;
    int grace_s = 30;
    std::vector<std::string> command;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-n,--nproc,--world-size", o->world_size, "Number of rank processes")
      ->required()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--grace-s", o->grace_s,
                  "Seconds the other ranks get to exit after one fails, before they are terminated")
      ->check(CLI::Range(0, 3600));
  cmd->add_option("command", o->command, "COMMAND [ARGS...] (after --)")->required();
  cmd->callback([&run, &app, o] {
    run = [&app, o] {
      LaunchOptions launch;
      launch.world_size = o->world_size;
      launch.grace = std::chrono::seconds(o->grace_s);
      launch.command = resolve(o->command, app);
      return launch_processes(launch);
    };
  });
}

}  // namespace mfsdp::cli
