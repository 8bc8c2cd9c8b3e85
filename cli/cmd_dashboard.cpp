// `mfsdp dashboard RESULT.json [...] -o dashboard.html`: one self-contained HTML page from
// bench_step results and `mfsdp simulate` sweeps, rendered by bench/dashboard/dashboard.h.
#include "bench/dashboard/dashboard.h"
#include "cli/commands.h"
#include "core/util/files.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace mfsdp::cli {
namespace {

struct DashboardArgs {
  std::vector<std::string> results;
  std::string out = "dashboard.html";
};

int run_dashboard(const DashboardArgs& a) {
  std::vector<nlohmann::json> results;
  for (const std::string& p : a.results) results.push_back(load_dashboard_input(p));
  check_output_flag("dashboard", a.out, "--out");  // after the inputs were read: never one of them
  const std::string html = render_dashboard(results, a.results);
  write_file_atomic(a.out, html);
  std::printf("dashboard: %s (%zu result file(s), %zu bytes)\n", a.out.c_str(), results.size(), html.size());
  return kExitOk;
}

}  // namespace

void add_dashboard_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand("dashboard", "One self-contained HTML page (inline SVG) from bench_step --json results");
  auto a = std::make_shared<DashboardArgs>();
  cmd->add_option("results", a->results, "bench_step result files, or simulate sweeps (JSON)")->required();
  cmd->add_option("-o,--out", a->out, "Output HTML file (written atomically)");
  cmd->callback([&run, a] { run = [a] { return run_dashboard(*a); }; });
}

}  // namespace mfsdp::cli
