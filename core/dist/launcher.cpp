#include "core/dist/launcher.h"
#include "core/dist/launch_env.h"

#include "core/dist/process_group.h"

#include <c10/util/Exception.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>

extern char** environ;

namespace mfsdp {
namespace {

std::atomic<int> g_forward_signal{0};
void on_signal(int sig) { g_forward_signal = sig; }

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;  // child's stdout
  int err_fd = -1;  // child's stderr
  std::string out_partial, err_partial;
  bool reaped = false;
  int status = 0;
};

std::vector<std::string> child_environment(int rank, int world_size, std::uint16_t port) {
  static const std::set<std::string> overridden{
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      "TORCHELASTIC_USE_AGENT_STORE", "MFSDP_LAUNCHER", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"};
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    if (!overridden.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(world_size));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world_size));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back("TORCHELASTIC_USE_AGENT_STORE=True");
  env.push_back("MFSDP_LAUNCHER=1");
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

Child spawn(int rank, const LaunchOptions& options, std::uint16_t port) {
  int out_pipe[2], err_pipe[2];
  TORCH_CHECK(pipe2(out_pipe, O_CLOEXEC) == 0 && pipe2(err_pipe, O_CLOEXEC) == 0,
              "launch: pipe failed: ", std::strerror(errno));
  // Everything the child needs is built before fork: between fork and exec only
  // async-signal-safe calls are allowed (the store server runs threads in this process).
  std::vector<std::string> env_strings = child_environment(rank, options.world_size, port);
  std::vector<std::string> argv_strings = options.command;
  std::vector<char*> envp = c_strings(env_strings);
  std::vector<char*> argv = c_strings(argv_strings);
  // The exec failure's message, built here (strerror is not async-signal-safe), per likely errno.
  const std::string cannot = "launch: rank " + std::to_string(rank) + ": cannot run '" + options.command[0] + "': ";
  const std::string no_such = cannot + std::strerror(ENOENT) + "\n", denied = cannot + std::strerror(EACCES) + "\n",
                    not_exec = cannot + std::strerror(ENOEXEC) + "\n", other = cannot + "exec failed\n";
  const pid_t parent = getpid();
  pid_t pid = fork();
  TORCH_CHECK(pid >= 0, "launch: fork failed for rank ", rank, ": ", std::strerror(errno));
  if (pid == 0) {
    // Its own process group: the launcher signals the rank and everything the rank started.
    setpgid(0, 0);
    // The rank dies with its launcher (even a SIGKILLed one), instead of training on as an orphan;
    // if the launcher is already gone, at once.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execve(argv[0], argv.data(), envp.data());
    const std::string& msg = errno == ENOENT ? no_such : errno == EACCES ? denied : errno == ENOEXEC ? not_exec : other;
    (void)!write(STDERR_FILENO, msg.data(), msg.size());
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no signal may reach the group before the child made it
  close(out_pipe[1]);
  close(err_pipe[1]);
  Child child;
  child.rank = rank;
  child.pid = pid;
  child.out_fd = out_pipe[0];
  child.err_fd = err_pipe[0];
  return child;
}

// Forwards complete lines from `fd` with the rank prefix; returns false at EOF.
bool forward(int fd, std::string& partial, FILE* sink, int rank, bool prefix) {
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n > 0) partial.append(buf, static_cast<size_t>(n));
  size_t start = 0, nl;
  while ((nl = partial.find('\n', start)) != std::string::npos || (n <= 0 && start < partial.size())) {
    size_t end = nl == std::string::npos ? partial.size() : nl;
    if (prefix) std::fprintf(sink, "[rank %d] ", rank);
    std::fwrite(partial.data() + start, 1, end - start, sink);
    std::fputc('\n', sink);
    start = end + 1;
  }
  partial.erase(0, std::min(start, partial.size()));
  std::fflush(sink);
  return n > 0;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "ended with status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  TORCH_CHECK(n > 0, "launch: cannot read /proc/self/exe: ", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

int launch_processes(const LaunchOptions& options) {
  TORCH_CHECK(options.world_size >= 1, "launch: world size must be >= 1, got ", options.world_size);
  TORCH_CHECK(!options.command.empty(), "launch: no command to run");
  auto store = make_tcp_store("127.0.0.1", 0, /*is_server=*/true, options.world_size, options.grace);
  const std::uint16_t port = tcp_store_port(store);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  std::vector<Child> children;
  for (int r = 0; r < options.world_size; ++r) children.push_back(spawn(r, options, port));

  std::optional<int> first_failure;  // index into children
  std::chrono::steady_clock::time_point terminate_at{}, kill_at{}, drain_until{};
  bool terminated = false, killed = false;
  size_t alive = children.size();

  // Every rank's process group, reaped ranks' too: what a rank started may outlive it.
  auto signal_all = [&](int sig) {
    for (auto& c : children) kill(-c.pid, sig);
  };
  int stopped_by = 0;  // the signal that stopped the launcher itself

  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is_stderr)
    for (auto& c : children) {
      if (c.out_fd >= 0) { fds.push_back({c.out_fd, POLLIN, 0}); owners.push_back({&c, false}); }
      if (c.err_fd >= 0) { fds.push_back({c.err_fd, POLLIN, 0}); owners.push_back({&c, true}); }
    }
    if (alive == 0 && fds.empty()) break;
    if (!fds.empty()) {
      poll(fds.data(), fds.size(), 100);
    } else {
      usleep(100'000);
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [c, is_err] = owners[i];
      int& fd = is_err ? c->err_fd : c->out_fd;
      if (!forward(fd, is_err ? c->err_partial : c->out_partial, is_err ? stderr : stdout, c->rank,
                   options.prefix_output)) {
        close(fd);
        fd = -1;
      }
    }
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (size_t i = 0; i < children.size(); ++i) {
        Child& c = children[i];
        if (c.pid != pid) continue;
        c.reaped = true;
        c.status = status;
        --alive;
        if (status != 0 && !first_failure && !terminated) {
          first_failure = i;
          std::fprintf(stderr, "launch: rank %d (pid %d) %s; waiting up to %lld ms for the other ranks\n",
                       c.rank, c.pid, describe_status(status).c_str(),
                       static_cast<long long>(options.grace.count()));
          terminate_at = std::chrono::steady_clock::now() + options.grace;
        }
      }
    }
    if (int sig = g_forward_signal.exchange(0)) {
      // Stopped from outside: the signal goes to every rank's group; ranks still there after
      // --grace-s are killed.
      if (!stopped_by) {
        std::fprintf(stderr, "launch: got SIG%s; passing it to %zu rank(s), SIGKILL after %lld ms\n", sigabbrev_np(sig), alive,
                     static_cast<long long>(options.grace.count()));
        kill_at = std::chrono::steady_clock::now() + options.grace;
      }
      stopped_by = sig;
      signal_all(sig);
      terminated = true;
    }
    auto now = std::chrono::steady_clock::now();
    if (alive > 0 && first_failure && !terminated && now >= terminate_at) {
      std::fprintf(stderr, "launch: terminating %zu remaining rank(s)\n", alive);
      signal_all(SIGTERM);
      terminated = true;
      kill_at = now + std::chrono::seconds(5);
    }
    if (alive > 0 && terminated && !killed && now >= kill_at) {
      signal_all(SIGKILL);
      killed = true;
    }
    // Children are gone but something they started may hold the pipes: listen 1 s more.
    if (alive == 0) {
      if (drain_until == std::chrono::steady_clock::time_point{}) drain_until = now + std::chrono::seconds(1);
      if (now >= drain_until) {
        for (auto& c : children) {
          if (c.out_fd >= 0) { close(c.out_fd); c.out_fd = -1; }
          if (c.err_fd >= 0) { close(c.err_fd); c.err_fd = -1; }
        }
      }
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  int code = 0;
  for (auto& c : children) {
    if (c.status != 0 && (!first_failure || &c != &children[*first_failure])) {
      std::fprintf(stderr, "launch: rank %d (pid %d) %s\n", c.rank, c.pid, describe_status(c.status).c_str());
    }
  }
  if (first_failure) code = exit_code_of(children[*first_failure].status);
  // After a failure or a signal, nothing a rank started is left running.
  if (first_failure || stopped_by) signal_all(SIGKILL);
  if (stopped_by) code = 128 + stopped_by;
  return code;
}

int run_ranks(const RanksOptions& ranks, Launcher launcher, const std::vector<std::string>& relaunch,
              std::chrono::milliseconds grace, const RankFn& fn) {
  if (const std::optional<LaunchEnv> env = read_launch_env()) {
    run_as_launched_rank(*env, ranks, fn);
    return 0;
  }
  if (launcher == Launcher::processes) {
    LaunchOptions launch;
    launch.world_size = ranks.world_size;
    launch.command = relaunch;
    launch.grace = grace;
    return launch_processes(launch);
  }
  run_ranks_as_threads(ranks, fn);
  return 0;
}

}  // namespace mfsdp
