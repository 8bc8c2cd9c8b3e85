// Files and directories through POSIX calls (libtorch.so exports std::filesystem symbols of its own
// build; docs/gloo-notes.md says why this project does not use std::filesystem). The one place
// that writes a file atomically and reads a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mfsdp {

// A file written atomically, in pieces: bytes go to a temporary file beside `path`; commit()
// syncs it and renames it over `path`. Destroyed uncommitted (an error, an exception), the
// temporary is removed and `path` is as it was: complete or absent, never half-written.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // throws naming the temporary it cannot create
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(const std::string& text) { write(text.data(), text.size()); }
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// Writes `text` to `path` atomically (a temporary file beside it, fsync, rename): complete or
// absent, never half-written. Throws naming the file.
void write_file_atomic(const std::string& path, const std::string& text);

// The whole file `path`. Refuses a directory, a device or anything larger than `max_bytes`; throws
// naming `what` (the flag or role of the file, e.g. "--data") and the path.
std::string read_file(const std::string& path, const std::string& what = "file",
                      int64_t max_bytes = int64_t{1} << 32);

// Checks made where a flag enters, before any work (each throws naming `what` and the path):
// `path` is a readable regular file of at most `max_bytes`; a file could be written at `path` (not
// a directory, in an existing writable directory); `dir` is a writable directory or can be created.
void check_input_file(const std::string& path, const std::string& what, int64_t max_bytes);
void check_output_path(const std::string& path, const std::string& what);
void check_output_dir(const std::string& dir, const std::string& what);
// The same, and `dir` is absent or an empty directory (not a symbolic link): outputs that replace nothing.
void check_empty_output_dir(const std::string& dir, const std::string& what);

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
void make_dirs(const std::string& path);           // mkdir -p
void remove_flat_dir(const std::string& path);     // a directory of plain files; absent is fine
void fsync_path(const std::string& path);          // a file or a directory

}  // namespace mfsdp
