// The one atomic write, the one whole-file read and the one CRC-32.
#include "core/util/crc32.h"
#include "core/util/files.h"
#include "core/util/json_limits.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
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
  remove_flat_dir(dir);  // it holds no temporary (it would refuse to remove a directory among them)
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

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// The path rule (docs/files.md), each part against the fault it stops.
TEST(PathRule, TwoWritersOfOnePathUseTwoTemporariesAndNeitherCorruptsTheOther) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/latest";
  {
    AtomicFile a(path), b(path);  // used to share path.tmp.<pid>: b truncated a's bytes
    a.write(std::string(1000, 'a'));
    b.write(std::string(10, 'b'));
    a.commit();
    EXPECT_EQ(read_file(path), std::string(1000, 'a'));
    b.commit();
  }
  EXPECT_EQ(read_file(path), std::string(10, 'b'));
  remove_flat_dir(dir);
}

TEST(PathRule, AUserOutputNeverWritesThroughOrReplacesASymbolicLink) {
  const std::string dir = temp_dir();
  write_file_atomic(dir + "/target", "keep");
  ASSERT_EQ(::symlink((dir + "/target").c_str(), (dir + "/link").c_str()), 0);
  EXPECT_NE(error_text([&] { write_file_atomic(dir + "/link", "x"); }).find("it is a symbolic link"), std::string::npos);
  EXPECT_NE(error_text([&] { check_output_path(dir + "/link", "--out"); }).find("--out: refusing to write"), std::string::npos);
  EXPECT_EQ(read_file(dir + "/target"), "keep");
  // The checkpoint writer's own files: the rename replaces a link, never what it names.
  write_file_atomic(dir + "/link", "own", WriteScope::own_directory);
  EXPECT_EQ(read_file(dir + "/target"), "keep");
  EXPECT_EQ(read_file(dir + "/link"), "own");
  remove_flat_dir(dir);
}

TEST(PathRule, NothingIsWrittenInsideACheckpointDirectoryButByItsWriter) {
  const std::string dir = temp_dir();
  make_dirs(dir + "/ck/step_00000002");
  write_file_atomic(dir + "/ck/step_00000002/layout.json", "{}", WriteScope::own_directory);
  write_file_atomic(dir + "/ck/latest", "step_00000002\n", WriteScope::own_directory);
  for (const std::string& out : {dir + "/ck/step_00000002/rank_00000.safetensors", dir + "/ck/new.json",
                                 dir + "/ck/./step_00000002/../latest"}) {
    const std::string e = error_text([&] { check_output_path(out, "--metrics"); });
    EXPECT_NE(e.find("lies inside checkpoint directory"), std::string::npos) << out << ": " << e;
    EXPECT_NE(error_text([&] { write_file_atomic(out, "x"); }), "") << out;
  }
  EXPECT_EQ(checkpoint_dir_holding(dir + "/ck/step_00000002/"), dir + "/ck/step_00000002");  // /tmp holds no link
  EXPECT_EQ(checkpoint_dir_holding(dir), "");
  // A directory noted before it has any mark (a run's --checkpoint-dir before its first commit).
  make_dirs(dir + "/fresh");
  EXPECT_EQ(error_text([&] { check_output_path(dir + "/fresh/m.jsonl", "--metrics"); }), "");
  note_checkpoint_dir(dir + "/fresh");
  EXPECT_NE(error_text([&] { check_output_path(dir + "/fresh/m.jsonl", "--metrics"); }).find("inside checkpoint"),
            std::string::npos);
  EXPECT_NE(error_text([&] { check_empty_output_dir(dir + "/ck/dump", "--dump-trajectory"); }).find("inside checkpoint"),
            std::string::npos);
}

TEST(PathRule, DeletesRemoveALinkItselfNeverWhatItNames) {
  const std::string dir = temp_dir();
  make_dirs(dir + "/victim");
  write_file_atomic(dir + "/victim/a", "keep");
  write_file_atomic(dir + "/outside", "keep");
  make_dirs(dir + "/clean");
  write_file_atomic(dir + "/clean/f", "x");
  ASSERT_EQ(::symlink((dir + "/outside").c_str(), (dir + "/clean/link").c_str()), 0);
  ASSERT_EQ(::symlink((dir + "/victim").c_str(), (dir + "/step").c_str()), 0);
  remove_flat_dir(dir + "/clean");  // its link to a file outside
  remove_flat_dir(dir + "/step");   // a link in place of a directory: used to empty victim/
  EXPECT_FALSE(path_exists(dir + "/clean"));
  EXPECT_FALSE(path_exists(dir + "/step"));
  EXPECT_EQ(read_file(dir + "/victim/a"), "keep");
  EXPECT_EQ(read_file(dir + "/outside"), "keep");
}

TEST(PathRule, ReadsRefuseAFifoWithoutWaitingForAWriter) {
  const std::string dir = temp_dir();
  ASSERT_EQ(::mkfifo((dir + "/pipe").c_str(), 0644), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(error_text([&] { read_file(dir + "/pipe", "--profile"); }).find("--profile: '" + dir + "/pipe' is not a regular file"),
            std::string::npos);
  EXPECT_NE(error_text([&] { open_regular_file(dir + "/pipe", "checkpoint", 1 << 20); }), "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(error_text([&] { read_file("", "--data"); }).find("--data: empty path"), std::string::npos);
  remove_flat_dir(dir);
}

TEST(JsonLimits, DepthIsRefusedBeforeParsingAndStringsDoNotCount) {
  EXPECT_EQ(parse_json("{\"a\": [[1], {\"b\": \"[[[[\\\"[[\"}]}", "spec")["a"][0][0], 1);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(error_text([&] { parse_json(deep, "plan: 'x.json'"); }).find("plan: 'x.json': JSON nested deeper than 64 levels (at byte 64)"),
            std::string::npos);
  EXPECT_EQ(error_text([&] { check_json_depth(std::string(64, '{'), "x"); }), "");
  EXPECT_NE(error_text([&] { check_json_depth(std::string(65, '{'), "x"); }), "");
  // An escaped quote does not end a string: brackets after it inside the string never count, and
  // a deep value after such a string is still counted (a scan that ends the string at \" lets the
  // next quote open a "string" that hides it). An escaped backslash ends before the quote.
  const std::string brackets = std::string(100, '['), closes = std::string(100, ']');
  EXPECT_EQ(parse_json("{\"a\": \"x\\\"" + brackets + "\"}", "spec")["a"].get<std::string>(), "x\"" + brackets);
  for (const std::string& before : {std::string("\"\\\"\""), std::string("\"\\\\\"")}) {  // "\"" and "\\"
    const std::string text = "{\"a\": " + before + ", \"b\": " + brackets + closes + "}";
    EXPECT_NE(error_text([&] { check_json_depth(text, "x"); }).find("nested deeper than 64"), std::string::npos) << text;
  }
}

// Last: turns on the process-wide input guard for the rest of this binary.
TEST(PathRule, ZZOutputsNeverReplaceTheCommandsInputsUnderAnySpelling) {
  const std::string dir = temp_dir();
  write_file_atomic(dir + "/corpus.txt", "text");
  ASSERT_EQ(::link((dir + "/corpus.txt").c_str(), (dir + "/hard").c_str()), 0);
  guard_command_inputs();
  read_file(dir + "/corpus.txt", "--data");
  for (const std::string& out : {dir + "/corpus.txt", dir + "/./corpus.txt", dir + "/hard"}) {
    EXPECT_NE(error_text([&] { check_output_path(out, "--metrics"); }).find("it is this command's input"), std::string::npos) << out;
    EXPECT_NE(error_text([&] { write_file_atomic(out, "x"); }), "") << out;
  }
  // An input read after the output was opened: refused at the commit, the input intact.
  write_file_atomic(dir + "/late.txt", "late");
  {
    AtomicFile out(dir + "/late.txt");
    out.write("replaced");
    read_file(dir + "/late.txt");
    EXPECT_NE(error_text([&] { out.commit(); }).find("it is this command's input"), std::string::npos);
  }
  EXPECT_EQ(read_file(dir + "/late.txt"), "late");
  EXPECT_EQ(read_file(dir + "/corpus.txt"), "text");
}

}  // namespace
}  // namespace mfsdp
