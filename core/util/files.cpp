#include "core/util/files.h"

#include <c10/util/Exception.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

namespace mfsdp {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  // Refused before anything is written (not at the final rename, after all the work).
  struct stat st {};
  TORCH_CHECK(!path_.empty(), "cannot write a file with an empty name");
  TORCH_CHECK(::stat(path_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), "cannot write '", path_, "': it is a directory");
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TORCH_CHECK(fd_ >= 0, "cannot write '", path_, "' (its temporary '", tmp_, "'): ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;  // committed
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  TORCH_CHECK(fd_ >= 0, "'", path_, "' was already committed");
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd_, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    TORCH_CHECK(w > 0, "cannot write '", tmp_, "': ", std::strerror(errno));
    done += static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  TORCH_CHECK(fd_ >= 0, "'", path_, "' was already committed");
  TORCH_CHECK(::fsync(fd_) == 0, "cannot sync '", tmp_, "': ", std::strerror(errno));
  TORCH_CHECK(::close(fd_) == 0, "cannot close '", tmp_, "': ", std::strerror(errno));
  fd_ = -1;
  // POSIX rename (libtorch.so exports std::filesystem symbols that can interpose the standard
  // library's; docs/gloo-notes.md).
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    TORCH_CHECK(false, "cannot rename '", tmp_, "' to '", path_, "': ", std::strerror(err));
  }
}

void write_file_atomic(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text);
  f.commit();
}

std::string read_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, what, ": cannot read '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    TORCH_CHECK(false, what, ": '", path, "' is ", dir ? "a directory, not a file" : "not a regular file (a device, pipe or socket)");
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    TORCH_CHECK(false, what, ": '", path, "' has ", st.st_size, " bytes, more than the ", max_bytes, " allowed");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      TORCH_CHECK(false, what, ": cannot read '", path, "': ", std::strerror(err));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_dirs(const std::string& path) {
  // Every prefix ending before a '/' (and the whole path), shortest first.
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string prefix = path.substr(0, end);
    if (!prefix.empty() && prefix.back() != '/' && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      TORCH_CHECK(false, "cannot create directory '", prefix, "': ", std::strerror(errno));
    if (end == std::string::npos) break;
  }
}

void remove_flat_dir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) {
    TORCH_CHECK(errno == ENOENT, "cannot open directory '", path, "': ", std::strerror(errno));
    return;
  }
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string p = path + "/" + name;
    if (::unlink(p.c_str()) != 0) {
      ::closedir(d);
      TORCH_CHECK(false, "cannot remove '", p, "': ", std::strerror(errno));
    }
  }
  ::closedir(d);
  TORCH_CHECK(::rmdir(path.c_str()) == 0, "cannot remove directory '", path, "': ", std::strerror(errno));
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "cannot open '", path, "' to sync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  TORCH_CHECK(rc == 0, "cannot sync '", path, "': ", std::strerror(errno));
}

}  // namespace mfsdp

namespace mfsdp {

void check_input_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  struct stat st {};
  TORCH_CHECK(::stat(path.c_str(), &st) == 0, what, ": cannot read '", path, "': ", std::strerror(errno));
  TORCH_CHECK(!S_ISDIR(st.st_mode), what, ": '", path, "' is a directory, not a file");
  TORCH_CHECK(S_ISREG(st.st_mode), what, ": '", path, "' is not a regular file (a device, pipe or socket)");
  TORCH_CHECK(::access(path.c_str(), R_OK) == 0, what, ": cannot read '", path, "': ", std::strerror(errno));
  TORCH_CHECK(st.st_size <= max_bytes, what, ": '", path, "' has ", static_cast<int64_t>(st.st_size), " bytes, more than the ",
              max_bytes, " allowed");
}

namespace {
std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace

void check_output_path(const std::string& path, const std::string& what) {
  TORCH_CHECK(!path.empty(), what, ": empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) TORCH_CHECK(!S_ISDIR(st.st_mode), what, ": '", path, "' is a directory");
  const std::string dir = parent_of(path);
  TORCH_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), what, ": cannot write '", path, "': its directory '", dir,
              "' does not exist");
  TORCH_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, what, ": cannot write '", path, "': directory '", dir, "' is not writable");
}

void check_output_dir(const std::string& dir, const std::string& what) {
  TORCH_CHECK(!dir.empty(), what, ": empty path");
  struct stat st {};
  std::string at = dir;
  while (::stat(at.c_str(), &st) != 0) {  // the nearest existing ancestor must let us create the rest
    const std::string up = parent_of(at);
    TORCH_CHECK(up != at, what, ": cannot create '", dir, "'");
    at = up;
  }
  TORCH_CHECK(S_ISDIR(st.st_mode), what, ": '", at, "' is not a directory", at == dir ? "" : (" (in the path of '" + dir + "')").c_str());
  TORCH_CHECK(::access(at.c_str(), W_OK | X_OK) == 0, what, ": '", at, "' is not writable",
              at == dir ? std::string() : " (so '" + dir + "' cannot be created)");
}

void check_empty_output_dir(const std::string& dir, const std::string& what) {
  check_output_dir(dir, what);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return;  // absent: created by the writer
  TORCH_CHECK(S_ISDIR(st.st_mode), what, ": '", dir, "' is not a directory", S_ISLNK(st.st_mode) ? " (a symbolic link)" : "");
  DIR* d = ::opendir(dir.c_str());
  TORCH_CHECK(d != nullptr, what, ": cannot read '", dir, "': ", std::strerror(errno));
  bool empty = true;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") empty = false;
  }
  ::closedir(d);
  TORCH_CHECK(empty, what, ": '", dir, "' is not empty (the output goes into a new or empty directory; nothing there is replaced)");
}

}  // namespace mfsdp
