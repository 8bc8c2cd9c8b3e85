#include "core/dist/launch_env.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>

extern char** environ;

namespace mfsdp {
namespace {

using Vars = std::map<std::string, std::string>;

const std::string* find(const Vars& vars, const std::string& key) {
  auto it = vars.find(key);
  return it == vars.end() ? nullptr : &it->second;
}

long parse_int(const std::string& name, const std::string& text, long lo, long hi) {
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  TORCH_CHECK(!text.empty() && end && *end == '\0' && errno == 0 && value >= lo && value <= hi,
              "launch environment: ", name, "='", text, "' is not an integer in [", lo, ", ", hi, "]");
  return value;
}

const std::string& require(const Vars& vars, const std::string& key, const std::string& why) {
  const std::string* v = find(vars, key);
  TORCH_CHECK(v != nullptr && !v->empty(), "launch environment: ", key, " is not set (", why, ")");
  return *v;
}

}  // namespace

std::optional<LaunchEnv> read_launch_env(const Vars& vars) {
  LaunchEnv env;
  std::string rank_var, size_var;
  if (find(vars, "RANK") || find(vars, "WORLD_SIZE")) {
    env.source = find(vars, "MFSDP_LAUNCHER")        ? "mfsdp launch"
                 : find(vars, "TORCHELASTIC_RUN_ID") ? "torchrun"
                                                     : "RANK/WORLD_SIZE";
    rank_var = "RANK";
    size_var = "WORLD_SIZE";
  } else if (find(vars, "SLURM_PROCID")) {
    env.source = "slurm";
    rank_var = "SLURM_PROCID";
    size_var = "SLURM_NTASKS";
  } else {
    return std::nullopt;
  }
  env.world_size = static_cast<int>(parse_int(
      size_var, require(vars, size_var, rank_var + " is set, so the world size is needed too"), 1, 1 << 20));
  env.rank = static_cast<int>(parse_int(rank_var, require(vars, rank_var, size_var + " is set, so this process's rank is needed too"), 0, INT_MAX));
  TORCH_CHECK(env.rank < env.world_size, "launch environment: ", rank_var, "=", env.rank,
              " is not below ", size_var, "=", env.world_size);
  const char* local_var = env.source == "slurm" ? "SLURM_LOCALID" : "LOCAL_RANK";
  if (const std::string* local = find(vars, local_var)) {
    env.local_rank = static_cast<int>(parse_int(local_var, *local, 0, INT_MAX));
  } else {
    env.local_rank = env.rank;
  }
  env.master_addr = require(vars, "MASTER_ADDR", "the address of the TCP store (rank 0's host)");
  // A blank or spaced value passed the set-or-not test, and rank 0 then waited out the whole
  // timeout for peers that could not dial it: no host name or address holds whitespace.
  const bool spaced = std::any_of(env.master_addr.begin(), env.master_addr.end(),
                                  [](unsigned char c) { return std::isspace(c) || std::iscntrl(c); });
  TORCH_CHECK(!spaced, "launch environment: MASTER_ADDR='", env.master_addr,
              "' is not a host name or address (it holds whitespace or a control character)");
  env.master_port = static_cast<std::uint16_t>(
      parse_int("MASTER_PORT", require(vars, "MASTER_PORT", "the TCP store's port"), 1, 65535));
  if (const std::string* agent = find(vars, "TORCHELASTIC_USE_AGENT_STORE")) {
    env.agent_store = (*agent == "True" || *agent == "true" || *agent == "1");
  }
  return env;
}

std::optional<LaunchEnv> read_launch_env() {
  Vars vars;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) vars.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return read_launch_env(vars);
}

}  // namespace mfsdp
