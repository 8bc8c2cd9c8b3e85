#include "sim/hardware.h"

#include "core/util/files.h"
#include "core/util/json_fields.h"
#include "core/util/json_limits.h"

#include <algorithm>
#include <cmath>
#include <dirent.h>
#include <sys/stat.h>

namespace mfsdp {

namespace {
constexpr const char* kKind = "hardware profile";
constexpr std::array<const char*, kNumCollectiveKinds> kKindNames{"broadcast", "reduce", "allgather",
                                                                 "reduce_scatter", "allreduce", "alltoall",
                                                                 "broadcast_group"};
constexpr int64_t kMaxProfileBytes = 1 << 20;

LinkClass link(const JsonFields& f) {
  LinkClass l;
  l.hop_latency_s = f.number("hop_latency_s", 0, 1);
  l.busbw_Bps = f.number("busbw_Bps", 1, 1e15);
  return l;
}
}  // namespace

const char* to_string(CollectiveKind kind) { return kKindNames.at(static_cast<size_t>(kind)); }

CollectiveKind collective_kind_from_string(const std::string& name) {
  for (size_t i = 0; i < kKindNames.size(); ++i)
    if (name == kKindNames[i]) return static_cast<CollectiveKind>(i);
  TORCH_CHECK(false, "unknown collective '", name, "' (broadcast, reduce, allgather, reduce_scatter, allreduce, alltoall, broadcast_group)");
}

HardwareProfile hardware_profile_from_json(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = parse_json(text, std::string(kKind) + ": '" + path + "'");
  } catch (const nlohmann::json::parse_error& e) {
    bad_json(kKind, path, "the file", std::string("malformed JSON: ") + e.what());
  }
  const JsonFields f{j, path, "profile", kKind};
  HardwareProfile p;
  p.name = f.string("name");
  p.description = f.string("description");
  p.ranks_per_node = static_cast<int>(f.integer("ranks_per_node", 1, 1 << 16));
  p.device_memory_bytes = f.integer("device_memory_bytes", 1);
  const JsonFields c = f.fields("collectives");
  p.base_latency_s = c.number("base_latency_s", 0, 1);
  p.intra = link(c.fields("intra_node"));
  p.inter = link(c.fields("inter_node"));
  const JsonFields m = f.fields("matmul_flops");
  p.matmul_bf16_flops = m.number("bf16", 1, 1e18);
  p.matmul_fp32_flops = m.number("fp32", 1, 1e18);
  p.compute_slots_per_node = f.number("compute_slots_per_node", 1, 1 << 16);
  if (m.j.contains("curve")) {
    const JsonFields curve = m.fields("curve");
    for (const char* dtype : {"bf16", "fp32"}) {
      auto& out = std::string(dtype) == "bf16" ? p.matmul_curve_bf16 : p.matmul_curve_fp32;
      const nlohmann::json& points = curve.array(dtype);
      for (size_t i = 0; i < points.size(); ++i) {
        const JsonFields pt = curve.element(dtype, i);
        out.emplace_back(pt.integer("n", 1, 1 << 20), pt.number("flops", 1, 1e18));
        if (i > 0 && out[i].first <= out[i - 1].first) curve.bad(curve.in(dtype), "is not in ascending n");
      }
      if (out.empty()) curve.bad(curve.in(dtype), "is empty");
    }
  }
  if (j.contains("op_overhead_s")) p.op_overhead_s = f.number("op_overhead_s", 0, 1);
  if (j.contains("optimizer_op_overhead_s")) p.optimizer_op_overhead_s = f.number("optimizer_op_overhead_s", 0, 1);
  if (c.j.contains("measured")) {
    const JsonFields measured = c.fields("measured");
    for (const auto& [name, _] : measured.j.items()) {
      const JsonFields one = measured.fields(name.c_str());
      CollectiveFit& fit = p.fits[static_cast<int>(in_json_context(kKind, path, measured.in(name.c_str()), [&] {
        return collective_kind_from_string(name);
      }))];
      fit.measured = true;
      fit.base_latency_s = one.number("base_latency_s", 0, 1);
      fit.hop_latency_s = one.number("hop_latency_s", 0, 1);
      fit.busbw_Bps = one.number("busbw_Bps", 1, 1e15);
      if (!one.j.contains("at_ranks")) continue;
      const JsonFields at = one.fields("at_ranks");
      for (const auto& [n, _] : at.j.items()) {
        const JsonFields w = at.fields(n.c_str());
        int ranks = 0;
        try {
          size_t used = 0;
          ranks = std::stoi(n, &used);
          if (used != n.size()) ranks = 0;
        } catch (const std::exception&) {
        }
        if (ranks < 2) at.bad(at.in(n.c_str()), "is not a world size of at least 2");
        fit.at_ranks[ranks] = {w.number("latency_s", 0, 1), w.number("busbw_Bps", 1, 1e15)};
      }
    }
  }
  for (size_t i = 0; i < f.array("sources").size(); ++i) {
    const nlohmann::json& s = f.array("sources")[i];
    if (!s.is_string()) f.bad(f.in("sources") + "[" + std::to_string(i) + "]", "is not a string");
    p.sources.push_back(s.get<std::string>());
  }
  if (p.sources.empty()) f.bad(f.in("sources"), "is empty (a profile names where its numbers come from)");
  return p;
}

double HardwareProfile::matmul_rate(bool half, double n) const {
  const auto& curve = half ? matmul_curve_bf16 : matmul_curve_fp32;
  if (curve.empty()) return half ? matmul_bf16_flops : matmul_fp32_flops;
  if (n <= static_cast<double>(curve.front().first)) return curve.front().second;
  if (n >= static_cast<double>(curve.back().first)) return curve.back().second;
  size_t i = 1;
  while (static_cast<double>(curve[i].first) < n) ++i;
  const double x0 = std::log(static_cast<double>(curve[i - 1].first)), x1 = std::log(static_cast<double>(curve[i].first));
  const double y0 = std::log(curve[i - 1].second), y1 = std::log(curve[i].second);
  return std::exp(y0 + (y1 - y0) * (std::log(n) - x0) / (x1 - x0));
}

std::string hardware_profile_to_json(const HardwareProfile& p) {
  auto link_json = [](const LinkClass& l) {
    return nlohmann::ordered_json{{"hop_latency_s", l.hop_latency_s}, {"busbw_Bps", l.busbw_Bps}};
  };
  nlohmann::ordered_json measured = nlohmann::ordered_json::object();
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const CollectiveFit& f = p.fits[k];
    if (!f.measured) continue;
    measured[kKindNames[k]] = {{"base_latency_s", f.base_latency_s}, {"hop_latency_s", f.hop_latency_s}, {"busbw_Bps", f.busbw_Bps}};
    for (const auto& [n, w] : f.at_ranks)
      measured[kKindNames[k]]["at_ranks"][std::to_string(n)] = {{"latency_s", w.latency_s}, {"busbw_Bps", w.busbw_Bps}};
  }
  nlohmann::ordered_json matmul{{"bf16", p.matmul_bf16_flops}, {"fp32", p.matmul_fp32_flops}};
  for (const auto& [dtype, curve] : {std::pair{"bf16", &p.matmul_curve_bf16}, std::pair{"fp32", &p.matmul_curve_fp32}})
    for (const auto& [n, flops] : *curve) matmul["curve"][dtype].push_back({{"n", n}, {"flops", flops}});
  nlohmann::ordered_json collectives{{"base_latency_s", p.base_latency_s}, {"intra_node", link_json(p.intra)},
                                     {"inter_node", link_json(p.inter)}};
  if (!measured.empty()) collectives["measured"] = measured;
  nlohmann::ordered_json j{{"name", p.name},
                           {"description", p.description},
                           {"ranks_per_node", p.ranks_per_node},
                           {"device_memory_bytes", p.device_memory_bytes},
                           {"collectives", collectives},
                           {"matmul_flops", matmul},
                           {"compute_slots_per_node", p.compute_slots_per_node},
                           {"op_overhead_s", p.op_overhead_s},
                           {"optimizer_op_overhead_s", p.optimizer_op_overhead_s},
                           {"sources", p.sources}};
  return j.dump(2) + "\n";
}

std::vector<std::string> hardware_profile_names(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) names.push_back(n.substr(0, n.size() - 5));
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

HardwareProfile load_hardware_profile(const std::string& name_or_path, const std::string& dir) {
  struct stat st {};
  std::string path = name_or_path;
  if (::stat(path.c_str(), &st) != 0) path = dir + "/" + name_or_path + ".json";
  if (::stat(path.c_str(), &st) != 0) {
    std::string known;
    for (const std::string& n : hardware_profile_names(dir)) known += (known.empty() ? "" : ", ") + n;
    TORCH_CHECK(false, "hardware profile '", name_or_path, "': no such file and no profile of that name in ", dir,
                " (known: ", known.empty() ? "none" : known, ")");
  }
  return hardware_profile_from_json(read_file(path, kKind, kMaxProfileBytes), path);
}

}  // namespace mfsdp
