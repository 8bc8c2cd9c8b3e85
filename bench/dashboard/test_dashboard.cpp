// The dashboard page read back: one HTML document, every chart and series with its points or bars,
// the results embedded with "</" escaped, text escaped, bad input refused naming the file and the
// field, and the committed pages exactly what the renderer makes of the committed results.
#include "bench/dashboard/dashboard.h"
#include "core/util/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mfsdp {
namespace {

using nlohmann::json;

// The text that HTML-escaping must turn into &lt;&amp;&quot;&gt;.
const std::string kSpecial = "<&\">";
const std::string kEscaped = "&lt;&amp;&quot;&gt;";

json bench_case(const std::string& placement, int world_size, double optimizer_step_ms) {
  auto phase = [](int calls, double bytes) { return json{{"calls", calls}, {"bytes_sent", bytes}, {"bytes_recv", bytes}}; };
  return {{"model", "tiny"},
          {"placement", placement},
          {"world_size", world_size},
          {"optimizer_step_ms", optimizer_step_ms},
          {"forward_ms", 10.0},
          {"backward_ms", 20.0},
          {"step_ms", optimizer_step_ms + 30},
          {"phases", {{"unshard", phase(16, 4096.0 * world_size)}, {"grad_reduce", phase(5, 2048.0)}, {"optimizer_step", phase(0, 0)}}},
          {"resident_bytes_max", 1 << 20},
          {"optimizer_gflop_rank_max", 0.07},
          {"oracle_bitwise", true}};
}

// A bench_step result (bench/bench_step.cpp --json): model tiny, placements owner and ddp at W = 2
// and 4, every planner at both; the CPU's name holds a closing script tag.
json bench_result() {
  json r{{"format", "mfsdp-bench"},
         {"version", 1},
         {"environment", {{"device", "cpu"}, {"cpu", "x</script>y"}, {"cpu_cores", 2}}},
         {"cases", json::array()},
         {"ratios", json::array()},
         {"planner", json::array()}};
  for (int W : {2, 4}) {
    r["cases"].push_back(bench_case("owner", W, 30.0 / W));
    r["cases"].push_back(bench_case("ddp", W, 90.0 / W));
    r["ratios"].push_back({{"model", "tiny"}, {"world_size", W}, {"owner_over_even_fwd_bwd", 1.01}});
    for (const char* p : {"round_robin", "greedy_bytes", "greedy_cost", "balanced"})
      r["planner"].push_back({{"model", "tiny"}, {"world_size", W}, {"planner", p}, {"cost_imbalance", 1.5}});
  }
  return r;
}

json sweep_run(const std::string& placement, int world_size, int replicas) {
  auto stage = [](double s) { return json{{"seconds", s}, {"comm_s", s / 2}}; };
  json r{{"model", "llama"},
         {"placement", placement},
         {"world_size", world_size},
         {"replicas", replicas},
         {"profile", "h100"},
         {"stages", {{"forward", stage(0.1)}, {"backward", stage(0.2)}, {"optimizer", stage(0.8 / world_size)}}},
         {"step_s", 0.3 + 0.8 / world_size},
         {"memory", {{"peak_bytes", 1e9}, {"fits", true}}},
         {"assumptions", json::array({"priced one after another", "ranks node-major"})}};
  if (replicas > 1) r["step_mode"] = "dedup";
  return r;
}

// `mfsdp simulate` sweeps (bench/simulate_sweeps.py): model llama, placements owner and one named
// with HTML's special characters at W = 8 and 16, and owner on an HSDP mesh at W = 8 only.
json sweep_result() {
  json r{{"format", "mfsdp-sim-sweep"}, {"flags", json::array({"--profile", "h100"})}, {"runs", json::array()}};
  for (int W : {8, 16}) {
    r["runs"].push_back(sweep_run("owner", W, 1));
    r["runs"].push_back(sweep_run("p" + kSpecial, W, 1));
  }
  r["runs"].push_back(sweep_run("owner", 8, 2));
  return r;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The <svg ...>...</svg> whose data-chart is `id`; empty when there is none.
std::string chart(const std::string& page, const std::string& id) {
  const size_t at = page.find("data-chart=\"" + id + "\" role=\"img\"");
  if (at == std::string::npos) return "";
  const size_t open = page.rfind("<svg ", at);
  return page.substr(open, page.find("</svg>", at) + 6 - open);
}

// The <table> whose id is `id`.
std::string table(const std::string& page, const std::string& id) {
  const size_t open = page.find("<table id=\"" + id + "\">");
  return open == std::string::npos ? "" : page.substr(open, page.find("</table>", open) + 8 - open);
}

// Series name (as written in its data-series attribute) -> its data points (circles or bars).
std::map<std::string, int> series_points(const std::string& svg, const std::string& id) {
  std::map<std::string, int> points;
  const std::string head = "<g class=\"series\" data-chart=\"" + id + "\" data-series=\"";
  for (size_t at = svg.find(head); at != std::string::npos; at = svg.find(head, at + 1)) {
    const size_t name = at + head.size();
    const size_t end = svg.find("</g>", name);
    points[svg.substr(name, svg.find('"', name) - name)] = count(svg.substr(name, end - name), "data-value=\"");
  }
  return points;
}

class Dashboard : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mfsdp_dashboard_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // Through files and load_dashboard_input, as `mfsdp dashboard` reads them.
    write_file_atomic(dir_ + "/bench.json", bench_result().dump());
    write_file_atomic(dir_ + "/sweep.json", sweep_result().dump());
    results_ = {load_dashboard_input(dir_ + "/bench.json"), load_dashboard_input(dir_ + "/sweep.json")};
    page_ = render_dashboard(results_, {"bench" + kSpecial + ".json", "sweep.json"});
  }
  void TearDown() override { remove_flat_dir(dir_); }

  std::string dir_;
  std::vector<json> results_;
  std::string page_;
};

TEST_F(Dashboard, IsOneHtmlDocumentWithEveryChartAndTable) {
  EXPECT_EQ(page_.rfind("<!DOCTYPE html>\n<html ", 0), 0u);
  EXPECT_EQ(page_.substr(page_.size() - 15), "</body></html>\n");
  for (const char* tag : {"<html ", "</html>", "<head>", "<body>", "</body>"}) EXPECT_EQ(count(page_, tag), 1) << tag;
  const std::vector<std::string> charts{"opt-latency-0-tiny", "memory-0-tiny",     "bytes-0-tiny",       "imbalance-0-tiny",
                                        "proj-opt-1-llama",   "proj-step-1-llama", "proj-memory-1-llama"};
  EXPECT_EQ(count(page_, "<svg "), static_cast<int>(charts.size()));
  for (const std::string& id : charts) EXPECT_EQ(chart(page_, id).rfind("<svg ", 0), 0u) << id;
  for (const char* id : {"environment-0", "ratios-0", "cases-0", "proj-runs-1"})
    EXPECT_EQ(count(page_, std::string("<table id=\"") + id + "\">"), 1) << id;
  // A header row and one row per case, per run.
  EXPECT_EQ(count(table(page_, "cases-0"), "<tr>"), 5);
  EXPECT_EQ(count(table(page_, "proj-runs-1"), "<tr>"), 6);
}

TEST_F(Dashboard, EverySeriesHasOnePointOrBarPerCase) {
  using Points = std::map<std::string, int>;
  const Points placements{{"owner", 2}, {"ddp", 2}};  // W = 2 and 4 each
  EXPECT_EQ(series_points(chart(page_, "opt-latency-0-tiny"), "opt-latency-0-tiny"), placements);
  EXPECT_EQ(series_points(chart(page_, "memory-0-tiny"), "memory-0-tiny"), placements);
  // Per phase, a bar for each placement measured at the largest W.
  EXPECT_EQ(series_points(chart(page_, "bytes-0-tiny"), "bytes-0-tiny"),
            (Points{{"unshard", 2}, {"grad_reduce", 2}, {"optimizer_step", 2}}));
  EXPECT_EQ(series_points(chart(page_, "imbalance-0-tiny"), "imbalance-0-tiny"),
            (Points{{"round_robin", 2}, {"greedy_bytes", 2}, {"greedy_cost", 2}, {"balanced", 2}}));
  // The HSDP run is a series of its own: placement, shard group size, step mode.
  const Points projected{{"owner", 2}, {"p" + kEscaped, 2}, {"owner HSDP S=4 dedup", 1}};
  for (const char* id : {"proj-opt-1-llama", "proj-step-1-llama", "proj-memory-1-llama"})
    EXPECT_EQ(series_points(chart(page_, id), id), projected) << id;
}

TEST_F(Dashboard, EmbedsTheResultsWithClosingTagsEscaped) {
  const std::string open = "<script type=\"application/json\" id=\"results\">";
  ASSERT_EQ(count(page_, open), 1);
  const size_t start = page_.find(open) + open.size();
  const std::string data = page_.substr(start, page_.find("</script>", start) - start);
  EXPECT_EQ(data.find("</"), std::string::npos);
  EXPECT_NE(data.find("x<\\/script>y"), std::string::npos);
  EXPECT_EQ(json::parse(data), json(results_));  // "\/" is JSON for "/"
  EXPECT_EQ(count(page_, "</script>"), 1);
}

TEST_F(Dashboard, EscapesTextAndAttributes) {
  EXPECT_NE(page_.find("<h2>bench" + kEscaped + ".json — cpu, x&lt;/script&gt;y</h2>"), std::string::npos);
  EXPECT_NE(page_.find("data-series=\"p" + kEscaped + "\""), std::string::npos);
  EXPECT_NE(page_.find("<td>llama / p" + kEscaped + "</td>"), std::string::npos);
  // Unescaped, the special characters appear only inside the JSON block, where '"' is \".
  EXPECT_EQ(page_.find("<&\""), std::string::npos);
}

TEST_F(Dashboard, RefusesAMissingFieldNamingTheFileAndTheField) {
  auto refusal = [&](const json& input) -> std::string {
    const std::string path = dir_ + "/bad.json";
    write_file_atomic(path, input.dump());
    try {
      load_dashboard_input(path);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "accepted";
  };
  json bench = bench_result();
  bench.erase("planner");
  const std::string bench_error = refusal(bench);
  EXPECT_NE(bench_error.find("'" + dir_ + "/bad.json' lacks \"planner\""), std::string::npos) << bench_error;
  json sweep = sweep_result();
  sweep["runs"][1].erase("step_s");
  const std::string sweep_error = refusal(sweep);
  EXPECT_NE(sweep_error.find("'" + dir_ + "/bad.json': a run lacks \"step_s\""), std::string::npos) << sweep_error;
  const std::string format_error = refusal(json{{"format", "other"}});
  EXPECT_NE(format_error.find("'" + dir_ + "/bad.json' is not a bench_step result"), std::string::npos) << format_error;
}

// Stock-peer timings (peers/side_by_side.py): two sizes, W = 2 and 4, four runners.
json peers_result() {
  json r{{"format", "mfsdp-peers"}, {"rounds", 3}, {"steps", 10}, {"warmup_steps", 2}, {"machine", {{"cpus", 2}}},
         {"results", json::array()}, {"ratios", json::array()}};
  auto stat = [](double m) { return json{{"median", m}, {"p25", 0.9 * m}, {"p75", 1.1 * m}, {"n", 24}}; };
  for (const char* size : {"tiny", "h512"})
    for (int W : {2, 4})
      for (const char* runner : {"owner", "ddp", "fsdp2", "fsdp2_reconstruct"}) {
        r["results"].push_back({{"size", size}, {"runner", runner}, {"world_size", W}, {"optimizer_ms", stat(W)},
                                {"forward_backward_ms", stat(2 * W)}, {"step_ms", stat(3 * W)}, {"peak_rss_above_empty_mib", 20.0}});
        if (std::string(runner) != "owner")
          r["ratios"].push_back({{"size", size}, {"peer", runner}, {"world_size", W}, {"optimizer_speedup", 2.0},
                                 {"step_speedup", 1.5}, {"peak_memory_ratio", 1.2}});
      }
  return r;
}

TEST(DashboardPeers, EverySizeHasTheThreeChartsWithEveryRunnerAndTheTables) {
  const std::string page = render_dashboard({peers_result()}, {"peers.json"});
  for (const char* size : {"tiny", "h512"})
    for (const std::string chart_id : {"peers-optimizer_ms-0-", "peers-step_ms-0-", "peers-memory-0-"}) {
      const std::string id = chart_id + size;
      const std::string svg = chart(page, id);
      ASSERT_FALSE(svg.empty()) << id;
      const std::map<std::string, int> points = series_points(svg, id);
      EXPECT_EQ(points, (std::map<std::string, int>{{"ddp", 2}, {"fsdp2", 2}, {"fsdp2_reconstruct", 2}, {"owner", 2}})) << id;
    }
  EXPECT_EQ(count(table(page, "peers-0"), "<tr>"), 1 + 16);
  EXPECT_EQ(count(table(page, "peers-ratios-0"), "<tr>"), 1 + 12);
  char tmpl[] = "/tmp/mfsdp_dashboard_peers_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  json bad = peers_result();
  bad["results"][3].erase("step_ms");
  write_file_atomic(dir + "/bad.json", bad.dump());
  std::string error = "accepted";
  try {
    load_dashboard_input(dir + "/bad.json");
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("a result lacks \"step_ms\""), std::string::npos) << error;
  std::remove((dir + "/bad.json").c_str());
  ::rmdir(dir.c_str());
}

// The projections page (results/sim/projections.html): its title and note say predicted, not
// measured; every series of a chart has a colour of its own (the HSDP ones too) and its legend
// entry fits inside the chart.
TEST(DashboardProjections, EverySeriesHasItsOwnColourTheLegendFitsAndTheTitleSaysProjected) {
  json r{{"format", "mfsdp-sim-sweep"}, {"flags", json::array()}, {"runs", json::array()}};
  for (const char* p : {"owner", "alltoall", "reconstruct"}) r["runs"].push_back(sweep_run(p, 64, 1));
  for (const auto& [p, mode] : std::vector<std::pair<std::string, std::string>>{
           {"owner", "dedup"}, {"owner", "replicated"}, {"alltoall", "replicated"}, {"reconstruct", "replicated"}}) {
    json h = sweep_run(p, 64, 8);
    h["step_mode"] = mode;
    r["runs"].push_back(h);
  }
  const std::string page = render_dashboard({r}, {"sweeps.json"});
  EXPECT_NE(page.find("<h1>MatrixFSDP: projected step times, side by side</h1>"), std::string::npos);
  EXPECT_EQ(page.find("optimizer-step latency"), std::string::npos);
  EXPECT_EQ(page.find("medians over the measured steps"), std::string::npos);
  const std::string svg = chart(page, "proj-step-0-llama");
  ASSERT_FALSE(svg.empty());
  const int width = std::stoi(svg.substr(svg.find("width=\"") + 7));
  std::set<std::string> fills;
  int entries = 0;
  // Legend entries: a 12 x 12 swatch, then its text; 11 px text is about 6 px a character.
  for (size_t at = svg.find("width=\"12\" height=\"12\" fill=\""); at != std::string::npos;
       at = svg.find("width=\"12\" height=\"12\" fill=\"", at + 1)) {
    const size_t f = at + 29;
    fills.insert(svg.substr(f, svg.find('"', f) - f));
    const size_t x = svg.find("<text x=\"", at) + 9, text = svg.find('>', x) + 1;
    const std::string name = svg.substr(text, svg.find("</text>", text) - text);
    EXPECT_LE(std::stod(svg.substr(x)) + 6.0 * static_cast<double>(name.size()), width) << name << " runs past the chart";
    ++entries;
  }
  EXPECT_EQ(entries, 7);
  EXPECT_EQ(fills.size(), 7u) << "series share a colour";
  EXPECT_EQ(fills.count("#888888"), 0u);
  // A page of measurements keeps its own title.
  EXPECT_NE(render_dashboard({peers_result()}, {"peers.json"}).find("<h1>MatrixFSDP: measured step latency"), std::string::npos);
}

// results/README.md: the committed pages are `mfsdp dashboard` of the committed results, byte for
// byte (the file name as given on the command line heads each section).
TEST(DashboardCommitted, PagesAreTheRenderOfTheCommittedResults) {
  const std::string root = MFSDP_SOURCE_DIR;
  for (const auto& [result, page] : {std::pair<std::string, std::string>{"results/cpu/bench_step.json", "results/cpu/dashboard.html"},
                                     {"results/sim/sweeps.json", "results/sim/projections.html"},
                                     {"results/cpu/peers.json", "results/cpu/peers.html"}}) {
    const std::string rendered = render_dashboard({load_dashboard_input(root + "/" + result)}, {result});
    EXPECT_TRUE(rendered == read_file(root + "/" + page)) << page << " is not the page of " << result;
  }
}

}  // namespace
}  // namespace mfsdp
