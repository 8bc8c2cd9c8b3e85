// The `mfsdp dashboard` page (dashboard.h), written as text: SVG line and bar charts with their
// axes and legends, tables, and the raw results in a JSON script block.
#include "bench/dashboard/dashboard.h"

#include "core/util/units.h"
#include "core/util/files.h"
#include "core/util/json_limits.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace mfsdp {
namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

std::string bytes_text(double b) { return human_bytes(b, 1); }

// A series' colour. A projection's HSDP series ("owner HSDP S=8 dedup") take their placement's hue,
// darker for dedup and lighter for replicated, so that every series of a chart has its own; a name
// not listed takes one of a few spare colours by a hash of its name (never one grey for all).
const char* color_of(const std::string& series) {
  static const std::map<std::string, const char*> colors{
      {"owner", "#1b9e77"}, {"reconstruct", "#d95f02"}, {"alltoall", "#7570b3"}, {"zero1", "#e7298a"},
      {"ddp", "#66a61e"},   {"unshard", "#4477aa"},     {"grad_reduce", "#ee6677"}, {"optimizer_step", "#ccbb44"},
      {"round_robin", "#4477aa"}, {"greedy_bytes", "#ee6677"}, {"greedy_cost", "#228833"}, {"balanced", "#ccbb44"},
      {"owner HSDP dedup", "#0b5e47"}, {"owner HSDP replicated", "#6fd3b3"}, {"alltoall HSDP replicated", "#b1acdf"},
      {"alltoall HSDP dedup", "#403b85"}, {"reconstruct HSDP replicated", "#f6ab6c"}, {"reconstruct HSDP dedup", "#8a3b00"},
      {"zero1 HSDP replicated", "#f39bc8"}, {"zero1 HSDP dedup", "#9b1159"}};
  std::string key = series;
  if (const size_t h = key.find(" HSDP S="); h != std::string::npos) {  // the shard size does not change the hue
    const size_t mode = key.find(' ', h + 8);
    key = key.substr(0, h) + " HSDP" + (mode == std::string::npos ? "" : key.substr(mode));
  }
  if (auto it = colors.find(key); it != colors.end()) return it->second;
  static const char* const spare[] = {"#a6761d", "#666666", "#1f78b4", "#b15928", "#6a3d9a", "#33a02c"};
  return spare[std::hash<std::string>{}(series) % (sizeof(spare) / sizeof(spare[0]))];
}

// HSDP series are drawn dashed, beside their placement's flat line.
bool dashed(const std::string& series) { return series.find(" HSDP ") != std::string::npos; }

// `v == s` for a JSON value, without the temporary JSON string that `==` builds (GCC 12 reports a
// false -Warray-bounds on it where it is inlined into the renderers).
bool is(const nlohmann::json& v, const std::string& s) { return v.is_string() && v.get_ref<const std::string&>() == s; }

// A "nice" upper bound for an axis.
double nice_max(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

struct Series {
  std::string name;
  std::vector<double> values;  // one per category; NaN = missing
};

// kRight holds the legend: a 12 px swatch and up to kLegendChars characters of 11 px text.
constexpr int kLegendChars = 32;
constexpr int kWidth = 680, kHeight = 300, kLeft = 70, kRight = 36 + kLegendChars * 6, kTop = 36, kBottom = 44;

std::string svg_open(const std::string& id, const std::string& title) {
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight << "\" id=\"" << esc(id)
    << "\" data-chart=\"" << esc(id) << "\" role=\"img\" aria-label=\"" << esc(title) << "\">"
    << "<text x=\"" << kWidth / 2 << "\" y=\"20\" text-anchor=\"middle\" class=\"title\">" << esc(title) << "</text>";
  return o.str();
}

// A y axis: linear from 0 to ymax, or logarithmic over whole decades [ymin, ymax].
struct YAxis {
  bool log = false;
  double ymin = 0, ymax = 1;
  double frac(double v) const {  // 0 at the bottom, 1 at the top
    return log ? (std::log10(v) - std::log10(ymin)) / (std::log10(ymax) - std::log10(ymin)) : v / ymax;
  }
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (!log) {
      for (int k = 0; k <= 4; ++k) t.push_back(ymax * k / 4);
    } else {
      for (double d = ymin; d <= ymax * 1.0001; d *= 10) {
        t.push_back(d);
        if (d * 10 <= ymax * 1.0001) t.push_back(d * 3);
      }
    }
    return t;
  }
};

YAxis make_axis(const std::vector<Series>& series, bool log) {
  double lo = INFINITY, hi = 0;
  for (const Series& s : series)
    for (double v : s.values)
      if (std::isfinite(v) && v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
  YAxis a;
  a.log = log && hi > 0;
  if (a.log) {
    a.ymin = std::pow(10, std::floor(std::log10(lo)));
    a.ymax = std::pow(10, std::ceil(std::log10(hi)));
    if (a.ymax <= a.ymin) a.ymax = a.ymin * 10;
  } else {
    a.ymax = nice_max(hi);
  }
  return a;
}

std::string axes(const std::vector<std::string>& categories, const YAxis& axis, const std::string& ylabel,
                 const std::function<std::string(double)>& fmt, const std::string& xlabel) {
  std::ostringstream o;
  const int pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  for (double v : axis.ticks()) {
    const double y = kTop + ph - ph * axis.frac(v);
    o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << y << "\" y2=\"" << y << "\" class=\"grid\"/>"
      << "<text x=\"" << kLeft - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\" class=\"tick\">" << esc(fmt(v)) << "</text>";
  }
  const double step = static_cast<double>(pw) / static_cast<double>(categories.size());
  for (size_t i = 0; i < categories.size(); ++i)
    o << "<text x=\"" << kLeft + step * (i + 0.5) << "\" y=\"" << kTop + ph + 16 << "\" text-anchor=\"middle\" class=\"tick\">"
      << esc(categories[i]) << "</text>";
  o << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kHeight - 6 << "\" text-anchor=\"middle\" class=\"label\">" << esc(xlabel)
    << "</text><text x=\"14\" y=\"" << kTop + ph / 2 << "\" text-anchor=\"middle\" class=\"label\" transform=\"rotate(-90 14 "
    << kTop + ph / 2 << ")\">" << esc(ylabel) << "</text>";
  return o.str();
}

std::string legend(const std::vector<Series>& series) {
  std::ostringstream o;
  for (size_t i = 0; i < series.size(); ++i) {
    const int y = kTop + 8 + static_cast<int>(i) * 18;
    o << "<rect x=\"" << kWidth - kRight + 12 << "\" y=\"" << y - 9 << "\" width=\"12\" height=\"12\" fill=\""
      << color_of(series[i].name) << "\"/><text x=\"" << kWidth - kRight + 30 << "\" y=\"" << y + 1 << "\" class=\"tick\">"
      << esc(series[i].name) << "</text>";
  }
  return o.str();
}

std::string line_chart(const std::string& id, const std::string& title, const std::vector<std::string>& categories,
                       const std::vector<Series>& series, const std::string& ylabel, const std::string& xlabel,
                       const std::function<std::string(double)>& fmt) {
  const YAxis axis = make_axis(series, /*log=*/true);
  const int pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  const double step = static_cast<double>(pw) / static_cast<double>(categories.size());
  std::ostringstream o;
  o << svg_open(id, title) << axes(categories, axis, ylabel + " (log scale)", fmt, xlabel);
  for (const Series& s : series) {
    o << "<g class=\"series\" data-chart=\"" << esc(id) << "\" data-series=\"" << esc(s.name) << "\"><polyline fill=\"none\" stroke=\""
      << color_of(s.name) << "\" stroke-width=\"2\"" << (dashed(s.name) ? " stroke-dasharray=\"6 3\"" : "") << " points=\"";
    for (size_t i = 0; i < s.values.size(); ++i)
      if (std::isfinite(s.values[i]) && s.values[i] > 0) o << kLeft + step * (i + 0.5) << "," << kTop + ph - ph * axis.frac(s.values[i]) << " ";
    o << "\"/>";
    for (size_t i = 0; i < s.values.size(); ++i) {
      if (!std::isfinite(s.values[i]) || s.values[i] <= 0) continue;
      o << "<circle cx=\"" << kLeft + step * (i + 0.5) << "\" cy=\"" << kTop + ph - ph * axis.frac(s.values[i]) << "\" r=\"4\" fill=\""
        << color_of(s.name) << "\" data-value=\"" << s.values[i] << "\"><title>" << esc(s.name + ", " + categories[i] + ": " + fmt(s.values[i]))
        << "</title></circle>";
    }
    o << "</g>";
  }
  o << legend(series) << "</svg>";
  return o.str();
}

std::string bar_chart(const std::string& id, const std::string& title, const std::vector<std::string>& categories,
                      const std::vector<Series>& series, const std::string& ylabel, const std::string& xlabel,
                      const std::function<std::string(double)>& fmt) {
  const YAxis axis = make_axis(series, /*log=*/false);
  const double ymax = axis.ymax;
  const int pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  const double step = static_cast<double>(pw) / static_cast<double>(categories.size());
  const double bw = step * 0.8 / static_cast<double>(std::max<size_t>(1, series.size()));
  std::ostringstream o;
  o << svg_open(id, title) << axes(categories, axis, ylabel, fmt, xlabel);
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    o << "<g class=\"series\" data-chart=\"" << esc(id) << "\" data-series=\"" << esc(s.name) << "\">";
    for (size_t i = 0; i < s.values.size(); ++i) {
      if (!std::isfinite(s.values[i])) continue;
      const double h = ph * s.values[i] / ymax;
      o << "<rect x=\"" << kLeft + step * i + step * 0.1 + bw * k << "\" y=\"" << kTop + ph - h << "\" width=\"" << bw
        << "\" height=\"" << h << "\" fill=\"" << color_of(s.name) << "\" data-value=\"" << s.values[i] << "\"><title>"
        << esc(s.name + ", " + categories[i] + ": " + fmt(s.values[i])) << "</title></rect>";
    }
    o << "</g>";
  }
  o << legend(series) << "</svg>";
  return o.str();
}

std::string table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                  const std::string& id) {
  std::ostringstream o;
  o << "<table id=\"" << esc(id) << "\"><thead><tr>";
  for (const std::string& h : header) o << "<th>" << esc(h) << "</th>";
  o << "</tr></thead><tbody>";
  for (const auto& r : rows) {
    o << "<tr>";
    for (const std::string& c : r) o << "<td>" << esc(c) << "</td>";
    o << "</tr>";
  }
  o << "</tbody></table>";
  return o.str();
}

// A simulate run's series: its placement, and on an HSDP mesh the shard group's size and the step
// mode ("owner HSDP S=8 dedup").
std::string sweep_series(const nlohmann::json& r) {
  const std::string p = r["placement"];
  const int R = r.value("replicas", 1);
  if (R <= 1) return p;
  return p + " HSDP S=" + std::to_string(r["world_size"].get<int>() / R) + (r.contains("step_mode") ? " " + r["step_mode"].get<std::string>() : "");
}

// Projections (`mfsdp simulate` sweeps, bench/simulate_sweeps.py): per model, the optimizer stage
// and the whole step of each placement against W, memory per rank, every run, and the assumptions.
void render_sweep(std::ostringstream& o, const nlohmann::json& R, size_t f, const std::string& name) {
  std::string profile = R["runs"][0].value("profile", std::string("?"));
  o << "<h2>" << esc(name) << " — projected by mfsdp simulate on " << esc(profile) << "</h2>"
    << "<p class=\"note\">Predicted, not measured: each placement's own step traced on meta tensors and priced on the "
    << "hardware profile (docs/simulate.md). Flags: " << esc(R.value("flags", nlohmann::json::array()).dump()) << "</p>";
  std::vector<std::string> models, placements;
  std::set<int> ws;
  for (const auto& r : R["runs"]) {
    const std::string m = r["model"], p = sweep_series(r);
    if (std::find(models.begin(), models.end(), m) == models.end()) models.push_back(m);
    if (std::find(placements.begin(), placements.end(), p) == placements.end()) placements.push_back(p);
    ws.insert(r["world_size"].get<int>());
  }
  std::vector<std::string> wcats;
  for (int W : ws) wcats.push_back("W=" + std::to_string(W));
  auto value = [&](const std::string& m, const std::string& p, int W, const std::function<double(const nlohmann::json&)>& get) {
    for (const auto& r : R["runs"])
      if (is(r["model"], m) && sweep_series(r) == p && r["world_size"] == W) return get(r);
    return std::nan("");
  };
  for (const std::string& m : models) {
    const std::string tag = std::to_string(f) + "-" + m;
    o << "<h3>Model " << esc(m) << "</h3><div class=\"charts\">";
    std::vector<Series> opt, step, mem;
    for (const std::string& p : placements) {
      Series a{p, {}}, b{p, {}}, c{p, {}};
      for (int W : ws) {
        a.values.push_back(value(m, p, W, [](const nlohmann::json& r) { return r["stages"]["optimizer"]["seconds"].get<double>() * 1e3; }));
        b.values.push_back(value(m, p, W, [](const nlohmann::json& r) { return r["step_s"].get<double>() * 1e3; }));
        c.values.push_back(value(m, p, W, [](const nlohmann::json& r) { return r["memory"]["peak_bytes"].get<double>(); }));
      }
      opt.push_back(a), step.push_back(b), mem.push_back(c);
    }
    auto ms = [](double v) { return (v >= 100 ? num(v, 6) : num(v)) + " ms"; };
    o << line_chart("proj-opt-" + tag, "Projected optimizer step vs W (" + m + ")", wcats, opt, "ms per step", "world size", ms);
    o << line_chart("proj-step-" + tag, "Projected whole step vs W (" + m + ")", wcats, step, "ms per step", "world size", ms);
    o << bar_chart("proj-memory-" + tag, "Projected peak bytes per rank (" + m + ")", wcats, mem, "bytes", "world size", bytes_text);
    o << "</div>";
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : R["runs"]) {
    const auto& st = r["stages"];
    rows.push_back({r["model"].get<std::string>() + " / " + sweep_series(r), std::to_string(r["world_size"].get<int>()),
                    num(st["forward"]["seconds"].get<double>() * 1e3), num(st["backward"]["seconds"].get<double>() * 1e3),
                    num(st["optimizer"]["seconds"].get<double>() * 1e3), num(st["optimizer"]["comm_s"].get<double>() * 1e3),
                    num(r["step_s"].get<double>() * 1e3), bytes_text(r["memory"]["peak_bytes"].get<double>()),
                    r["memory"]["fits"].get<bool>() ? "yes" : "NO"});
  }
  o << "<h3>Every run</h3>"
    << table({"model / placement", "W", "fwd ms", "bwd ms", "opt ms", "opt comm ms", "step ms", "peak / rank", "fits"}, rows,
             "proj-runs-" + std::to_string(f));
  o << "<h3>Assumptions</h3><ul class=\"note\">";
  std::vector<std::string> seen;
  for (const auto& r : R["runs"])
    for (const auto& a : r["assumptions"]) {
      const std::string s = a.get<std::string>();
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      o << "<li>" << esc(s) << "</li>";
    }
  o << "</ul>";
}

// Measurements (bench_step --json): the environment; per model, optimizer-step latency and memory
// against W per placement, bytes per phase at the largest W and planner imbalance; the ratios and
// every case.
void render_bench(std::ostringstream& o, const nlohmann::json& R, size_t f, const std::string& name) {
  const std::vector<std::string> placements{"owner", "reconstruct", "alltoall", "zero1", "ddp"};
  const nlohmann::json& env = R["environment"];
  o << "<h2>" << esc(name) << " — " << esc(env.value("device", std::string("?"))) << ", "
    << esc(env.value("cpu", std::string("?"))) << "</h2>";
  std::vector<std::vector<std::string>> env_rows;
  for (auto it = env.begin(); it != env.end(); ++it)
    env_rows.push_back({it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump()});
  o << "<h3>Environment</h3>" << table({"key", "value"}, env_rows, "environment-" + std::to_string(f));

  std::set<std::string> models;
  std::set<int> ws;
  for (const auto& c : R["cases"]) models.insert(c["model"].get<std::string>()), ws.insert(c["world_size"].get<int>());
  std::vector<std::string> wcats;
  for (int W : ws) wcats.push_back("W=" + std::to_string(W));
  auto value = [&](const std::string& m, const std::string& p, int W, const std::function<double(const nlohmann::json&)>& get) {
    for (const auto& c : R["cases"])
      if (is(c["model"], m) && is(c["placement"], p) && c["world_size"] == W) return get(c);
    return std::nan("");
  };
  for (const std::string& m : models) {
    const std::string tag = std::to_string(f) + "-" + m;
    o << "<h3>Model " << esc(m) << "</h3><div class=\"charts\">";
    std::vector<Series> lat, mem;
    for (const std::string& p : placements) {
      Series s{p, {}}, r{p, {}};
      for (int W : ws) {
        s.values.push_back(value(m, p, W, [](const nlohmann::json& c) { return c["optimizer_step_ms"].get<double>(); }));
        r.values.push_back(value(m, p, W, [](const nlohmann::json& c) { return c["resident_bytes_max"].get<double>(); }));
      }
      if (std::any_of(s.values.begin(), s.values.end(), [](double v) { return std::isfinite(v); })) lat.push_back(s), mem.push_back(r);
    }
    auto ms = [](double v) { return (v >= 100 ? num(v, 6) : num(v)) + " ms"; };
    o << line_chart("opt-latency-" + tag, "Optimizer-step latency vs W (" + m + ")", wcats, lat, "ms per step", "world size", ms);
    o << bar_chart("memory-" + tag, "Peak resident bytes per rank (" + m + ")", wcats, mem, "bytes", "world size", bytes_text);
    // Bytes per phase at the largest W, per placement.
    const int Wmax = *ws.rbegin();
    std::vector<Series> phases;
    for (const char* ph : {"unshard", "grad_reduce", "optimizer_step"}) {
      Series s{ph, {}};
      for (const std::string& p : placements)
        s.values.push_back(value(m, p, Wmax, [&](const nlohmann::json& c) {
          const auto& x = c["phases"][ph];
          return x["bytes_sent"].get<double>() + x["bytes_recv"].get<double>();
        }));
      phases.push_back(s);
    }
    o << bar_chart("bytes-" + tag, "Bytes sent + received per rank per step, W=" + std::to_string(Wmax) + " (" + m + ")",
                   placements, phases, "bytes", "placement", bytes_text);
    std::vector<Series> imbalance;
    std::vector<std::string> icats;
    for (int W : ws) icats.push_back("W=" + std::to_string(W));
    for (const char* pl : {"round_robin", "greedy_bytes", "greedy_cost", "balanced"}) {
      Series s{pl, {}};
      for (int W : ws) {
        double v = std::nan("");
        for (const auto& x : R["planner"])
          if (is(x["model"], m) && x["world_size"] == W && is(x["planner"], pl)) v = x["cost_imbalance"].get<double>();
        s.values.push_back(v);
      }
      imbalance.push_back(s);
    }
    o << bar_chart("imbalance-" + tag, "Planner imbalance, optimizer cost max/mean (" + m + ")", icats, imbalance,
                   "max / mean", "world size", [](double v) { return num(v); });
    o << "</div>";
  }
  std::vector<std::vector<std::string>> ratio_rows;
  for (const auto& r : R["ratios"]) {
    auto get = [&](const char* k) { return r.contains(k) ? num(r[k].get<double>(), 3) + "x" : std::string("-"); };
    ratio_rows.push_back({r["model"].get<std::string>(), std::to_string(r["world_size"].get<int>()),
                          get("reconstruct_over_owner_step"), get("alltoall_over_owner_step"), get("owner_over_even_fwd_bwd")});
  }
  o << "<h3>Ratios (from the same run)</h3>"
    << table({"model", "W", "reconstruct / owner optimizer step", "alltoall / owner optimizer step",
              "owner / even-layout forward+backward"},
             ratio_rows, "ratios-" + std::to_string(f));
  std::vector<std::vector<std::string>> case_rows;
  for (const auto& c : R["cases"]) {
    const auto& ph = c["phases"];
    case_rows.push_back({c["model"].get<std::string>() + " / " + c["placement"].get<std::string>(),
                         std::to_string(c["world_size"].get<int>()), num(c["optimizer_step_ms"].get<double>()),
                         num(c["forward_ms"].get<double>()), num(c["backward_ms"].get<double>()), num(c["step_ms"].get<double>()),
                         bytes_text(ph["unshard"]["bytes_recv"].get<double>()), bytes_text(ph["grad_reduce"]["bytes_sent"].get<double>()),
                         std::to_string(ph["optimizer_step"]["calls"].get<int64_t>()) + " / " +
                             bytes_text(ph["optimizer_step"]["bytes_sent"].get<double>()),
                         bytes_text(c["resident_bytes_max"].get<double>()), num(c["optimizer_gflop_rank_max"].get<double>()),
                         c["oracle_bitwise"].get<bool>() ? "yes" : "NO"});
  }
  o << "<h3>Every case</h3>"
    << table({"model / placement", "W", "opt ms", "fwd ms", "bwd ms", "step ms", "unshard recv", "reduce sent",
              "step calls / sent", "resident max", "opt GFLOP/rank", "= oracle"},
             case_rows, "cases-" + std::to_string(f));
}

// Stock PyTorch peers (peers/side_by_side.py, format mfsdp-peers): per model size, the slowest
// rank's optimizer step and whole step per runner at each W (medians), peak memory above an empty
// process, and every number with its spread.
void render_peers(std::ostringstream& o, const nlohmann::json& R, size_t f, const std::string& name) {
  o << "<h2>" << esc(name) << " — the owner runtime against stock PyTorch on this machine</h2>"
    << "<p class=\"note\">owner: mfsdp train (C++, processes over gloo); ddp: DistributedDataParallel + torch.optim.Muon; "
    << "fsdp2: fully_shard + torch.optim.Muon on DTensors; fsdp2_reconstruct: FSDP2 + full_tensor() + Newton-Schulz on every rank. "
    << "Same model, init, data and hyperparameters, one intra-op thread per rank; the slowest rank's times, medians over "
    << R["rounds"].get<int>() << " interleaved rounds of " << R["steps"].get<int>() << " steps (" << R["warmup_steps"].get<int>()
    << " left out each). Python against C++: the peers pay Python and torch's dispatch per op; W beyond the machine's "
    << R["machine"]["cpus"].get<int>() << " cores is oversubscribed.</p>";
  std::vector<std::string> sizes, runners;
  std::vector<int> ws;
  for (const auto& x : R["results"]) {
    const std::string size = x["size"].get<std::string>(), runner = x["runner"].get<std::string>();
    if (std::find(sizes.begin(), sizes.end(), size) == sizes.end()) sizes.push_back(size);
    if (std::find(runners.begin(), runners.end(), runner) == runners.end()) runners.push_back(runner);
    if (std::find(ws.begin(), ws.end(), x["world_size"].get<int>()) == ws.end()) ws.push_back(x["world_size"].get<int>());
  }
  auto value = [&](const std::string& size, int W, const std::string& runner, const std::function<double(const nlohmann::json&)>& get) {
    for (const auto& x : R["results"])
      if (is(x["size"], size) && x["world_size"] == W && is(x["runner"], runner)) return get(x);
    return std::nan("");
  };
  std::vector<std::string> cats;
  for (int W : ws) cats.push_back("W=" + std::to_string(W));
  for (const std::string& size : sizes) {
    const std::string tag = std::to_string(f) + "-" + size;
    o << "<h3>" << esc(size) << "</h3><div class=\"charts\">";
    for (const auto& [key, title] : std::vector<std::pair<std::string, std::string>>{
             {"optimizer_ms", "Optimizer step, ms (slowest rank, median)"}, {"step_ms", "Whole step, ms (slowest rank, median)"}}) {
      std::vector<Series> series;
      for (const std::string& r : runners) {
        Series s{r, {}};
        for (int W : ws) s.values.push_back(value(size, W, r, [&](const nlohmann::json& x) { return x[key]["median"].get<double>(); }));
        series.push_back(s);
      }
      o << bar_chart("peers-" + key + "-" + tag, title + " (" + size + ")", cats, series, "ms", "world size",
                     [](double v) { return num(v); });
    }
    std::vector<Series> memory;
    for (const std::string& r : runners) {
      Series s{r, {}};
      for (int W : ws)
        s.values.push_back(value(size, W, r, [](const nlohmann::json& x) { return x["peak_rss_above_empty_mib"].get<double>(); }));
      memory.push_back(s);
    }
    o << bar_chart("peers-memory-" + tag, "Peak RSS above an empty process, MiB (" + size + ")", cats, memory, "MiB", "world size",
                   [](double v) { return num(v); })
      << "</div>";
  }
  auto cell = [](const nlohmann::json& m) {
    return num(m["median"].get<double>()) + " [" + num(m["p25"].get<double>()) + "-" + num(m["p75"].get<double>()) + "]";
  };
  std::vector<std::vector<std::string>> rows;
  for (const auto& x : R["results"])
    rows.push_back({x["size"].get<std::string>() + " / " + x["runner"].get<std::string>(), std::to_string(x["world_size"].get<int>()),
                    cell(x["optimizer_ms"]), cell(x["forward_backward_ms"]), cell(x["step_ms"]), num(x["peak_rss_above_empty_mib"].get<double>())});
  o << "<h3>Every run (median [25th-75th percentile], ms)</h3>"
    << table({"size / runner", "W", "optimizer step", "forward + backward", "whole step", "peak MiB above empty"}, rows,
             "peers-" + std::to_string(f));
  std::vector<std::vector<std::string>> ratio_rows;
  for (const auto& q : R["ratios"])
    ratio_rows.push_back({q["size"].get<std::string>() + " / " + q["peer"].get<std::string>(), std::to_string(q["world_size"].get<int>()),
                          num(q["optimizer_speedup"].get<double>()) + "x", num(q["step_speedup"].get<double>()) + "x",
                          num(q["peak_memory_ratio"].get<double>()) + "x"});
  o << "<h3>Owner against each peer (peer / owner)</h3>"
    << table({"size / peer", "W", "optimizer step", "whole step", "peak memory"}, ratio_rows, "peers-ratios-" + std::to_string(f));
}

}  // namespace

nlohmann::json load_dashboard_input(const std::string& path) {
  // A regular file of at most 64 MiB (a result file is kilobytes), depth-bounded JSON.
  const std::string text = read_file(path, "dashboard", int64_t{64} << 20);
  nlohmann::json j;
  try {
    j = parse_json(text, "dashboard: '" + path + "'");
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "dashboard: '", path, "' is not JSON: ", e.what());
  }
  const std::string format = j.is_object() ? j.value("format", std::string()) : std::string();
  if (format == "mfsdp-sim-sweep") {
    TORCH_CHECK(j.contains("runs") && j["runs"].is_array() && !j["runs"].empty(), "dashboard: '", path, "' lacks \"runs\"");
    for (const auto& r : j["runs"])
      for (const char* key : {"model", "placement", "world_size", "stages", "step_s", "memory", "assumptions"})
        TORCH_CHECK(r.contains(key), "dashboard: '", path, "': a run lacks \"", key, "\"");
    return j;
  }
  if (format == "mfsdp-peers") {
    for (const char* key : {"results", "ratios", "rounds", "steps", "warmup_steps", "machine"})
      TORCH_CHECK(j.contains(key), "dashboard: '", path, "' lacks \"", key, "\"");
    TORCH_CHECK(j["results"].is_array() && !j["results"].empty(), "dashboard: '", path, "' has no results");
    for (const auto& r : j["results"])
      for (const char* key : {"size", "runner", "world_size", "optimizer_ms", "forward_backward_ms", "step_ms", "peak_rss_above_empty_mib"})
        TORCH_CHECK(r.contains(key), "dashboard: '", path, "': a result lacks \"", key, "\"");
    return j;
  }
  TORCH_CHECK(format == "mfsdp-bench", "dashboard: '", path,
              "' is not a bench_step result (format mfsdp-bench; write one with build/bench/bench_step --json FILE), "
              "simulate sweeps (format mfsdp-sim-sweep; bench/simulate_sweeps.py) nor stock-peer timings (format "
              "mfsdp-peers; peers/side_by_side.py)");
  for (const char* key : {"environment", "cases", "ratios", "planner"})
    TORCH_CHECK(j.contains(key), "dashboard: '", path, "' lacks \"", key, "\"");
  return j;
}

// What the page holds: measurements (bench_step, peers), projections (simulate sweeps), or both.
static std::string page_title(const std::vector<nlohmann::json>& results) {
  bool measured = false, projected = false;
  for (const auto& r : results) (r["format"] == "mfsdp-sim-sweep" ? projected : measured) = true;
  if (projected && !measured) return "MatrixFSDP: projected step times, side by side";
  if (projected) return "MatrixFSDP: measured and projected step times, side by side";
  return "MatrixFSDP: measured step latency, side by side";
}

std::string render_dashboard(const std::vector<nlohmann::json>& results, const std::vector<std::string>& names) {
  bool measured = false, projected = false;
  for (const auto& r : results) (r["format"] == "mfsdp-sim-sweep" ? projected : measured) = true;
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta charset=\"utf-8\"/>"
    << "<title>" << esc(page_title(results)) << "</title><style>"
    << "body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}h1{font-size:22px}h2{font-size:18px;margin-top:32px}"
    << "h3{font-size:15px}.charts{display:flex;flex-wrap:wrap;gap:12px}svg{background:#fff;border:1px solid #ddd}"
    << ".title{font-size:13px;font-weight:bold}.tick{font-size:11px;fill:#444}.label{font-size:12px;fill:#222}"
    << ".grid{stroke:#e5e5e5}table{border-collapse:collapse;font-size:12px;margin:8px 0}"
    << "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}"
    << ".note{font-size:12px;color:#555}</style></head><body><h1>" << esc(page_title(results)) << "</h1>"
    << "<p class=\"note\">Owner-shaped ZeRO-3 against FSDP2 + Muon reconstruction (reconstruct), DistMuon all-to-all "
    << "(alltoall), ZeRO-1 owner (zero1) and DDP (ddp).";
  if (measured)
    o << " Measured step times are the slowest rank's, medians over the measured steps; every measured case was checked "
      << "bit for bit against the DDP oracle outside the timed steps.";
  if (projected)
    o << " Projected times are predictions of mfsdp simulate (each placement's own traced step priced on a hardware "
      << "profile), not measurements.";
  o << "</p>";
  for (size_t f = 0; f < results.size(); ++f) {
    if (results[f]["format"] == "mfsdp-sim-sweep")
      render_sweep(o, results[f], f, names[f]);
    else if (results[f]["format"] == "mfsdp-peers")
      render_peers(o, results[f], f, names[f]);
    else
      render_bench(o, results[f], f, names[f]);
  }
  nlohmann::json all = nlohmann::json::array();
  for (const auto& r : results) all.push_back(r);
  std::string data = all.dump();
  for (size_t at = data.find("</"); at != std::string::npos; at = data.find("</", at)) data.replace(at, 2, "<\\/");
  o << "<script type=\"application/json\" id=\"results\">" << data << "</script></body></html>\n";
  return o.str();
}

}  // namespace mfsdp
