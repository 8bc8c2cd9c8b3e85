#include "core/train/metrics.h"

#include "core/util/units.h"

#include <sys/resource.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <cstdio>

namespace mfsdp {
namespace {

const PhaseCounters& of(const StepMetrics& m, Phase p) { return m.bytes[phase_index(p)]; }

}  // namespace

std::string describe_run(const TrainConfig& c, int world_size, const std::string& device, const std::string& backend) {
  const RuntimeOptions& r = c.runtime;
  const std::string mesh = r.replicas > 1 ? " HSDP " + std::to_string(r.replicas) + " x " + std::to_string(world_size / r.replicas) +
                                                " (" + to_string(r.step_mode) + " step),"
                                          : "";
  const std::string accumulation =
      c.grad_accum > 1 ? format(" (%d micro-batches of %lld x %lld, %s reduction)", c.grad_accum,
                                static_cast<long long>(c.batch), static_cast<long long>(c.seq), to_string(r.grad_reduce))
                       : std::string();
  std::string clipping = r.max_norm > 0 ? format(", gradient norm clipped at %g", r.max_norm) : std::string();
  if (c.qk_clip_tau > 0) clipping += format(", qk-clip tau %g (%lld kv heads)", c.qk_clip_tau, static_cast<long long>(c.model.kv_heads));
  if (scheduled(c.lr_schedule)) clipping += ", lr schedule " + describe(resolve_decay_steps(c.lr_schedule, c.steps));
  return format("placement %s, %d rank(s) on %s over %s, planner %s, tail %s, optimizer %s, %s reduction%s, "
                "precision %s over fp32 masters,%s %d steps of %lld x %lld tokens per rank%s%s",
                to_string(c.placement), world_size, device.c_str(), backend.c_str(), to_string(c.planner.planner),
                to_string(c.planner.tail_policy), describe_optimizer(r).c_str(), to_string(r.reduce), r.prefetch ? ", prefetch" : "",
                to_string(r.precision).c_str(), mesh.c_str(), c.steps, static_cast<long long>(c.grad_accum * c.batch),
                static_cast<long long>(c.seq), accumulation.c_str(), clipping.c_str());
}

std::string progress_line(const StepMetrics& m, int total_steps) {
  const int width = 20, done = total_steps > 0 ? static_cast<int>(static_cast<double>(m.step) / total_steps * width) : width;
  const std::string bar = std::string(done, '#') + std::string(width - done, '.');
  const PhaseCounters& opt = of(m, Phase::optimizer_step);
  const PhaseCounters& update = of(m, Phase::update_broadcast);
  std::string line = format("[%s] step %3d/%d  loss %.4f  fwd %6.1f ms  bwd %6.1f ms  opt %6.1f ms  | unshard %s  reduce %s  "
                            "step %s (%lld calls)",
                            bar.c_str(), m.step, total_steps, m.loss, 1e3 * m.forward_s, 1e3 * m.backward_s, 1e3 * m.optimizer_s,
                            human_bytes(of(m, Phase::unshard).bytes_recv).c_str(),
                            human_bytes(of(m, Phase::grad_reduce).bytes_sent).c_str(),
                            human_bytes(opt.bytes_sent + opt.bytes_recv).c_str(), static_cast<long long>(opt.calls));
  if (update.calls != 0) line += "  update broadcast " + human_bytes(update.bytes_sent + update.bytes_recv);
  if (m.grad_norm) line += format("  grad norm %.4g", *m.grad_norm);
  if (m.lr_scheduled) line += format("  lr x%.4g", m.lr_factor);
  if (m.qk_max_logit) line += format("  max logit %.4g, %lld head(s) clipped", *m.qk_max_logit, static_cast<long long>(m.qk_clipped_heads));
  line += "  | resident " + human_bytes(m.resident_bytes) + "  peak gathered " + human_bytes(m.peak_gathered_bytes);
  if (m.skipped)
    line += m.non_finite_norm ? std::string("  SKIPPED: non-finite gradient norm (every gradient finite)")
                              : "  SKIPPED: non-finite gradient in " + m.non_finite_parameter;
  return line;
}

nlohmann::ordered_json metrics_row(const StepMetrics& m) {
  nlohmann::ordered_json j{{"step", m.step}, {"loss", m.loss}, {"forward_ms", 1e3 * m.forward_s},
                           {"backward_ms", 1e3 * m.backward_s}, {"optimizer_ms", 1e3 * m.optimizer_s},
                           {"max_forward_ms", 1e3 * m.max_forward_s}, {"max_backward_ms", 1e3 * m.max_backward_s},
                           {"max_optimizer_ms", 1e3 * m.max_optimizer_s},
                           {"resident_bytes", m.resident_bytes}, {"peak_gathered_bytes", m.peak_gathered_bytes},
                           {"skipped", m.skipped}};
  if (m.grad_norm) j["grad_norm"] = *m.grad_norm;  // before clipping; null when not finite
  if (m.qk_max_logit) j["qk_max_logit"] = *m.qk_max_logit, j["qk_clipped_heads"] = m.qk_clipped_heads;  // null when not finite
  if (m.lr_scheduled) j["lr_factor"] = m.lr_factor, j["optimizer_steps"] = m.optimizer_steps;
  if (m.peak_accumulation_bytes > 0) j["peak_accumulation_bytes"] = m.peak_accumulation_bytes;
  if (!m.checkpoint.empty()) j["checkpoint"] = {{"dir", m.checkpoint}, {"ms", 1e3 * m.checkpoint_s}};
  for (int p = 0; p < kNumPhases; ++p) {
    const PhaseCounters& c = m.bytes[p];
    j["phases"][to_string(static_cast<Phase>(p))] = {{"calls", c.calls}, {"parts", c.parts}, {"bytes_sent", c.bytes_sent}, {"bytes_recv", c.bytes_recv}};
  }
  return j;
}

namespace {
int64_t process_max_rss_kib() {
  struct rusage u {};
  return ::getrusage(RUSAGE_SELF, &u) == 0 ? static_cast<int64_t>(u.ru_maxrss) : 0;
}
}  // namespace

RankSummary rank_summary(int rank, const StepMetrics& last) {
  const PhaseCounters& opt = of(last, Phase::optimizer_step);
  return {rank,
          of(last, Phase::unshard).bytes_recv,
          of(last, Phase::unshard).bytes_sent,
          of(last, Phase::grad_reduce).bytes_sent,
          of(last, Phase::grad_reduce).bytes_recv,
          opt.calls,
          opt.bytes_sent + opt.bytes_recv,
          last.resident_bytes,
          last.peak_gathered_bytes,
          process_max_rss_kib()};
}

std::vector<RankSummary> gather_rank_summaries(Communicator& comm, const StepMetrics& last) {
  const RankSummary s = rank_summary(comm.rank(), last);
  const std::vector<int64_t> row{s.unshard_recv_bytes,   s.unshard_sent_bytes,   s.grad_reduce_sent_bytes,
                                 s.grad_reduce_recv_bytes, s.optimizer_step_calls, s.optimizer_step_bytes,
                                 s.resident_bytes,       s.peak_gathered_bytes,   s.max_rss_kib};
  const int64_t n = static_cast<int64_t>(row.size());
  at::Tensor mine = at::tensor(row, at::TensorOptions().dtype(at::kLong)).to(comm.control_device());
  at::Tensor all = at::empty({comm.world_size() * n}, comm.control_options(at::kLong));
  comm.allgather(all, mine)->wait();
  all = all.cpu();
  std::vector<RankSummary> out;
  for (int r = 0; r < comm.world_size(); ++r) {
    const int64_t* v = all.const_data_ptr<int64_t>() + r * n;
    out.push_back({r, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]});
  }
  return out;
}

std::string rank_summary_table(const std::vector<RankSummary>& ranks) {
  std::string out =
      "per rank, last step:  unshard recv / sent | grad reduce sent / recv | optimizer step calls, bytes | resident | peak gathered\n";
  for (const RankSummary& s : ranks) {
    out += format("  rank %2d   %10s / %-10s | %10s / %-10s | %lld, %s | %s | %s\n", s.rank,
                  human_bytes(s.unshard_recv_bytes).c_str(), human_bytes(s.unshard_sent_bytes).c_str(),
                  human_bytes(s.grad_reduce_sent_bytes).c_str(), human_bytes(s.grad_reduce_recv_bytes).c_str(),
                  static_cast<long long>(s.optimizer_step_calls), human_bytes(s.optimizer_step_bytes).c_str(),
                  human_bytes(s.resident_bytes).c_str(), human_bytes(s.peak_gathered_bytes).c_str());
  }
  return out;
}

nlohmann::ordered_json summary_row(const std::vector<RankSummary>& ranks, const PrecisionPolicy& pp) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const RankSummary& s : ranks) {
    rows.push_back({{"rank", s.rank}, {"unshard_recv_bytes", s.unshard_recv_bytes}, {"unshard_sent_bytes", s.unshard_sent_bytes},
                    {"grad_reduce_sent_bytes", s.grad_reduce_sent_bytes}, {"grad_reduce_recv_bytes", s.grad_reduce_recv_bytes},
                    {"optimizer_step_calls", s.optimizer_step_calls}, {"optimizer_step_bytes", s.optimizer_step_bytes},
                    {"resident_bytes", s.resident_bytes}, {"peak_gathered_bytes", s.peak_gathered_bytes},
                    {"ru_maxrss_kib", s.max_rss_kib}});
  }
  nlohmann::ordered_json precision{{"param_dtype", short_dtype_name(pp.param_dtype)},
                                   {"reduce_dtype", short_dtype_name(pp.reduce_dtype)},
                                   {"master_dtype", "fp32"}};
  if (pp.output_dtype) precision["output_dtype"] = short_dtype_name(*pp.output_dtype);
  return {{"summary", true}, {"world_size", static_cast<int>(ranks.size())}, {"precision", precision}, {"ranks", rows}};
}

std::vector<std::string> resume_lines(const ResumeInfo& r) {
  std::vector<std::string> out{format(
      "resume: %s, step %lld, written by %d rank(s); %s; every file verified (rank 0's share %lld bytes); "
      "rank 0 read %lld of %lld checkpoint bytes",
      r.checkpoint.c_str(), static_cast<long long>(r.step), r.written_world_size,
      r.same_layout ? "same layout (each rank read its own file)" : "resharded onto this plan",
      static_cast<long long>(r.bytes_verified), static_cast<long long>(r.bytes_read), static_cast<long long>(r.bytes_total))};
  if (!r.lr_schedule.empty()) out.push_back("resume: " + r.lr_schedule);
  for (const std::string& w : r.warnings) out.push_back("resume: warning: " + w);
  return out;
}

}  // namespace mfsdp
