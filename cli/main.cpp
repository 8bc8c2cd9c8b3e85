// mfsdp: the MatrixFSDP command line.
#include "cli/commands.h"
#include "core/util/errors.h"
#include "core/dist/launcher.h"
#include "core/util/files.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace mfsdp::cli {
namespace {
std::vector<std::string> g_raw_args;
}
const std::vector<std::string>& raw_args() { return g_raw_args; }
std::vector<std::string> relaunch_self() {
  std::vector<std::string> argv{self_executable()};
  for (size_t i = 1; i < g_raw_args.size(); ++i) argv.push_back(g_raw_args[i]);
  return argv;
}
}  // namespace mfsdp::cli

namespace {

// The main job on its embedded default: the environment, a 4-rank Gloo self-check, a short
// owner-shaped training run of 4 rank processes on the embedded corpus, and a verify run of the
// runtime against the DDP oracle.
int default_job() {
  using namespace mfsdp::cli;
  int code = print_environment(/*json=*/false);
  if (code == kExitOk) code = run_selfcheck(4, /*processes=*/false, 60);
  if (code == kExitOk) {
    std::printf("\n");
    std::fflush(stdout);
    mfsdp::LaunchOptions launch;
    launch.world_size = 4;
    launch.command = {mfsdp::self_executable(), "train", "--steps", "12", "--timeout-s", "60"};
    code = mfsdp::launch_processes(launch);
  }
  if (code == kExitOk) {
    std::printf("\n");
    std::fflush(stdout);
    code = mfsdp::launch_processes({4, {mfsdp::self_executable(), "verify", "--steps", "5", "--timeout-s", "60"}});
  }
  return code;
}

// Two rules for every option of every subcommand, added once here rather than flag by flag:
//  - integers are decimal: CLI11 reads "010" as octal 8 and "0x10" as hex; leading zeros are
//    dropped ("010" is 10) and any other base is refused;
//  - a value is never empty: `--resume-from ""` must not mean "not given".
void harden_options(CLI::App& app) {
  for (CLI::Option* opt : app.get_options([](CLI::Option* o) { return !o->get_type_name().empty(); })) {
    const std::string type = opt->get_type_name();
    const std::string flag = opt->get_name();
    opt->transform(CLI::Validator(
        [flag](std::string& value) -> std::string {
          if (value.empty()) return "empty value (" + flag + " needs one)";
          return std::string();
        },
        ""));
    if (type.rfind("INT", 0) != 0 && type.rfind("UINT", 0) != 0 && type.find("[INT") == std::string::npos) continue;
    opt->transform(CLI::Validator(
        [](std::string& value) -> std::string {
          const size_t sign = value[0] == '-' || value[0] == '+' ? 1 : 0;
          const bool digits = value.size() > sign && value.find_first_not_of("0123456789", sign) == std::string::npos;
          if (digits) {
            const size_t first = std::min(value.find_first_not_of('0', sign), value.size() - 1);
            value = value.substr(0, sign) + value.substr(first);
            return std::string();
          }
          const bool other_base = value.size() > sign + 1 && value[sign] == '0' && std::isalpha(static_cast<unsigned char>(value[sign + 1]));
          return other_base ? "must be a decimal integer, got " + value : std::string();
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) harden_options(*sub);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mfsdp::cli;
  mfsdp::quiet_c10_logs();
  for (int i = 0; i < argc; ++i) mfsdp::cli::g_raw_args.emplace_back(argv[i]);
  CLI::App app{
      "MatrixFSDP: owner-shaped ZeRO-3 for matrix optimizers.\n"
      "Without a subcommand: print the environment, run a 4-rank Gloo self-check and a short\n"
      "owner-shaped training run and a bitwise verify against the DDP oracle on 4 rank processes."};
  app.require_subcommand(0, 1);
  app.fallthrough(false);
  // Every option's default in --help (subcommands inherit this; options whose default depends on
  // another flag, like --lr, say it in their text).
  app.option_defaults()->always_capture_default(true);
  Action run;
  add_env_command(app, run);
  add_selfcheck_command(app, run);
  add_launch_command(app, run);
  add_plan_command(app, run);
  add_train_command(app, run);
  add_verify_command(app, run);
  add_checkpoint_commands(app, run);
  add_dashboard_command(app, run);
  add_calibrate_command(app, run);
  add_simulate_command(app, run);
  add_conform_command(app, run);
  harden_options(app);
  // Every file this command reads is an input no output of it may replace (core/util/files.h).
  mfsdp::guard_command_inputs();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "mfsdp: " << e.what() << "\n\n";
    // Help of the subcommand that was being parsed, if any.
    const CLI::App* where = &app;
    for (const CLI::App* sub : app.get_subcommands()) where = sub;
    std::cerr << where->help();
    return kExitUsage;
  }
  try {
    const int code = run ? run() : default_job();
    // What was printed must have been written: a full disk or a closed pipe fails the command.
    std::cout.flush();
    errno = 0;
    const bool written = std::fflush(stdout) == 0 && !std::ferror(stdout) && !std::cout.fail();
    if (!written) {
      const int err = errno;
      std::fprintf(stderr, "mfsdp: error: cannot write the output to stdout%s%s\n", err ? ": " : " (a write failed earlier)",
                   err ? std::strerror(err) : "");
      return code == kExitOk ? kExitFailure : code;
    }
    return code;
  } catch (const UsageError& e) {
    std::cerr << "mfsdp: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "mfsdp: error: " << mfsdp::error_message(e) << "\n";
    return kExitFailure;
  }
}
