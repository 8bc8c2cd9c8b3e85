// Communicator::group over Gloo thread ranks: a group of collectives moves the same data as its
// parts issued one by one, counts as one call (with every part's bytes) on the Communicator and
// on the recording backend alike, logs its parts under one id, and refuses what it cannot hold.
// W = 3 and 5: ordering bugs show at sizes that are not powers of two.
#include "core/dist/communicator.h"
#include "core/dist/ranks.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

namespace mfsdp {
namespace {

// Rank r's segment: 3 r + 1 elements (some ranks' larger than others'), valued 100 r + i.
at::Tensor segment_of(int r) { return at::arange(3 * r + 1, at::kFloat).add_(100.0 * r); }

// Runs `body` on W thread ranks and returns every failure it reported, prefixed by its rank.
std::vector<std::string> on_ranks(int W, const std::function<void(Communicator&, std::vector<std::string>&)>& body) {
  std::mutex mutex;
  std::vector<std::string> all;
  RanksOptions options;
  options.world_size = W;
  run_ranks_as_threads(options, [&](RankContext& ctx) {
    Communicator comm(ctx.backend);
    std::vector<std::string> mine;
    body(comm, mine);
    std::lock_guard<std::mutex> lock(mutex);
    for (const std::string& m : mine) all.push_back("rank " + std::to_string(ctx.rank) + ": " + m);
  });
  return all;
}

class CommunicatorGroup : public ::testing::TestWithParam<int> {};

TEST_P(CommunicatorGroup, BroadcastsOfEverySegmentMoveItsDataAndCountAsOneCall) {
  const int W = GetParam();
  const auto failures = on_ranks(W, [&](Communicator& comm, std::vector<std::string>& fail) {
    PhaseScope phase(comm, Phase::unshard);
    comm.backend().record_events(true);
    std::vector<at::Tensor> parts;
    for (int r = 0; r < W; ++r) parts.push_back(r == comm.rank() ? segment_of(r) : at::zeros({3 * r + 1}));
    c10::intrusive_ptr<c10d::Work> work = comm.group([&] {
      for (int r = 0; r < W; ++r) comm.broadcast(parts[r], r);
    });
    if (!work) return fail.push_back("the group returned no work");
    work->wait();
    for (int r = 0; r < W; ++r)
      if (!parts[r].equal(segment_of(r))) fail.push_back("segment " + std::to_string(r) + " arrived wrong");
    int64_t sent = 0, recv = 0, handed = 0;
    for (int r = 0; r < W; ++r) {
      const int64_t n = 4 * (3 * r + 1);
      handed += n;
      (r == comm.rank() ? sent : recv) += r == comm.rank() ? n * (W - 1) : n;
    }
    const PhaseCounters& c = comm.counters(Phase::unshard);
    if (c.calls != 1 || c.parts != W || c.bytes_sent != sent || c.bytes_recv != recv)
      fail.push_back("communicator counted " + std::to_string(c.calls) + " calls, " + std::to_string(c.parts) + " parts, " +
                     std::to_string(c.bytes_sent) + " / " + std::to_string(c.bytes_recv) + " bytes");
    const BackendCounters& b = comm.backend().counters(Phase::unshard);
    if (b.calls != 1 || b.parts != W || b.bytes != handed)
      fail.push_back("backend counted " + std::to_string(b.calls) + " calls, " + std::to_string(b.parts) + " parts, " +
                     std::to_string(b.bytes) + " bytes");
    const auto& log = comm.backend().events();
    if (static_cast<int>(log.size()) != W) return fail.push_back("the log holds " + std::to_string(log.size()) + " events");
    for (const BackendEvent& e : log)
      if (e.group != log[0].group || e.group < 0 || e.what != "broadcast") fail.push_back("a part logged outside the group");
  });
  for (const std::string& f : failures) ADD_FAILURE() << "W=" << W << " " << f;
}

TEST_P(CommunicatorGroup, ReducesToEveryRootSumAsTheirPartsDo) {
  const int W = GetParam();
  const auto failures = on_ranks(W, [&](Communicator& comm, std::vector<std::string>& fail) {
    std::vector<at::Tensor> parts;
    for (int r = 0; r < W; ++r) parts.push_back(at::full({r + 2}, static_cast<double>(comm.rank() + 1), at::kFloat));
    c10::intrusive_ptr<c10d::Work> work = comm.group([&] {
      for (int r = 0; r < W; ++r) comm.reduce_sum(parts[r], r);
    });
    work->wait();
    const at::Tensor want = at::full({comm.rank() + 2}, W * (W + 1) / 2.0, at::kFloat);
    if (!parts[comm.rank()].equal(want)) fail.push_back("its own root's sum is wrong");
    if (comm.counters(Phase::other).calls != 1) fail.push_back("the group of reduces counted more than one call");
  });
  for (const std::string& f : failures) ADD_FAILURE() << "W=" << W << " " << f;
}

// Many groups issued before any is waited on, then waited on in turn: each group's Work completes
// only when its data has arrived, and every message lands in its own group's tensor (Gloo matches
// a pair's messages in the order they were posted; each broadcast also has a tag of its own).
TEST_P(CommunicatorGroup, ManyGroupsInFlightKeepTheirMessagesApart) {
  const int W = GetParam();
  constexpr int kGroups = 40;
  const auto failures = on_ranks(W, [&](Communicator& comm, std::vector<std::string>& fail) {
    std::vector<std::vector<at::Tensor>> parts(kGroups);
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int g = 0; g < kGroups; ++g) {
      for (int r = 0; r < W; ++r)
        parts[g].push_back(r == comm.rank() ? segment_of(r).add(1000.0 * g) : at::zeros({3 * r + 1}));
      works.push_back(comm.group([&] {
        for (int r = 0; r < W; ++r) comm.broadcast(parts[g][r], r);
      }));
    }
    for (auto& w : works) w->wait();
    for (int g = 0; g < kGroups; ++g)
      for (int r = 0; r < W; ++r)
        if (!parts[g][r].equal(segment_of(r).add(1000.0 * g)))
          fail.push_back("group " + std::to_string(g) + ", segment " + std::to_string(r) + " arrived wrong");
    if (comm.counters(Phase::other).calls != kGroups) fail.push_back("the groups did not count once each");
  });
  for (const std::string& f : failures) ADD_FAILURE() << "W=" << W << " " << f;
}

TEST_P(CommunicatorGroup, AnEmptyGroupIsNoCallAndNestingOrABarrierInsideIsRefused) {
  const int W = GetParam();
  const auto failures = on_ranks(W, [&](Communicator& comm, std::vector<std::string>& fail) {
    if (comm.group([] {})) fail.push_back("an empty group returned work");
    if (comm.counters(Phase::other).calls != 0) fail.push_back("an empty group counted a call");
    auto refused = [&](const std::function<void()>& inside, const std::string& what, const std::string& expect) {
      try {
        comm.group(inside);
        fail.push_back(what + " was accepted");
      } catch (const std::exception& e) {
        if (std::string(e.what()).find(expect) == std::string::npos) fail.push_back(what + ": " + e.what());
      }
    };
    refused([&] { comm.group([] {}); }, "a nested group", "a group of collectives opened inside another");
    refused([&] { comm.barrier(); }, "a barrier in a group", "a barrier inside a group of collectives");
    // The communicator still works after a refusal.
    at::Tensor t = at::full({2}, 1.0, at::kFloat);
    comm.allreduce_sum(t)->wait();
    if (!t.equal(at::full({2}, static_cast<double>(W), at::kFloat))) fail.push_back("the all-reduce after the refusals is wrong");
  });
  for (const std::string& f : failures) ADD_FAILURE() << "W=" << W << " " << f;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommunicatorGroup, ::testing::Values(3, 5),
                         [](const ::testing::TestParamInfo<int>& i) { return "W" + std::to_string(i.param); });

}  // namespace
}  // namespace mfsdp
