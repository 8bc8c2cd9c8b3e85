// `mfsdp env`: what this binary runs on.
#include "cli/commands.h"
#include "core/dist/process_group.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/headeronly/version.h>

#include <nlohmann/json.hpp>

#include <iostream>
#include <thread>

namespace mfsdp::cli {

int print_environment(bool json) {
  const bool nccl_compiled =
#ifdef USE_C10D_NCCL
      true;
#else
      false;
#endif
  const bool cuda = at::hasCUDA();
  nlohmann::ordered_json env = {
      {"torch_version", TORCH_VERSION},
      {"c10d_backends", {{"gloo", true}, {"nccl_compiled", nccl_compiled}, {"nccl_usable", cuda && nccl_compiled}}},
      {"cuda_available", cuda},
      {"cpu_capability", at::get_cpu_capability()},
      {"intra_op_threads", at::get_num_threads()},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"openmp", at::get_openmp_version()},
  };
  if (json) {
    std::cout << env.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "MatrixFSDP environment\n"
            << "  torch (libtorch)   " << TORCH_VERSION << "\n"
            << "  c10d backends      gloo" << (nccl_compiled ? ", nccl (compiled in)" : "") << "\n"
            << "  CUDA available     " << (cuda ? "yes" : "no (CPU only: NCCL unusable, Gloo on CPU)") << "\n"
            << "  CPU capability     " << at::get_cpu_capability() << "\n"
            << "  intra-op threads   " << at::get_num_threads() << " (hardware threads "
            << std::thread::hardware_concurrency() << ")\n"
            << "  OpenMP             " << at::get_openmp_version() << "\n";
  return kExitOk;
}

void add_env_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("env", "Print torch version, c10d backends, CUDA and threads");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->callback([&run, json] { run = [json] { return print_environment(*json); }; });
}

}  // namespace mfsdp::cli
