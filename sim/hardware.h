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
#include <map>
#include <string>
#include <vector>

namespace mfsdp {

// broadcast_group: a group of broadcasts (Communicator::group), one per root, priced as one
// collective of their bytes together (sim/collective_model.h); last so the older kinds keep their
// indices.
enum class CollectiveKind { broadcast, reduce, allgather, reduce_scatter, allreduce, alltoall, broadcast_group };
constexpr int kNumCollectiveKinds = 7;
const char* to_string(CollectiveKind kind);
CollectiveKind collective_kind_from_string(const std::string& name);

// One world size's own fit of a collective kind: t = latency + S·g(n) / busbw, with the model's
// bandwidth factor g (collective_model.h) and no ring term (the size is fixed).
struct RankCountFit {
  double latency_s = 0, busbw_Bps = 0;
};

// A measured fit of one collective kind (mfsdp calibrate): replaces the profile's shared
// base latency, intra-node hop latency and intra-node bus bandwidth for that kind. A group inside
// one node whose size has a fit of its own in `at_ranks` uses that one instead (on a CPU, thread
// ranks contend for the cores, so the time does not grow with the ring's steps alone).
struct CollectiveFit {
  bool measured = false;
  double base_latency_s = 0, hop_latency_s = 0, busbw_Bps = 0;
  std::map<int, RankCountFit> at_ranks;
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
  // Optional (mfsdp calibrate): the measured rate of an n x n x n product by n, ascending; a
  // product between two points is priced at the log-log interpolation of their rates, one beyond
  // the ends at the nearest end's. Empty: every product at the flat rate above.
  std::vector<std::pair<int64_t, double>> matmul_curve_bf16, matmul_curve_fp32;
  // Host time per ATen operator dispatched (optional, 0 when absent): what small operators cost
  // beyond their FLOPs on a CPU; on a GPU the launches overlap the kernels and it is left at 0.
  double op_overhead_s = 0;
  // The same for the operators of an optimizer step (optional, 0: op_overhead_s): they run without
  // autograd, which records a graph node for each forward operator and drives the backward's
  // through its engine, so on a CPU each costs less than one of a forward and backward.
  double optimizer_op_overhead_s = 0;
  // Ranks of a node that compute at once (GPUs: every rank; a CPU: what its cores achieve together,
  // measured by calibrate, which may be less than their count): with more ranks on a node than
  // slots, each rank's compute takes ranks / slots times longer.
  double compute_slots_per_node = 1;
  std::array<CollectiveFit, kNumCollectiveKinds> fits{};  // per kind, optional
  std::vector<std::string> sources;

  int node_of(int rank) const { return rank / ranks_per_node; }
  // FLOP/s of a product whose cube-equivalent side is n, in bf16 (`half`) or fp32.
  double matmul_rate(bool half, double n) const;
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
