#include "core/util/files.h"

#include <c10/util/Exception.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

namespace mfsdp {

namespace {

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

struct FileId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};

// The command's inputs and noted checkpoint directories (process-wide: ranks may be threads).
struct Registry {
  std::mutex mutex;
  bool guard_inputs = false;
  std::vector<std::pair<FileId, std::string>> inputs, checkpoint_dirs;
};
Registry& registry() {
  static Registry r;
  return r;
}

void note_input(const struct stat& st, const std::string& path) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.guard_inputs) return;
  const FileId id{st.st_dev, st.st_ino};
  for (const auto& [known, p] : r.inputs)
    if (known == id) return;
  r.inputs.emplace_back(id, path);
}

// The input `path` is (by device and inode), or "".
std::string input_at(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& [id, p] : r.inputs)
    if (id == FileId{st.st_dev, st.st_ino}) return p;
  return "";
}

// The first `n` bytes of `path` if it is a regular file (never blocks on a FIFO), else "".
std::string regular_prefix(const std::string& path, size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "";
  struct stat st {};
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    out.resize(n);
    const ssize_t r = ::pread(fd, out.data(), n, 0);
    out.resize(r > 0 ? static_cast<size_t>(r) : 0);
  }
  ::close(fd);
  return out;
}

// mfsdp's own marks of a checkpoint directory: a step's layout.json, or the root's `latest` (a
// step name) or `lock` (a holder record).
bool marked_as_checkpoint(const std::string& dir) {
  struct stat st {};
  if (::lstat((dir + "/layout.json").c_str(), &st) == 0 && S_ISREG(st.st_mode)) return true;
  if (regular_prefix(dir + "/latest", 5) == "step_") return true;
  return regular_prefix(dir + "/lock", 4) == "pid ";
}

void refuse_inside_checkpoint(const std::string& path, const std::string& what) {
  const std::string ck = checkpoint_dir_holding(parent_of(path));
  TORCH_CHECK(ck.empty(), what, ": refusing to write '", path, "': it lies inside checkpoint directory '", ck,
              "' (only mfsdp's checkpoint writer writes there; name an output outside it)");
}

// A user output is refused when it is a symbolic link, one of the command's inputs, or inside a
// checkpoint directory; checked when the file is opened and again just before it is committed.
void check_user_output(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    TORCH_CHECK(!S_ISLNK(st.st_mode), what, ": refusing to write '", path,
                "': it is a symbolic link (outputs never write through or replace a link; name its target or a new file)");
    TORCH_CHECK(!S_ISDIR(st.st_mode), what, ": '", path, "' is a directory");
  }
  const std::string input = input_at(path);
  TORCH_CHECK(input.empty(), what, ": refusing to write '", path, "': it is this command's input '", input,
              "' (an output never replaces an input; name another file)");
  refuse_inside_checkpoint(path, what);
}

}  // namespace

void guard_command_inputs() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.guard_inputs = true;
}

void note_checkpoint_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return;  // created later; marked by its lock then
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.checkpoint_dirs.emplace_back(FileId{st.st_dev, st.st_ino}, dir);
}

std::string checkpoint_dir_holding(const std::string& dir) {
  // The nearest existing ancestor, resolved (a directory yet to be created lies where it will).
  std::string existing = dir.empty() ? "." : dir;
  char* real = nullptr;
  while (!(real = ::realpath(existing.c_str(), nullptr))) {
    const std::string up = parent_of(existing);
    if (up == existing) return "";
    existing = up;
  }
  std::string at = real;
  std::free(real);
  while (true) {
    struct stat st {};
    if (::stat(at.c_str(), &st) == 0) {
      {
        Registry& r = registry();
        std::lock_guard<std::mutex> lock(r.mutex);
        for (const auto& [id, p] : r.checkpoint_dirs)
          if (id == FileId{st.st_dev, st.st_ino}) return at;
      }
      if (marked_as_checkpoint(at)) return at;
    }
    if (at == "/") return "";
    at = parent_of(at);
  }
}

AtomicFile::AtomicFile(std::string path, WriteScope scope) : path_(std::move(path)), scope_(scope) {
  // Refused before anything is written (not at the final rename, after all the work).
  TORCH_CHECK(!path_.empty(), "cannot write a file with an empty name");
  struct stat st {};
  TORCH_CHECK(::stat(path_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), "cannot write '", path_, "': it is a directory");
  if (scope_ == WriteScope::user_output) check_user_output(path_, "output");
  // A unique temporary beside the target (two writers of one path never share one), hidden.
  std::string tmpl = parent_of(path_) + "/." + base_of(path_) + ".tmp.XXXXXX";
  fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
  TORCH_CHECK(fd_ >= 0, "cannot write '", path_, "' (its temporary in '", parent_of(path_), "'): ", std::strerror(errno));
  tmp_ = tmpl;
  ::fchmod(fd_, 0644);
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
    TORCH_CHECK(w > 0, "cannot write '", path_, "' (its temporary '", tmp_, "'): ", std::strerror(errno));
    done += static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  TORCH_CHECK(fd_ >= 0, "'", path_, "' was already committed");
  if (scope_ == WriteScope::user_output) {
    try {
      check_user_output(path_, "output");  // again: an input read, or a link made, since it was opened
    } catch (...) {
      ::close(fd_);
      fd_ = -1;
      ::unlink(tmp_.c_str());
      throw;
    }
  }
  const bool synced = ::fsync(fd_) == 0;
  const int sync_err = errno;
  const bool closed = ::close(fd_) == 0;
  const int close_err = errno;
  fd_ = -1;
  if (!synced || !closed) {
    ::unlink(tmp_.c_str());
    TORCH_CHECK(false, "cannot ", synced ? "close" : "sync", " '", tmp_, "': ", std::strerror(synced ? close_err : sync_err));
  }
  // POSIX rename (libtorch.so exports std::filesystem symbols that can interpose the standard
  // library's; docs/gloo-notes.md). It replaces a link at `path`, never what the link names.
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    TORCH_CHECK(false, "cannot rename '", tmp_, "' to '", path_, "': ", std::strerror(err));
  }
}

void write_file_atomic(const std::string& path, const std::string& text, WriteScope scope) {
  AtomicFile f(path, scope);
  f.write(text);
  f.commit();
}

OpenedFile open_regular_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  TORCH_CHECK(!path.empty(), what, ": empty path");
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, what, ": cannot read '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    TORCH_CHECK(false, what, ": '", path, "' is ", dir ? "a directory, not a file" : "not a regular file (a device, pipe or socket)");
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    TORCH_CHECK(false, what, ": '", path, "' has ", static_cast<int64_t>(st.st_size), " bytes, more than the ", max_bytes,
                " allowed");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  note_input(st, path);
  return {fd, static_cast<int64_t>(st.st_size)};
}

std::string read_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  const OpenedFile f = open_regular_file(path, what, max_bytes);
  std::string out(static_cast<size_t>(f.bytes), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(f.fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(f.fd);
      TORCH_CHECK(false, what, ": cannot read '", path, "': ", std::strerror(err));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(f.fd);
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

bool file_lands_in(const std::string& file, const std::string& dir) {
  const size_t slash = file.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : file.substr(0, slash);
  struct stat a {}, b {};
  return ::stat(parent.c_str(), &a) == 0 && ::stat(dir.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
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
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    TORCH_CHECK(errno == ENOENT, "cannot remove '", path, "': ", std::strerror(errno));
    return;
  }
  if (!S_ISDIR(st.st_mode)) {  // a link (to a directory or not) or a file in its place: itself only
    TORCH_CHECK(::unlink(path.c_str()) == 0, "cannot remove '", path, "': ", std::strerror(errno));
    return;
  }
  const int dfd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  TORCH_CHECK(dfd >= 0, "cannot open directory '", path, "': ", std::strerror(errno));
  DIR* d = ::fdopendir(dfd);
  if (!d) {
    const int err = errno;
    ::close(dfd);
    TORCH_CHECK(false, "cannot open directory '", path, "': ", std::strerror(err));
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  for (const std::string& name : names) {
    // The directory's own entry: a symbolic link is removed, never followed.
    if (::unlinkat(dfd, name.c_str(), 0) != 0) {
      const int err = errno;
      ::closedir(d);
      TORCH_CHECK(false, "cannot remove '", path, "/", name, "': ", std::strerror(err),
                  err == EISDIR ? " (a directory inside a checkpoint step: not written by mfsdp, left in place)" : "");
    }
  }
  ::closedir(d);
  TORCH_CHECK(::rmdir(path.c_str()) == 0, "cannot remove directory '", path, "': ", std::strerror(errno));
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "cannot open '", path, "' to sync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  TORCH_CHECK(rc == 0, "cannot sync '", path, "': ", std::strerror(errno));
}

}  // namespace mfsdp

namespace mfsdp {

void check_input_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  TORCH_CHECK(!path.empty(), what, ": empty path");
  struct stat st {};
  TORCH_CHECK(::stat(path.c_str(), &st) == 0, what, ": cannot read '", path, "': ", std::strerror(errno));
  TORCH_CHECK(!S_ISDIR(st.st_mode), what, ": '", path, "' is a directory, not a file");
  TORCH_CHECK(S_ISREG(st.st_mode), what, ": '", path, "' is not a regular file (a device, pipe or socket)");
  TORCH_CHECK(::access(path.c_str(), R_OK) == 0, what, ": cannot read '", path, "': ", std::strerror(errno));
  TORCH_CHECK(st.st_size <= max_bytes, what, ": '", path, "' has ", static_cast<int64_t>(st.st_size), " bytes, more than the ",
              max_bytes, " allowed");
  note_input(st, path);
}

void check_output_path(const std::string& path, const std::string& what) {
  TORCH_CHECK(!path.empty(), what, ": empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) TORCH_CHECK(!S_ISDIR(st.st_mode), what, ": '", path, "' is a directory");
  const std::string dir = parent_of(path);
  TORCH_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), what, ": cannot write '", path, "': its directory '", dir,
              "' does not exist");
  TORCH_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, what, ": cannot write '", path, "': directory '", dir, "' is not writable");
  check_user_output(path, what);
}

void check_output_dir(const std::string& dir, const std::string& what) {
  TORCH_CHECK(!dir.empty(), what, ": empty path");
  struct stat st {};
  std::string at = dir;
  while (::stat(at.c_str(), &st) != 0) {  // the nearest existing ancestor must let us create the rest
    // Absent is fine (created later); a link loop, a name too long or no permission is not.
    // (ENOTDIR: a file above it, named below.)
    TORCH_CHECK(errno == ENOENT || errno == ENOTDIR, what, ": cannot create '", dir, "': '", at, "': ", std::strerror(errno));
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
  refuse_inside_checkpoint(dir + "/x", what);
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
