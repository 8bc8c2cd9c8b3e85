// The hardware profiles and the α-β collective model (core/sim).
#include "core/sim/collective_model.h"
#include "core/sim/hardware.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <numeric>

namespace mfsdp {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "<no error>";
}

std::vector<int> ranks(int first, int count) {
  std::vector<int> r(count);
  std::iota(r.begin(), r.end(), first);
  return r;
}

TEST(HardwareProfiles, EveryShippedProfileLoadsAndNamesItsSources) {
  const std::vector<std::string> names = hardware_profile_names(MFSDP_PROFILE_DIR);
  for (const char* want : {"a100-8x-4hdr", "a100-8x-8hdr", "h100-8x-8ndr", "h200-8x-8ndr"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const std::string& n : names) {
    const HardwareProfile p = load_hardware_profile(n, MFSDP_PROFILE_DIR);
    EXPECT_EQ(p.name, n);
    EXPECT_FALSE(p.sources.empty());
    // What calibrate writes reads back the same.
    const HardwareProfile back = hardware_profile_from_json(hardware_profile_to_json(p), "again.json");
    EXPECT_EQ(back.intra.busbw_Bps, p.intra.busbw_Bps);
    EXPECT_EQ(back.matmul_bf16_flops, p.matmul_bf16_flops);
  }
  EXPECT_NE(error_of([] { load_hardware_profile("tpu-v9", MFSDP_PROFILE_DIR); }).find("known: a100-8x-4hdr"), std::string::npos);
}

TEST(HardwareProfiles, BadFilesNameTheField) {
  const HardwareProfile a100 = load_hardware_profile("a100-8x-4hdr", MFSDP_PROFILE_DIR);
  std::string text = hardware_profile_to_json(a100);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  EXPECT_NE(error_of([&] { hardware_profile_from_json(with("\"ranks_per_node\": 8", "\"ranks_per_node\": 0"), "p.json"); })
                .find("hardware profile: 'p.json': profile.ranks_per_node: 0 is outside [1, 65536]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { hardware_profile_from_json(with("\"busbw_Bps\"", "\"bandwidth\""), "p.json"); })
                .find("profile.collectives.intra_node: lacks the field \"busbw_Bps\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { hardware_profile_from_json("{", "p.json"); }).find("malformed JSON"), std::string::npos);
}

// The formulas of collective_model.h on a100-8x-4hdr: base 8.4 us, hops 3.4 us (NVLink) and 14 us
// (network), busbw 230 GB/s inside a node and 90 GB/s across nodes.
TEST(CollectiveModel, RingTimesFollowNcclsShape) {
  const HardwareProfile p = load_hardware_profile("a100-8x-4hdr", MFSDP_PROFILE_DIR);
  const double S = 1 << 30;
  // All-gather of 1 GiB over one node's 8 ranks: 7 NVLink steps, 7/8 of S at 230 GB/s.
  EXPECT_DOUBLE_EQ(collective_seconds({CollectiveKind::allgather, ranks(0, 8), 1 << 30}, p),
                   8.4e-6 + 7 * 3.4e-6 + S * 7 / 8 / 230e9);
  // Over 64 ranks on 8 nodes: 63 steps, 7 of them inter-node, at the network's 90 GB/s.
  EXPECT_DOUBLE_EQ(collective_seconds({CollectiveKind::reduce_scatter, ranks(0, 64), 1 << 30}, p),
                   8.4e-6 + 56 * 3.4e-6 + 7 * 14e-6 + S * 63 / 64 / 90e9);
  EXPECT_DOUBLE_EQ(collective_seconds({CollectiveKind::allreduce, ranks(0, 8), 1 << 30}, p),
                   8.4e-6 + 14 * 3.4e-6 + 2 * S * 7 / 8 / 230e9);
  EXPECT_DOUBLE_EQ(collective_seconds({CollectiveKind::broadcast, ranks(0, 8), 1 << 30}, p), 8.4e-6 + 7 * 3.4e-6 + S / 230e9);
  // All-to-all over 16 ranks on 2 nodes, 1 GiB sent per rank: 7/15 to node peers over NVLink,
  // 8/15 to the other node through NICs that the node's 8 ranks share.
  EXPECT_DOUBLE_EQ(collective_seconds({CollectiveKind::alltoall, ranks(0, 16), 1 << 30}, p),
                   8.4e-6 + 14e-6 + std::max(S * 7 / 15 / 230e9, S * 8 / 15 * 8 / 90e9));
  // One rank: nothing moves.
  EXPECT_EQ(collective_seconds({CollectiveKind::allgather, {5}, 1 << 30}, p), 0.0);
  // A group spread over nodes pays the network even when small: 8 ranks, one per node.
  std::vector<int> one_per_node;
  for (int n = 0; n < 8; ++n) one_per_node.push_back(8 * n);
  EXPECT_GT(collective_seconds({CollectiveKind::allgather, one_per_node, 1 << 20}, p),
            collective_seconds({CollectiveKind::allgather, ranks(0, 8), 1 << 20}, p));
  EXPECT_NE(error_of([&] { collective_seconds({CollectiveKind::reduce, {}, 4}, p); }).find("empty group"), std::string::npos);
}

// What calibrate measures beyond the shared model: per-world-size fits and the rate by size.
TEST(HardwareProfiles, PerWorldSizeFitsAndTheMatmulCurveReadBackAndPrice) {
  HardwareProfile p = load_hardware_profile("a100-8x-4hdr", MFSDP_PROFILE_DIR);
  CollectiveFit& ag = p.fits[static_cast<int>(CollectiveKind::allgather)];
  ag = {true, 1e-5, 2e-6, 100e9, {{4, {3e-4, 2e9}}}};
  p.matmul_curve_fp32 = {{16, 1e9}, {256, 16e9}};
  p.matmul_curve_bf16 = {{16, 2e9}, {256, 32e9}};
  const HardwareProfile q = hardware_profile_from_json(hardware_profile_to_json(p), "again.json");
  const double S = 1 << 20;
  // A group of 4 inside a node: its own fit, latency + S (n-1)/n / busbw.
  EXPECT_DOUBLE_EQ(collective_seconds({CollectiveKind::allgather, ranks(0, 4), 1 << 20}, q), 3e-4 + S * 3 / 4 / 2e9);
  // Other sizes: the fit across sizes (base + 2 hops + bytes).
  EXPECT_DOUBLE_EQ(collective_seconds({CollectiveKind::allgather, ranks(0, 3), 1 << 20}, q), 1e-5 + 2 * 2e-6 + S * 2 / 3 / 100e9);
  // The rate by size: the ends beyond them, log-log between (64 is halfway from 16 to 256).
  EXPECT_DOUBLE_EQ(q.matmul_rate(false, 8), 1e9);
  EXPECT_DOUBLE_EQ(q.matmul_rate(false, 1024), 16e9);
  EXPECT_NEAR(q.matmul_rate(false, 64), 4e9, 1e-3);
  EXPECT_NEAR(q.matmul_rate(true, 64), 8e9, 1e-3);
  // Without a curve: the flat rate.
  EXPECT_EQ(load_hardware_profile("a100-8x-4hdr", MFSDP_PROFILE_DIR).matmul_rate(true, 64),
            load_hardware_profile("a100-8x-4hdr", MFSDP_PROFILE_DIR).matmul_bf16_flops);
  std::string text = hardware_profile_to_json(p);
  text.replace(text.find("\"4\""), 3, "\"x\"");
  EXPECT_NE(error_of([&] { hardware_profile_from_json(text, "p.json"); }).find("at_ranks.x: is not a world size of at least 2"),
            std::string::npos);
}

}  // namespace
}  // namespace mfsdp
