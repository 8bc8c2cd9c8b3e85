// Running W ranks: as threads of one process (tests) or joining a group started by a launcher.
//
// A rank's whole world is its RankContext: rank, world size, the c10d backend it talks through,
// and its private random generator. Nothing here uses process-global state that ranks-as-threads
// could race on.
#pragma once

#include "core/dist/determinism.h"
#include "core/dist/process_group.h"
#include "core/dist/recording_backend.h"

#include <ATen/core/Generator.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mfsdp {

struct RankContext {
  int rank = 0;
  int world_size = 1;
  c10::intrusive_ptr<c10d::Backend> backend;
  at::Generator generator;  // private to this rank
  Determinism determinism = Determinism::deterministic;
  std::chrono::milliseconds timeout{0};
  // The store the world group met over and the backend kind: sub-groups (core/dist/mesh.h) meet
  // over prefixes of it.
  c10::intrusive_ptr<c10d::Store> store;
  BackendKind backend_kind = BackendKind::gloo;
  // Sub-groups formed so far: every rank forms them in the same order, so the count names each
  // one's store prefix uniquely (a prefix reused by a second group would meet the first's keys).
  int groups_formed = 0;
  // Optional. make_group: forms a sub-group ("shard" or "replicate", this rank's rank in it, its
  // size) instead of meeting over the store (the simulator's tracing backends, sim/trace.h).
  // on_group: told of each sub-group formed, with its recording backend (tests read its log).
  std::function<c10::intrusive_ptr<c10d::Backend>(const std::string& group, int rank, int size)> make_group;
  std::function<void(const std::string& group, const c10::intrusive_ptr<RecordingBackend>& backend)> on_group;
};

struct RanksOptions {
  int world_size = 1;
  BackendKind backend = BackendKind::gloo;
  std::chrono::milliseconds timeout{30'000};  // joining and every collective
  Determinism determinism = Determinism::deterministic;
  std::uint64_t seed = 0;
};

// One or more ranks failed. what() starts with the first rank that failed (in time: later
// failures are usually its consequence, e.g. peers timing out) and lists every failure.
class RankError : public std::runtime_error {
 public:
  struct Failure {
    int rank;
    std::string message;
  };
  explicit RankError(std::vector<Failure> failures);
  const std::vector<Failure>& failures() const { return failures_; }
  int first_rank() const { return failures_.front().rank; }

 private:
  std::vector<Failure> failures_;
};

using RankFn = std::function<void(RankContext&)>;

// Runs `fn` on options.world_size ranks, each a thread with its own backend over one shared
// in-memory store (each run gets a fresh store, so runs never collide). Returns when every rank
// has returned; throws RankError if any rank threw.
void run_ranks_as_threads(const RanksOptions& options, const RankFn& fn);

// Disables c10d's process-wide FlightRecorder, whose record path races when several process groups
// of one process issue collectives concurrently (libtorch 2.11). run_ranks_as_threads calls it;
// call it yourself before creating thread-rank groups any other way.
void disable_flight_recorder_for_thread_ranks();

// Joins the group described by the launch environment (see core/dist/launch_env.h) as one rank of a
// multi-process job, then runs `fn`. Errors name this rank.
struct LaunchEnv;
void run_as_launched_rank(const LaunchEnv& env, const RanksOptions& options, const RankFn& fn);

}  // namespace mfsdp
