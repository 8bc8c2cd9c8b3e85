#include "core/dist/heartbeat.h"

#include <string>

namespace mfsdp {
namespace {
std::string key(int rank) { return "mfsdp/heartbeat/" + std::to_string(rank); }
}  // namespace

Heartbeat::Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, std::chrono::milliseconds interval)
    : store_(std::move(store)), rank_(rank), world_size_(world_size), interval_(interval) {
  store_->add(key(rank_), 1);
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      std::this_thread::sleep_for(interval_);
      try {
        store_->add(key(rank_), 1);
      } catch (...) {
        return;  // the store is gone: the job is ending
      }
    }
  });
}

Heartbeat::~Heartbeat() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
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
