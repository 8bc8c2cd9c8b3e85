#include "harness/trajectory_dump.h"

#include "core/dist/communicator.h"
#include "core/dist/rank_agreement.h"
#include "core/dist/ranks.h"
#include "core/io/checkpoint.h"
#include "core/io/safetensors.h"
#include "core/plan/planner.h"
#include "core/plan/precision.h"
#include "core/train/data.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "core/util/files.h"
#include "core/util/json_limits.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mfsdp {
namespace {

std::string step_file(const char* kind, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s_%08lld.safetensors", kind, static_cast<long long>(step));
  return name;
}

std::vector<std::pair<std::string, at::Tensor>> sorted_tensors(const ParamMap& map) {
  std::vector<std::pair<std::string, at::Tensor>> out(map.begin(), map.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

nlohmann::json step_json(const TrajectoryStep& s) {
  nlohmann::json j{{"step", s.step}, {"params", s.params}};
  if (!s.grads.empty()) j["grads"] = s.grads;
  if (!s.state.empty()) j["state"] = s.state;
  if (s.loss) j["loss"] = trajectory_number(*s.loss);
  if (s.grad_norm) j["grad_norm"] = trajectory_number(*s.grad_norm);
  return j;
}

}  // namespace

nlohmann::json trajectory_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double trajectory_number_of(const nlohmann::json& j, const std::string& what) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return NAN;
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  TORCH_CHECK(false, what, " is ", j.dump(), ": expected a number, or \"nan\", \"inf\" or \"-inf\"");
}

nlohmann::json mesh_json(int replicas, int world_size, const std::string& step_mode) {
  TORCH_CHECK(replicas >= 1 && world_size % replicas == 0, "mesh: ", replicas, " replicas do not divide W = ", world_size);
  return {{"replicas", replicas}, {"shard_group", world_size / replicas}, {"step_mode", replicas > 1 ? step_mode : "replicated"}};
}

int TrajectoryDump::version() const { return header.at("format_version").get<int>(); }
bool TrajectoryDump::has_mesh() const { return header.contains(kMeshField); }
bool TrajectoryDump::is_replay() const { return header.contains("replay"); }
const TrajectoryStep* TrajectoryDump::step(int64_t n) const {
  for (const TrajectoryStep& s : steps)
    if (s.step == n) return &s;
  return nullptr;
}

nlohmann::json trajectory_header(const TrainConfig& config, int world_size, const std::string& producer) {
  const nlohmann::json all = optimizers_to_json(config.runtime);
  const std::string matrix = all.at("matrix").get<std::string>(), other = all.at("other").get<std::string>();
  nlohmann::json optimizer{{"matrix", matrix}, {"other", other}, {"groups", all.at("groups")}};
  optimizer[matrix] = all.at(matrix);
  optimizer[other] = all.at(other);
  const ByteCorpus corpus = ByteCorpus::load(config.data);
  nlohmann::json schedule = lr_schedule_to_json(resolve_decay_steps(config.lr_schedule, config.steps), 0);
  schedule.erase("steps_taken");
  return {{"format", kTrajectoryFormat},
          {"format_version", kTrajectoryFormatVersion},
          {"producer", producer},
          {"model", model_config_json(config.model)},
          {"optimizer", optimizer},
          {"world_size", world_size},
          {kMeshField, mesh_json(config.runtime.replicas, world_size, to_string(config.runtime.step_mode))},
          {"precision", precision_to_json(config.runtime.precision)},
          {"seed", config.seed},
          {"data",
           {{"batch", config.batch},
            {"seq", config.seq},
            {"grad_accum", config.grad_accum},
            {"corpus_bytes", corpus.size()},
            {"corpus_crc32", corpus.crc32()}}},
          {"max_norm", config.runtime.max_norm},
          {"lr_schedule", schedule}};
}

TrajectoryWriter::TrajectoryWriter(std::string dir, nlohmann::json header) : dir_(std::move(dir)), header_(std::move(header)) {
  check_empty_output_dir(dir_, "--dump-trajectory");
  if (!path_exists(dir_)) make_dirs(dir_);
  write_header(false);
}

void TrajectoryWriter::add(const TrajectoryStep& step, const ParamMap& params, const ParamMap* grads, const ParamMap* state) {
  TrajectoryStep s = step;
  s.params = step_file("params", s.step);
  write_safetensors(dir_ + "/" + s.params, sorted_tensors(params), {{"step", std::to_string(s.step)}, {"kind", "params"}},
                    WriteScope::own_directory);
  if (grads) {
    s.grads = step_file("grads", s.step);
    write_safetensors(dir_ + "/" + s.grads, sorted_tensors(*grads), {{"step", std::to_string(s.step)}, {"kind", "grads"}},
                      WriteScope::own_directory);
  }
  if (state && !state->empty()) {
    s.state = step_file("state", s.step);
    write_safetensors(dir_ + "/" + s.state, sorted_tensors(*state), {{"step", std::to_string(s.step)}, {"kind", "state"}},
                      WriteScope::own_directory);
  }
  steps_.push_back(s);
  write_header(false);
}

void TrajectoryWriter::finish() { write_header(true); }

void TrajectoryWriter::write_header(bool complete) {
  nlohmann::json j = header_;
  j["complete"] = complete;
  j["steps"] = nlohmann::json::array();
  for (const TrajectoryStep& s : steps_) j["steps"].push_back(step_json(s));
  write_file_atomic(dir_ + "/" + kTrajectoryHeaderFile, j.dump(1) + "\n", WriteScope::own_directory);
}

std::unique_ptr<TrajectoryWriter> attach_trajectory_dump(RankContext& ctx, TrainConfig& config, const std::string& dir,
                                                         bool grads, const std::string& producer, bool state) {
  std::unique_ptr<TrajectoryWriter> writer;
  std::string error;
  if (ctx.rank == 0)
    error = error_of([&] { writer = std::make_unique<TrajectoryWriter>(dir, trajectory_header(config, ctx.world_size, producer)); });
  Communicator comm(ctx.backend);
  fail_together(comm, error, "train: --dump-trajectory");
  config.full_grads = grads;
  config.full_state = state;
  TrajectoryWriter* w = writer.get();
  config.on_full_state = [w](int64_t step, const StepMetrics* m, const ParamMap& params, const ParamMap* g, const ParamMap* st) {
    if (!w) return;
    TrajectoryStep s;
    s.step = step;
    if (m) s.loss = m->loss, s.grad_norm = m->grad_norm;
    w->add(s, params, g, st);
  };
  return writer;
}

TrajectoryDump read_trajectory(const std::string& dir) {
  TrajectoryDump d;
  d.dir = dir;
  TORCH_CHECK(is_directory(dir), "'", dir, "' is not a directory (a trajectory dump is a directory holding ",
              kTrajectoryHeaderFile, ")");
  const std::string path = dir + "/" + kTrajectoryHeaderFile;
  TORCH_CHECK(path_exists(path), "'", dir, "' holds no ", kTrajectoryHeaderFile, ": not a trajectory dump");
  const std::string text = read_file(path, "trajectory header", int64_t{64} << 20);
  try {
    d.header = parse_json(text, path);
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, path, ": not valid JSON (", e.what(),
                "); NaN and Infinity are not JSON: a dump writes them as the strings \"nan\", \"inf\", \"-inf\"");
  }
  const nlohmann::json& h = d.header;
  TORCH_CHECK(h.is_object(), path, ": the header is not a JSON object");
  TORCH_CHECK(h.value("format", "") == kTrajectoryFormat, path, ": format is ", h.value("format", nlohmann::json()).dump(),
              ", expected \"", kTrajectoryFormat, "\"");
  TORCH_CHECK(h.contains("format_version") && (h["format_version"] == 1 || h["format_version"] == 2), path,
              ": format_version ", h.value("format_version", nlohmann::json()).dump(), " is not 1 or 2 (this reader's)");
  const int version = h["format_version"].get<int>();
  for (const std::string& f : kComparedFields) TORCH_CHECK(h.contains(f), path, ": the header has no field '", f, "'");
  TORCH_CHECK(version == 1 || h.contains(kMeshField), path, ": a format-2 header needs the field '", kMeshField, "'");
  TORCH_CHECK(version == 2 || (!h.contains(kMeshField) && !h.contains("replay")), path, ": a format-1 header holds '",
              h.contains(kMeshField) ? kMeshField : "replay", "', a format-2 field (say format_version 2)");
  if (h.contains(kMeshField)) {
    const nlohmann::json& m = h[kMeshField];
    TORCH_CHECK(m.is_object() && m.contains("replicas") && m["replicas"].is_number_integer() && m["replicas"].get<int64_t>() >= 1 &&
                    m.contains("shard_group") && m["shard_group"].is_number_integer() && m["shard_group"].get<int64_t>() >= 1 &&
                    m.contains("step_mode") && m["step_mode"].is_string(),
                path, ": 'mesh' must be {\"replicas\": R >= 1, \"shard_group\": S >= 1, \"step_mode\": \"replicated\" or \"dedup\"}, got ",
                m.dump());
    if (h["world_size"].is_number_integer())
      TORCH_CHECK(m["replicas"].get<int64_t>() * m["shard_group"].get<int64_t>() == h["world_size"].get<int64_t>(), path,
                  ": mesh.replicas x mesh.shard_group = ", m["replicas"].get<int64_t>() * m["shard_group"].get<int64_t>(),
                  " is not world_size ", h["world_size"].get<int64_t>());
  }
  if (h.contains("replay"))
    TORCH_CHECK(h["replay"].is_object(), path, ": 'replay' is not an object");
  TORCH_CHECK(h.contains("complete") && h["complete"].is_boolean(), path, ": the header has no boolean 'complete'");
  TORCH_CHECK(h.contains("steps") && h["steps"].is_array(), path, ": the header has no array 'steps'");
  int64_t expect = -1;
  for (const nlohmann::json& s : h["steps"]) {
    TORCH_CHECK(s.is_object() && s.contains("step") && s["step"].is_number_integer(), path, ": a step entry without an integer 'step': ",
                s.dump());
    TrajectoryStep t;
    t.step = s["step"].get<int64_t>();
    const std::string where = path + ": step " + std::to_string(t.step);
    TORCH_CHECK(t.step >= 0, where, ": a negative step");
    TORCH_CHECK(expect < 0 || t.step == expect, path, ": step ", expect, " is missing (the list goes on with step ", t.step, ")");
    expect = t.step + 1;
    TORCH_CHECK(s.contains("params") && s["params"].is_string(), where, ": no 'params' file");
    t.params = s["params"].get<std::string>();
    if (s.contains("grads")) {
      TORCH_CHECK(s["grads"].is_string(), where, ": 'grads' is not a file name");
      t.grads = s["grads"].get<std::string>();
    }
    if (s.contains("state")) {
      TORCH_CHECK(version == 2, where, ": 'state' is a format-2 field (the header says format_version 1)");
      TORCH_CHECK(s["state"].is_string(), where, ": 'state' is not a file name");
      t.state = s["state"].get<std::string>();
    }
    for (const std::string& f : {t.params, t.grads, t.state}) {
      if (f.empty()) continue;
      TORCH_CHECK(f.find('/') == std::string::npos && f != "." && f != "..", where, ": file name '", f,
                  "' is not a plain name inside the dump");
      TORCH_CHECK(path_exists(dir + "/" + f), where, ": its file '", f, "' is missing from the dump");
    }
    if (s.contains("loss")) t.loss = trajectory_number_of(s["loss"], where + ": loss");
    if (s.contains("grad_norm")) t.grad_norm = trajectory_number_of(s["grad_norm"], where + ": grad_norm");
    d.steps.push_back(t);
  }
  TORCH_CHECK(!d.steps.empty(), path, ": the dump lists no step");
  TORCH_CHECK(h["complete"].get<bool>(), path, ": the dump is incomplete (its run stopped after step ", d.steps.back().step,
              " without finishing)");
  return d;
}

}  // namespace mfsdp
