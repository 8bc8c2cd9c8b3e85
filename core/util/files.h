// Files and directories through POSIX calls (libtorch.so exports std::filesystem symbols of its own
// build; docs/gloo-notes.md says why this project does not use std::filesystem). The one place
// that writes a file atomically and reads a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mfsdp {

// The path rule (docs/files.md): every file the project reads or writes goes through here.
//  - Reads refuse anything but a regular file before they could block on it (a FIFO, a device),
//    with a size cap per kind of file.
//  - Writes go to a unique temporary beside the target (mkstemp), then one rename: never through a
//    symbolic link, never half-written. A user's output (WriteScope::user_output) is refused when
//    it is one of the command's inputs (same device and inode, whatever the spelling) or lies
//    inside a checkpoint directory; only the checkpoint writer and the dumps write inside their
//    own directories (WriteScope::own_directory).
//  - Deletes never leave the directory they were asked to clean: entries are removed with
//    unlinkat on that directory, and a symbolic link is removed, never followed.

enum class WriteScope {
  user_output,    // a file a flag names: checked against the command's inputs and checkpoint dirs
  own_directory,  // inside a directory this process owns and writes (a checkpoint, a dump)
};

// A file written atomically, in pieces: bytes go to a unique temporary file beside `path`;
// commit() syncs it and renames it over `path`. Destroyed uncommitted (an error, an exception),
// the temporary is removed and `path` is as it was: complete or absent, never half-written.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path, WriteScope scope = WriteScope::user_output);  // throws naming the path
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(const std::string& text) { write(text.data(), text.size()); }
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  WriteScope scope_;
  int fd_ = -1;
};

// Writes `text` to `path` atomically (a temporary file beside it, fsync, rename): complete or
// absent, never half-written. Throws naming the file.
void write_file_atomic(const std::string& path, const std::string& text, WriteScope scope = WriteScope::user_output);

// Opens `path` for reading: a regular file (checked before the open could block on a FIFO) of at
// most `max_bytes`. Returns the descriptor and its size; throws naming `what` and the path. The
// file is recorded as one of the command's inputs (guard_command_inputs).
struct OpenedFile {
  int fd = -1;
  int64_t bytes = 0;
};
OpenedFile open_regular_file(const std::string& path, const std::string& what, int64_t max_bytes);

// The whole file `path`. Refuses a directory, a device, a pipe or anything larger than
// `max_bytes`; throws naming `what` (the flag or role of the file, e.g. "--data") and the path.
std::string read_file(const std::string& path, const std::string& what = "file",
                      int64_t max_bytes = int64_t{1} << 32);

// From here on, every file this process reads is one of "the command's inputs", and a user output
// (WriteScope::user_output) onto one of them is refused. The mfsdp command turns it on; libraries
// and tests that read and rewrite their own files do not.
void guard_command_inputs();
// A directory that is a checkpoint directory although it may not look like one yet (a run's
// --checkpoint-dir before its first commit): user outputs inside it are refused.
void note_checkpoint_dir(const std::string& dir);
// The checkpoint directory that `dir` is, or lies inside ("" when none): a directory holding an
// mfsdp `latest`, `lock` or `layout.json`, or one noted above; compared by device and inode.
std::string checkpoint_dir_holding(const std::string& dir);

// Checks made where a flag enters, before any work (each throws naming `what` and the path):
// `path` is a readable regular file of at most `max_bytes` (and becomes one of the command's
// inputs); a file could be written at `path` (not a directory or a symbolic link, in an existing
// writable directory, not an input, not inside a checkpoint directory); `dir` is a writable
// directory or can be created.
void check_input_file(const std::string& path, const std::string& what, int64_t max_bytes);
void check_output_path(const std::string& path, const std::string& what);
void check_output_dir(const std::string& dir, const std::string& what);
// The same, and `dir` is absent or an empty directory (not a symbolic link, not inside a checkpoint
// directory): outputs that replace nothing.
void check_empty_output_dir(const std::string& dir, const std::string& what);

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
// Whether the directory that would hold `file` is `dir` itself (the same inode, any spelling).
bool file_lands_in(const std::string& file, const std::string& dir);
void make_dirs(const std::string& path);           // mkdir -p
// Removes a directory of plain files (absent is fine). A symbolic link in its place, or among its
// entries, is removed itself: nothing outside `path` is touched.
void remove_flat_dir(const std::string& path);
void fsync_path(const std::string& path);          // a file or a directory

}  // namespace mfsdp
