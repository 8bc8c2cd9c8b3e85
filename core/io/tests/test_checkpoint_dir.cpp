// The checkpoint directory's lock (core/io/checkpoint_dir.h): before every commit the holder
// checks that the path still names the directory it locked. A directory moved away, replaced by
// another at the same path, or removed, is refused by name; moved back, it is held again. (A check
// of the held descriptor instead of the path always passes: this test fails on it.)
#include "core/io/checkpoint_dir.h"
#include "core/util/errors.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

namespace mfsdp {
namespace {

TEST(CheckpointDirLock, AMovedOrReplacedDirectoryIsRefusedBeforeACommit) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("mfsdp_lock_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string dir = (root / "ck").string(), away = (root / "away").string();
  {
    CheckpointDirLock lock(dir);
    EXPECT_EQ(error_of([&] { lock.check_held(); }), "");
    fs::rename(dir, away);  // moved: the path names nothing
    EXPECT_NE(error_of([&] { lock.check_held(); }).find("was moved or replaced while this run held its lock"), std::string::npos);
    fs::create_directory(dir);  // replaced: another directory at the same path
    EXPECT_NE(error_of([&] { lock.check_held(); }).find("'" + dir + "' was moved or replaced"), std::string::npos);
    fs::remove(dir);
    fs::rename(away, dir);  // back where it was: the same directory, held again
    EXPECT_EQ(error_of([&] { lock.check_held(); }), "");
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace mfsdp
