#include "core/dist/heartbeat.h"

#include <cstdio>
#include <string>

namespace mfsdp {
namespace {
std::string key(int rank) { return "mfsdp/heartbeat/" + std::to_string(rank); }
std::string done_key(int rank) { return "mfsdp/done/" + std::to_string(rank); }
}  // namespace

Heartbeat::Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, std::chrono::milliseconds interval)
    : store_(std::move(store)), rank_(rank), world_size_(world_size), interval_(interval) {
  store_->add(key(rank_), 1);
  thread_ = std::thread([this] {
    std::vector<int64_t> last(static_cast<size_t>(world_size_), 0);
    std::vector<int> unchanged(static_cast<size_t>(world_size_), 0);
    bool fired = false;
    auto fire = [&](const std::string& why) {
      fired = true;
      std::function<void(const std::string&)> f;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        f = on_lost_;
      }
      if (f) f(why);
    };
    while (!stop_.load()) {
      std::this_thread::sleep_for(interval_);
      if (stop_.load()) return;
      try {
        store_->add(key(rank_), 1);
      } catch (...) {
        if (!fired) fire("the job's store stopped answering (its host is gone)");
        return;  // the store is gone: the job is ending
      }
      bool watching = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        watching = static_cast<bool>(on_lost_);
      }
      if (!watching || fired) continue;
      std::string lost;
      try {
        for (int r = 0; r < world_size_; ++r) {
          if (r == rank_) continue;
          const int64_t v = store_->add(key(r), 0);
          const auto i = static_cast<size_t>(r);
          if (v != last[i]) {
            last[i] = v;
            unchanged[i] = 0;
          } else if (v > 0 && ++unchanged[i] >= kLostAfter && store_->add(done_key(r), 0) == 0) {
            lost += (lost.empty() ? "" : ", ") + std::to_string(r);
          }
        }
      } catch (...) {
        fire("the job's store stopped answering (its host is gone)");
        return;
      }
      if (!lost.empty()) {
        char secs[32];
        std::snprintf(secs, sizeof(secs), "%.1f", kLostAfter * interval_.count() / 1000.0);
        fire("lost rank " + lost + " (its heartbeat stopped " + secs + " s ago)");
      }
    }
  });
}

Heartbeat::~Heartbeat() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  try {
    store_->add(done_key(rank_), 1);  // finished: peers that still run do not count this silence as a loss
  } catch (...) {
  }
}

void Heartbeat::watch(std::function<void(const std::string& why)> on_lost) {
  std::lock_guard<std::mutex> lock(mutex_);
  on_lost_ = std::move(on_lost);
}

std::vector<int64_t> Heartbeat::read_counters() {
  std::vector<int64_t> counters;
  for (int r = 0; r < world_size_; ++r) {
    try {
      counters.push_back(store_->add(key(r), 0));  // add 0 reads without blocking on absent keys
    } catch (...) {
      counters.push_back(-1);
    }
  }
  return counters;
}

std::vector<int> Heartbeat::silent_ranks() {
  const std::vector<int64_t> before = read_counters();
  std::this_thread::sleep_for(3 * interval_);
  const std::vector<int64_t> after = read_counters();
  std::vector<int> silent;
  for (int r = 0; r < world_size_; ++r) {
    if (r != rank_ && after[r] == before[r]) silent.push_back(r);
  }
  return silent;
}

}  // namespace mfsdp
