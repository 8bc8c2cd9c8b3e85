// Hardware profiles for `mfsdp simulate` (docs/simulate.md): what one node of accelerators and its
// fabric can do, as data files (sim/profiles/*.json) that name their sources.
//
// Collectives follow the shape of NCCL's own tuning model (src/graph/tuning.cc): a base latency per
// collective, a latency per ring hop that depends on the link the hop crosses (intra-node or
// inter-node), and a bus bandwidth per link class; a group's bandwidth is that of its slowest link
// class. Ranks are numbered node-major: rank r is on node r / ranks_per_node.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp {

enum class CollectiveKind { broadcast, reduce, allgather, reduce_scatter, allreduce, alltoall };
constexpr int kNumCollectiveKinds = 6;
const char* to_string(CollectiveKind kind);
CollectiveKind collective_kind_from_string(const std::string& name);

// A measured fit of one collective kind (mfsdp calibrate): replaces the profile's shared
// base latency, intra-node hop latency and intra-node bus bandwidth for that kind.
struct CollectiveFit {
  bool measured = false;
  double base_latency_s = 0, hop_latency_s = 0, busbw_Bps = 0;
};

struct LinkClass {
  double hop_latency_s = 0;  // added per ring step that crosses this kind of link
  double busbw_Bps = 0;      // achievable bus bandwidth (nccl-tests' busbw) of a collective over it
};

struct HardwareProfile {
  std::string name;
  std::string description;
  int ranks_per_node = 1;
  int64_t device_memory_bytes = 0;
  double base_latency_s = 0;     // per collective (NCCL Ring/Simple's base)
  LinkClass intra, inter;        // inside a node; between nodes (the node's NICs together)
  double matmul_bf16_flops = 0;  // achievable dense bf16 matmul, FLOP/s per rank
  double matmul_fp32_flops = 0;  // achievable dense fp32 matmul, FLOP/s per rank
  // Host time per ATen operator dispatched (optional, 0 when absent): what small operators cost
  // beyond their FLOPs on a CPU; on a GPU the launches overlap the kernels and it is left at 0.
  double op_overhead_s = 0;
  // Ranks of a node that compute at once (GPUs: every rank; a CPU: its cores): with more ranks on a
  // node than slots, each rank's compute takes ranks / slots times longer.
  int compute_slots_per_node = 1;
  std::array<CollectiveFit, kNumCollectiveKinds> fits{};  // per kind, optional
  std::vector<std::string> sources;

  int node_of(int rank) const { return rank / ranks_per_node; }
};

// Parses and checks a profile (every field present, positive, finite); errors name the file and
// the field. `text` is the file's contents, `path` its name for messages.
HardwareProfile hardware_profile_from_json(const std::string& text, const std::string& path);
std::string hardware_profile_to_json(const HardwareProfile& profile);  // what calibrate writes

// A profile by name from `dir` (<dir>/<name>.json) or a path to a JSON file; throws listing the
// profiles in `dir` when neither exists.
HardwareProfile load_hardware_profile(const std::string& name_or_path, const std::string& dir);
std::vector<std::string> hardware_profile_names(const std::string& dir);

}  // namespace mfsdp
