// The subcommands of `mfsdp`. Each registers itself on the app and sets `run` when chosen.
#pragma once

#include "core/util/enum_names.h"
#include "core/util/units.h"

#include <CLI/CLI.hpp>

#include <map>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mfsdp::cli {

// What a chosen subcommand runs; returns the process exit code.
using Action = std::function<int()>;

void add_env_command(CLI::App& app, Action& run);
void add_selfcheck_command(CLI::App& app, Action& run);
void add_launch_command(CLI::App& app, Action& run);
void add_plan_command(CLI::App& app, Action& run);
void add_train_command(CLI::App& app, Action& run);
void add_verify_command(CLI::App& app, Action& run);
void add_checkpoint_commands(CLI::App& app, Action& run);  // export, checkpoint inspect
void add_dashboard_command(CLI::App& app, Action& run);
void add_calibrate_command(CLI::App& app, Action& run);  // hardware profile of this machine
void add_simulate_command(CLI::App& app, Action& run);   // a placement's step priced on a profile
void add_conform_command(CLI::App& app, Action& run);    // two trajectory dumps compared

// The process's command line (argv[0] first), for relaunching it per rank.
const std::vector<std::string>& raw_args();
// This very command line as each rank process runs it (run_ranks' `relaunch`): this executable
// with the same arguments (a launched child takes the launch environment's world size).
std::vector<std::string> relaunch_self();

// Bad input found after parsing (unknown preset, malformed spec, ...): exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A usage error of `command` (train, verify, ...): `message` prefixed with "command: " unless it
// already names it (the shared option helpers do not know which command they serve).
inline UsageError usage_error(const std::string& command, const std::string& message) {
  const std::string prefix = command + ": ";
  return UsageError(message.rfind(prefix, 0) == 0 ? message : prefix + message);
}

// An output flag checked up front (core/util/files.h check_output_path): a refusal is a mistake
// of the command line, exit 2 in every command (docs/files.md).
void check_output_flag(const std::string& command, const std::string& path, const std::string& flag);

// A seed: an unsigned 64-bit integer. CLI11 would wrap "-1" to 2^64 - 1; this refuses a sign.
inline CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const bool digits = !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
        return digits && (value.size() < 20 || (value.size() == 20 && value <= "18446744073709551615"))
                   ? std::string()
                   : "must be an integer from 0 to 2^64-1, got " + value;
      },
      "UINT64");
}

// An option whose value is one of `table`'s names (CLI11 refuses any other, listing them); the
// help shows the names and the default.
template <typename E, size_t N>
CLI::Option* add_enum_option(CLI::App* cmd, const std::string& flag, E& value, const NameTable<E, N>& table,
                             const std::string& help) {
  std::map<std::string, E> by_name;
  for (const auto& [v, n] : table) by_name.emplace(n, v);
  return cmd->add_option(flag, value, help + ": " + names_of(table, " | "))
      ->transform(CLI::CheckedTransformer(by_name))
      ->default_str(name_in(table, value));
}

// Pieces the default job (no subcommand) reuses.
int print_environment(bool json);
int run_selfcheck(int world_size, bool processes, int timeout_s);


// Exit codes.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // the job ran and failed (a check, a rank, a collective)
constexpr int kExitUsage = 2;    // the command line or its input is wrong

}  // namespace mfsdp::cli
