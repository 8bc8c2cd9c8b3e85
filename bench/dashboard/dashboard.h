// The `mfsdp dashboard` page: one self-contained HTML document (inline SVG, no scripts, no network)
// from bench_step results (bench_step --json: optimizer-step latency vs W per placement, bytes per
// phase, memory per rank, planner imbalance, the ratios, every case, the environment of each
// result), from `mfsdp simulate` sweeps (bench/simulate_sweeps.py: per model, the projected
// optimizer step, whole step and memory against W per placement, every run, the assumptions) and
// from the stock-peer timings (peers/side_by_side.py: the owner runtime against DDP and FSDP2).
// Every chart is an <svg data-chart="ID"> whose series are <g data-series="NAME"> groups of
// points or bars with data-value attributes, and the raw results sit in a JSON script block
// (id "results"), so tests and tools (bench/dashboard_check.py) can read the page back.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace mfsdp {

// The result in `path`: a bench_step result (format "mfsdp-bench", with environment, cases,
// ratios and planner), simulate sweeps (format "mfsdp-sim-sweep", runs that each have model,
// placement, world_size, stages, step_s, memory and assumptions) or stock-peer timings (format
// "mfsdp-peers", results with size, runner, world_size, the three times and peak memory). Throws naming the file, and the
// missing field, when it cannot be read, is not JSON, is neither kind or lacks a field.
nlohmann::json load_dashboard_input(const std::string& path);

// The page for `results` (each as load_dashboard_input returns it), one section per result,
// headed by its name in `names` (the same length: the file names).
std::string render_dashboard(const std::vector<nlohmann::json>& results, const std::vector<std::string>& names);

}  // namespace mfsdp
