// The environment a launcher gives each rank process: ours (`mfsdp launch`), torchrun or Slurm.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace mfsdp {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 0;
  // The launcher hosts the TCP store (torchrun's TORCHELASTIC_USE_AGENT_STORE=True, and ours):
  // every rank is a client. Otherwise rank 0 starts the store server.
  bool agent_store = false;
  std::string source;  // "torchrun", "slurm", "mfsdp launch" (for messages)
};

// Reads RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT (torchrun and `mfsdp launch`), or
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID with MASTER_ADDR/MASTER_PORT. Returns nullopt when no
// launcher variables are set; throws naming the variable when one is present but malformed or
// a required one is missing.
std::optional<LaunchEnv> read_launch_env();

// Same, from an explicit variable map (for tests).
std::optional<LaunchEnv> read_launch_env(const std::map<std::string, std::string>& vars);

}  // namespace mfsdp
