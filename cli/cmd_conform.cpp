// `mfsdp conform REFERENCE CANDIDATE`: two trajectory dumps (mfsdp train --dump-trajectory, or any
// implementation writing docs/conformance.md's format) compared step by step. Exit 0: equal, or
// within the tolerance; 1: not; 2: bad input (unreadable or truncated dumps, headers that disagree,
// missing steps or tensors, wrong shapes, a bad tolerance).
#include "cli/commands.h"
#include "core/util/errors.h"
#include "core/util/files.h"
#include "harness/conform.h"
#include "harness/replay.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cstdio>

namespace mfsdp::cli {
namespace {

struct ConformArgs {
  std::string reference, candidate;
  std::string tolerance = "exact";
  std::string json;
  bool replay = false;
  ReplayOptions replay_options;
};

// --replay: the candidate is a one-step replay of the reference (harness/replay.h). Exit 0 when
// every tensor at every step is bitwise or within the noise, 1 when one is systematic.
int run_replay(const ConformArgs& a) {
  TrajectoryDump ref, cand;
  ReplayReport report;
  try {
    TORCH_CHECK(a.tolerance == "exact", "--replay judges by the measured noise floor; --tolerance is for trajectories");
    if (!a.json.empty()) check_output_path(a.json, "--json");
    ref = read_trajectory(a.reference);
    cand = read_trajectory(a.candidate);
    if (!a.json.empty())
      for (const std::string& dir : {a.reference, a.candidate})
        TORCH_CHECK(!file_lands_in(a.json, dir), "--json: '", a.json, "' is inside the dump '", dir, "'; write the report elsewhere");
    report = replay_conform(ref, cand, a.replay_options);
  } catch (const c10::Error& e) {
    throw usage_error("conform", e.what_without_backtrace());
  }
  std::printf("conform --replay: reference %s (%s), candidate %s (%s)\n", a.reference.c_str(),
              ref.header.value("producer", "?").c_str(), a.candidate.c_str(), cand.header.value("producer", "?").c_str());
  std::fputs(replay_text(report).c_str(), stdout);
  if (!a.json.empty()) write_file_atomic(a.json, replay_json(report, ref, cand).dump(1) + "\n");
  return report.clean() ? kExitOk : kExitFailure;
}

int run_conform(const ConformArgs& a) {
  if (a.replay) return run_replay(a);
  Tolerance tol;
  TrajectoryDump ref, cand;
  ConformReport report;
  try {
    tol = parse_tolerance(a.tolerance);
    ref = read_trajectory(a.reference);
    cand = read_trajectory(a.candidate);
    // After the inputs are read, so that a report aimed at one of them (the tolerance file) is
    // refused here, before anything is compared; and never inside a dump (it would replace or add
    // to what is being compared).
    if (!a.json.empty()) {
      for (const std::string& dir : {a.reference, a.candidate})
        TORCH_CHECK(!file_lands_in(a.json, dir), "--json: '", a.json, "' is inside the dump '", dir,
                    "'; write the report elsewhere");
      check_output_path(a.json, "--json");
    }
    const std::string d = header_difference(ref, cand);
    if (!d.empty())
      throw usage_error("conform", "the headers disagree, so the runs are not comparable: " + d + " (" + a.reference + " vs " +
                                       a.candidate + ")");
    report = conform(ref, cand, tol);
  } catch (const c10::Error& e) {
    throw usage_error("conform", e.what_without_backtrace());
  }
  std::printf("conform: reference %s (%s), candidate %s (%s), steps %lld..%lld, tolerance %s\n", a.reference.c_str(),
              ref.header.value("producer", "?").c_str(), a.candidate.c_str(), cand.header.value("producer", "?").c_str(),
              static_cast<long long>(ref.steps.front().step), static_cast<long long>(ref.steps.back().step), tol.spec.c_str());
  std::fputs(report_text(report, tol).c_str(), stdout);
  if (!a.json.empty()) write_file_atomic(a.json, report_json(report, tol, ref, cand).dump(1) + "\n");
  return report.within() ? kExitOk : kExitFailure;
}

}  // namespace

void add_conform_command(CLI::App& app, Action& run) {
  auto* cmd = app.add_subcommand(
      "conform", "Compare two trajectory dumps (--dump-trajectory) step by step: exit 0 equal or within the tolerance, 1 not, 2 bad input");
  auto a = std::make_shared<ConformArgs>();
  cmd->add_option("reference", a->reference, "The reference dump (a directory)")->required();
  cmd->add_option("candidate", a->candidate, "The dump to check (a directory)")->required();
  cmd->add_option("--tolerance", a->tolerance,
                  "exact | rtol=R,atol=A | FILE.json (one entry per source of difference: docs/conformance.md)");
  cmd->add_option("--json", a->json, "Also write the report as JSON to this file");
  cmd->add_flag("--replay", a->replay,
                "The candidate is a one-step replay of the reference (mfsdp_kit.replay): judge each step's update per tensor "
                "against the noise floor of the reference optimizer re-run on inputs perturbed in their last bit");
  cmd->add_option("--factor", a->replay_options.factor, "With --replay: systematic beyond this multiple of the noise floor")
      ->check(CLI::Range(1.0, 1e6));
  cmd->add_option("--min-runs", a->replay_options.min_runs, "With --replay: perturbed re-runs per step at least")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--max-runs", a->replay_options.max_runs, "With --replay: perturbed re-runs per step at most")
      ->check(CLI::Range(1, 1000));
  cmd->callback([&run, a] { run = [a] { return run_conform(*a); }; });
}

}  // namespace mfsdp::cli
