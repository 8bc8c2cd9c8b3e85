// What a training run reports, as rows: one per step (for people: progress_line; for machines:
// metrics_row, `mfsdp train --metrics`), and one per rank after the last step, gathered through the
// Communicator (the per-rank summary).
#pragma once

#include "core/dist/communicator.h"
#include "core/plan/precision.h"
#include "core/train/trainer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp {

// The run `config` describes on `world_size` ranks, as the first line `mfsdp train` prints: the
// placement, ranks, device and backend, planner, tail policy, optimizer, reduction, prefetch,
// precision, HSDP mesh, steps and tokens per rank.
std::string describe_run(const TrainConfig& config, int world_size, const std::string& device, const std::string& backend);

// Step `m` of `total_steps` as one line: a progress bar, the loss, the time per stage, the bytes
// per phase (unshard received, gradient reduction sent, optimizer step both ways and its calls,
// HSDP's update broadcast when it ran), resident and peak gathered memory, a skipped step.
std::string progress_line(const StepMetrics& m, int total_steps);

// Step `m` as one JSON object: step, loss, forward_ms, backward_ms, optimizer_ms (rank 0's), max_forward_ms,
// max_backward_ms, max_optimizer_ms (the slowest rank's), resident_bytes,
// peak_gathered_bytes, skipped, checkpoint (when one was committed), phases.{name}.{calls,
// bytes_sent, bytes_recv}.
nlohmann::ordered_json metrics_row(const StepMetrics& m);

// One rank's last step, for the summary.
struct RankSummary {
  int rank = 0;
  int64_t unshard_recv_bytes = 0, unshard_sent_bytes = 0;
  int64_t grad_reduce_sent_bytes = 0, grad_reduce_recv_bytes = 0;
  int64_t optimizer_step_calls = 0, optimizer_step_bytes = 0;  // bytes: sent + received
  int64_t resident_bytes = 0, peak_gathered_bytes = 0;
  // The rank's process peak resident set so far (getrusage's ru_maxrss, KiB): thread ranks share
  // one process and report the same. docs/peers.md subtracts an empty process from it.
  int64_t max_rss_kib = 0;
};
RankSummary rank_summary(int rank, const StepMetrics& last);

// Every rank's summary of its last step, in rank order, on every rank (one all-gather through
// `comm`, in the phase the caller is in). Collective.
std::vector<RankSummary> gather_rank_summaries(Communicator& comm, const StepMetrics& last);

// The summary as a table for people, and as the JSON object that ends a metrics file
// ({"summary": true, world_size, precision, ranks: [...]}).
std::string rank_summary_table(const std::vector<RankSummary>& ranks);
nlohmann::ordered_json summary_row(const std::vector<RankSummary>& ranks, const PrecisionPolicy& precision);

// What a resume loaded, as the lines `mfsdp train` prints (warnings last).
std::vector<std::string> resume_lines(const ResumeInfo& r);

}  // namespace mfsdp
