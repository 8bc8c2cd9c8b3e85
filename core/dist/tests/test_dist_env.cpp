// Reading the launch environment of torchrun, Slurm and `mfsdp launch`.
#include "core/dist/launch_env.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

namespace mfsdp {
namespace {

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    read_launch_env(vars);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(LaunchEnv, NoLauncherVariablesMeansNotLaunched) {
  EXPECT_FALSE(read_launch_env(std::map<std::string, std::string>{{"HOME", "/root"}}).has_value());
}

TEST(LaunchEnv, Torchrun) {
  auto env = read_launch_env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
                              {"TORCHELASTIC_RUN_ID", "x"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_TRUE(env->agent_store);
  EXPECT_EQ(env->source, "torchrun");
}

TEST(LaunchEnv, SlurmWithoutAgentStoreMakesRankZeroTheServer) {
  auto env = read_launch_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->world_size, 2);
  EXPECT_FALSE(env->agent_store);
  EXPECT_EQ(env->source, "slurm");
}

TEST(LaunchEnv, LocalRankDefaultsToRank) {
  auto env = read_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                              {"MASTER_PORT", "5"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->local_rank, 1);
}

TEST(LaunchEnv, ErrorsNameTheVariable) {
  EXPECT_NE(error_of({{"RANK", "0"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}).find("WORLD_SIZE is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}})
                .find("RANK='x' is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}})
                .find("RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}}).find("MASTER_PORT is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}})
                .find("MASTER_PORT='70000'"),
            std::string::npos);
  for (const char* addr : {" ", "  ", "\t", "127.0.0.1 ", " localhost", "local host", "a\nb"})
    EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", addr}, {"MASTER_PORT", "1"}})
                  .find("is not a host name or address"),
              std::string::npos)
        << "'" << addr << "'";
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}})
                .find("SLURM_NTASKS is not set"),
            std::string::npos);
}

}  // namespace
}  // namespace mfsdp
