// The one atomic write, the one whole-file read and the one CRC-32.
#include "core/util/crc32.h"
#include "core/util/files.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <functional>

#include <string>

namespace mfsdp {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/mfsdp_files_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

TEST(Crc32, MatchesZlibCheckValueAndContinues) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32(s.data(), s.size()), 0xCBF43926u);  // the CRC-32 check value (zlib.crc32(b"123456789"))
  EXPECT_EQ(crc32(s.data() + 4, 5, crc32(s.data(), 4)), 0xCBF43926u);
  EXPECT_EQ(crc32(nullptr, 0), 0u);
}

TEST(Files, AtomicWriteThenReadRoundTripsAndLeavesNoTemporary) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/a.txt";
  write_file_atomic(path, "first");
  write_file_atomic(path, std::string("second\0with nul", 15));
  EXPECT_EQ(read_file(path), std::string("second\0with nul", 15));
  EXPECT_FALSE(path_exists(path + ".tmp." + std::to_string(::getpid())));
  remove_flat_dir(dir);
  EXPECT_FALSE(path_exists(dir));
}

TEST(Files, ReadRefusesMissingDirectoryAndOversizedFilesNamingThem) {
  const std::string dir = temp_dir();
  try {
    read_file(dir, "--data");
    FAIL() << "a directory was read";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("--data: '" + dir + "' is a directory"), std::string::npos)
        << e.what_without_backtrace();
  }
  write_file_atomic(dir + "/big", std::string(100, 'x'));
  try {
    read_file(dir + "/big", "spec", 99);
    FAIL() << "an oversized file was read";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("has 100 bytes, more than the 99 allowed"), std::string::npos);
  }
  EXPECT_THROW(read_file(dir + "/absent", "spec"), c10::Error);
  EXPECT_THROW(write_file_atomic(dir + "/no/such/dir/file", "x"), c10::Error);
  remove_flat_dir(dir);
}

// An atomic write onto a directory is refused before anything is written (it used to fail only
// at the final rename, after all the work, leaving nothing behind only by luck).
TEST(Files, AtomicWriteOntoADirectoryIsRefusedUpFrontAndLeavesNothing) {
  const std::string dir = temp_dir();
  const std::string target = dir + "/out";
  ::mkdir(target.c_str(), 0755);
  try {
    AtomicFile f(target);
    ADD_FAILURE() << "an AtomicFile onto a directory was created";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("cannot write '" + target + "': it is a directory"), std::string::npos)
        << e.what_without_backtrace();
  }
  EXPECT_FALSE(path_exists(target + ".tmp." + std::to_string(::getpid())));
  ::rmdir(target.c_str());
  ::rmdir(dir.c_str());
}

// Flags are checked where they enter: readable regular files, writable outputs, creatable dirs.
TEST(Files, EntryChecksNameTheFlagAndWhatIsWrong) {
  auto error = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string();
  };
  EXPECT_NE(error([] { check_input_file("/dev/zero", "--data", 1 << 20); }).find("--data: '/dev/zero' is not a regular file"),
            std::string::npos);
  EXPECT_NE(error([] { check_input_file("/tmp", "--data", 1 << 20); }).find("is a directory"), std::string::npos);
  EXPECT_NE(error([] { check_input_file("/etc/os-release", "--data", 1); }).find("more than the 1 allowed"), std::string::npos);
  EXPECT_NE(error([] { check_output_path("/tmp", "--metrics"); }).find("--metrics: '/tmp' is a directory"), std::string::npos);
  EXPECT_NE(error([] { check_output_path("/nonexistent/x", "--metrics"); }).find("its directory '/nonexistent' does not exist"),
            std::string::npos);
  EXPECT_NE(error([] { check_output_dir("/etc/os-release/ck", "--checkpoint-dir"); }).find("'/etc/os-release' is not a directory"),
            std::string::npos);
  EXPECT_EQ(error([] { check_output_dir("/tmp/mfsdp_not_yet/a/b", "--checkpoint-dir"); }), "");  // creatable
}

TEST(Files, MakeDirsCreatesEveryLevelAndAcceptsExistingOnes) {
  const std::string dir = temp_dir();
  make_dirs(dir + "/a/b//c/");
  EXPECT_TRUE(is_directory(dir + "/a/b/c"));
  make_dirs(dir + "/a/b/c");  // already there: fine
  write_file_atomic(dir + "/a/file", "x");
  EXPECT_THROW(make_dirs(dir + "/a/file/d"), c10::Error);
  for (const char* d : {"/a/b/c", "/a/b"}) remove_flat_dir(dir + d);
  remove_flat_dir(dir + "/a");
  remove_flat_dir(dir);
  EXPECT_FALSE(path_exists(dir));
}

}  // namespace
}  // namespace mfsdp
