// Which ranks of a multi-process job are still alive, so a failed collective can name the rank
// that was lost instead of only "connection reset by peer".
//
// Each rank bumps its own counter in the store every `interval` from a background thread (on its
// own store connection). To find the silent ranks, read every counter, wait three intervals, read
// again: a counter that did not move belongs to a rank that is gone (or frozen). No clocks are
// compared across machines. A rank that ends normally says so (its "done" key), so its silence
// afterwards is not a loss.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <chrono>
#include <thread>
#include <vector>

namespace mfsdp {

class Heartbeat {
 public:
  Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
            std::chrono::milliseconds interval = std::chrono::milliseconds(200));
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Ranks (other than this one) whose heartbeat did not advance over three intervals.
  std::vector<int> silent_ranks();

  // Watches every other rank from the heartbeat thread: once a rank that had started beats no more
  // for kLostAfter intervals (and has not said it finished), or the store stops answering,
  // `on_lost` is called once with why ("lost rank 2 (its heartbeat stopped 3.0 s ago)"). So a rank
  // blocked where no error reaches it (a collective with a peer that waits too, a store wait)
  // still learns that the job is over. Set before the work starts.
  static constexpr int kLostAfter = 15;  // 3 s at the default interval
  void watch(std::function<void(const std::string& why)> on_lost);

 private:
  std::vector<int64_t> read_counters();

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_size_;
  std::chrono::milliseconds interval_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::function<void(const std::string&)> on_lost_;
  std::thread thread_;
};

}  // namespace mfsdp
