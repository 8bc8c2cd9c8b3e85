#include "core/io/checkpoint_dir.h"

#include "core/util/errors.h"
#include "core/util/files.h"

#include <c10/util/Exception.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>

namespace mfsdp {
namespace {

// This process's command line, spaces between the arguments (for the lock file).
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);  // size 0 to stat: read as a stream
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (raw.size() > 4096) raw.resize(4096);
  std::replace(raw.begin(), raw.end(), '\0', ' ');
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  return raw;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  return ::gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "?";
}

// Flattens `j` into path -> leaf ("muon.lr" -> 0.02; arrays keep their index: "adamw.betas.0").
void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, nlohmann::json>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else if (j.is_array() && !prefix.empty() && prefix.rfind("groups", 0) != 0) {
    for (size_t i = 0; i < j.size(); ++i) flatten(j[i], prefix + "." + std::to_string(i), out);
  } else {
    out[prefix] = j;  // a leaf; parameter groups compare as one value each
  }
}

std::string shown(const nlohmann::json& v) { return v.is_null() ? std::string("(absent)") : v.dump(); }

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir) : dir_(dir) {
  try {
    make_dirs(dir);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "checkpoint directory '", dir, "': cannot create it: ", error_message(e));
  }
  TORCH_CHECK(is_directory(dir), "checkpoint directory '", dir, "' is not a directory");
  TORCH_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "checkpoint directory '", dir, "' is not writable: ",
              std::strerror(errno));
  // The lock is held on the directory itself: no file another command writes or replaces inside
  // it can take it away (the `lock` file only names the holder).
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TORCH_CHECK(fd_ >= 0, "checkpoint directory '", dir, "': cannot open it: ", std::strerror(errno));
  const std::string record = dir + "/lock";
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    std::string holder = "an unknown process";
    try {
      holder = read_file(record, "checkpoint lock", 4096);
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    } catch (const std::exception&) {
    }
    TORCH_CHECK(err != EWOULDBLOCK, "checkpoint directory '", dir, "' is in use by another run (", holder,
                "); wait for it to finish, or give this run another --checkpoint-dir");
    TORCH_CHECK(false, "checkpoint directory '", dir, "': cannot lock it: ", std::strerror(err));
  }
  struct stat st {};
  ::fstat(fd_, &st);
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  note_checkpoint_dir(dir);
  // Ours now: record who holds it (whatever an earlier, crashed holder left is replaced).
  const std::string text = "pid " + std::to_string(::getpid()) + " on " + host_name() + " since " + now_utc() + ": " +
                           command_line() + "\n";
  try {
    write_file_atomic(record, text, WriteScope::own_directory);
  } catch (const std::exception& e) {
    ::close(fd_);
    fd_ = -1;
    TORCH_CHECK(false, "checkpoint directory '", dir, "': cannot write '", record, "': ", error_message(e));
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock; the record stays, naming the last holder
}

void CheckpointDirLock::check_held() const {
  struct stat st {};
  const bool same = ::stat(dir_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_;
  TORCH_CHECK(same, "checkpoint directory '", dir_, "' was moved or replaced while this run held its lock; ",
              "stopping before writing into whatever is there now");
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::vector<int64_t> committed_steps(const std::string& dir) {
  std::vector<int64_t> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (auto step = parse_step_name(name); step && path_exists(dir + "/" + name + "/layout.json")) out.push_back(*step);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<int64_t> latest_step(const std::string& dir) {
  const std::string latest = dir + "/latest";
  if (!path_exists(latest)) return std::nullopt;
  const LatestRecord rec = parse_latest(read_file(latest, "checkpoint", 4096), latest);
  const std::optional<int64_t> step = parse_step_name(rec.name);
  TORCH_CHECK(step, "checkpoint: '", latest, "' names '", rec.name, "', which is not a step directory name");
  return step;
}

SettingsDiff compare_settings(const CheckpointLayout& layout, const nlohmann::json& model, const nlohmann::json& optimizers,
                              const nlohmann::json& precision) {
  SettingsDiff d;
  if (layout.precision != precision) {
    d.allowed.push_back("precision was " + layout.precision.dump() + ", is " + precision.dump() +
                        " (the float32 masters and optimizer state resume exactly; the steps from here compute under the new policy)");
  }
  std::map<std::string, nlohmann::json> then_model, now_model;
  flatten(layout.model, "", then_model);
  flatten(model, "", now_model);
  for (const auto& [k, v] : now_model) then_model.emplace(k, nullptr);
  for (const auto& [k, was] : then_model) {
    const nlohmann::json is = now_model.count(k) ? now_model.at(k) : nlohmann::json();
    if (was != is)
      d.refused.push_back("model " + k + " was " + shown(was) + ", is " + shown(is) +
                          " (the weights would be reinterpreted)");
  }
  // The optimizers in use: the matrix optimizer's section, AdamW's (every run uses it for the
  // rest), the kinds and the parameter groups.
  const std::string matrix = optimizers.value("matrix", std::string());
  std::map<std::string, nlohmann::json> then_opt, now_opt;
  flatten(layout.optimizers, "", then_opt);
  flatten(optimizers, "", now_opt);
  for (const auto& [k, v] : now_opt) then_opt.emplace(k, nullptr);
  for (const auto& [k, was] : then_opt) {
    const std::string section = k.substr(0, k.find('.'));
    const bool in_use = section == "matrix" || section == "other" || section == "groups" || section == "adamw" ||
                        section == matrix;
    if (!in_use) continue;
    const nlohmann::json is = now_opt.count(k) ? now_opt.at(k) : nlohmann::json();
    if (was == is) continue;
    const bool lr = k.size() >= 3 && k.compare(k.size() - 3, 3, ".lr") == 0;
    (lr ? d.allowed : d.refused).push_back("optimizer " + k + " was " + shown(was) + ", is " + shown(is));
  }
  return d;
}

}  // namespace mfsdp
