#include "core/io/checkpoint.h"

#include "core/io/checkpoint_dir.h"

#include "core/dist/rank_agreement.h"
#include "core/plan/precision.h"
#include "core/util/crc32.h"
#include "core/util/files.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/headeronly/version.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace mfsdp {
namespace {

std::string rank_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "rank_%05d.safetensors", rank);
  return buf;
}

const ShardSlice* stored_slice(const MatrixShard& s, int rank) {
  const ShardSlice* sl = s.slice_on(rank);
  return sl && sl->rows > 0 ? sl : nullptr;
}

bool whole_matrix_state(OptimizerKind kind) { return kind == OptimizerKind::shampoo || kind == OptimizerKind::soap; }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << at::IntArrayRef(shape);
  return out.str();
}

// The communicator over every rank of the runtime's mesh: its shard group without HSDP, else
// `world`, which must be the whole mesh with ranks numbered replica * S + shard rank.
Communicator& mesh_world(OwnerRuntime& rt, Communicator* world, const char* what) {
  const int R = rt.options().replicas, S = rt.comm().world_size();
  if (R == 1 && !world) return rt.comm();
  TORCH_CHECK(world, what, ": rank ", rt.comm().rank(), " of replica ", rt.replica(), ": an HSDP runtime (", R,
              " replica groups) needs the whole mesh's communicator");
  TORCH_CHECK(world->world_size() == R * S && world->rank() == rt.replica() * S + rt.comm().rank(), what, ": rank ",
              world->rank(), " of ", world->world_size(), " is not shard rank ", rt.comm().rank(), " of replica ",
              rt.replica(), " in a mesh of ", R, " x ", S);
  return *world;
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "step_%08" PRId64, step);
  return buf;
}

nlohmann::json optimizers_to_json(const RuntimeOptions& o) {
  nlohmann::json groups = nlohmann::json::array();
  for (const ParamGroup& g : o.groups) {
    nlohmann::json j{{"pattern", g.pattern}};
    if (g.lr) j["lr"] = *g.lr;
    if (g.weight_decay) j["weight_decay"] = *g.weight_decay;
    groups.push_back(j);
  }
  nlohmann::json muon{{"lr", o.muon.lr}, {"weight_decay", o.muon.weight_decay}, {"momentum", o.muon.momentum},
                      {"nesterov", o.muon.nesterov}, {"ns_coefficients", {o.muon.ns_a, o.muon.ns_b, o.muon.ns_c}},
                      {"eps", o.muon.eps}, {"ns_steps", o.muon.ns_steps}, {"adjust_lr_fn", to_string(o.muon.adjust_lr)}};
  if (o.muon.batched_ns) muon["batched_ns"] = true;  // absent otherwise: earlier checkpoints compare equal
  if (o.muon.ns_variant != NsVariant::torch) {       // likewise; resuming under another variant is refused
    const NsVariantInfo& v = ns_variant_info(o.muon.ns_variant);
    muon["ns_variant"] = v.name;
    muon["ns_variant_source"] = v.source;
  }
  return {
      {"matrix", to_string(o.optimizer)},
      {"other", "adamw"},
      {"muon", muon},
      {"normuon", {{"lr", o.normuon.lr}, {"weight_decay", o.normuon.weight_decay}, {"momentum", o.normuon.momentum},
                   {"beta2", o.normuon.beta2}, {"nesterov", o.normuon.nesterov}, {"eps", o.normuon.eps},
                   {"update_scale", to_string(o.normuon.update_scale)}, {"adjust_lr_fn", to_string(o.normuon.adjust_lr)},
                   {"newton_schulz", "muon"}}},
      {"adamuon", {{"lr", o.adamuon.lr}, {"betas", {o.adamuon.beta1, o.adamuon.beta2}},
                   {"weight_decay", o.adamuon.weight_decay}, {"eps", o.adamuon.eps},
                   {"adjust_lr_fn", to_string(o.adamuon.adjust_lr)}, {"newton_schulz", "muon"}}},
      {"adamw", {{"lr", o.adamw.lr}, {"betas", {o.adamw.beta1, o.adamw.beta2}}, {"eps", o.adamw.eps},
                 {"weight_decay", o.adamw.weight_decay}}},
      {"shampoo", {{"lr", o.shampoo.lr}, {"beta1", o.shampoo.beta1}, {"beta2", o.shampoo.beta2},
                   {"epsilon", o.shampoo.epsilon}, {"weight_decay", o.shampoo.weight_decay},
                   {"max_preconditioner_dim", o.shampoo.max_preconditioner_dim},
                   {"precondition_frequency", o.shampoo.precondition_frequency},
                   {"start_preconditioning_step", o.shampoo.start_preconditioning_step},
                   {"use_bias_correction", o.shampoo.use_bias_correction}, {"adam_grafting", o.shampoo.adam_grafting},
                   {"grafting_beta2", o.shampoo.grafting_beta2}, {"grafting_epsilon", o.shampoo.grafting_epsilon}}},
      {"soap", {{"lr", o.soap.lr}, {"betas", {o.soap.beta1, o.soap.beta2}}, {"shampoo_beta", o.soap.shampoo_beta},
                {"eps", o.soap.eps}, {"weight_decay", o.soap.weight_decay},
                {"precondition_frequency", o.soap.precondition_frequency}, {"max_precond_dim", o.soap.max_precond_dim},
                {"correct_bias", o.soap.correct_bias}}},
      {"groups", groups},
  };
}

// ---- Writing -------------------------------------------------------------------------------

std::string save_checkpoint(const std::string& root, OwnerRuntime& rt, const CheckpointContext& ctx, Communicator* world) {
  // Checked before any collective (each rank's own state): a checkpoint is a step boundary.
  TORCH_CHECK(!rt.step_in_progress(), "checkpoint: rank ", rt.comm().rank(), ": a checkpoint is written between steps, but ",
              "micro-batch ", rt.micro_batch().index, " of ", rt.micro_batch().count,
              " of this step has run and the step has not (its gradients are in no checkpoint)");
  Communicator& comm = mesh_world(rt, world, "checkpoint");
  PhaseScope phase(comm, Phase::checkpoint);
  const int me = comm.rank();  // in the whole mesh: the rank file's number
  const int shard_rank = rt.comm().rank(), replica = rt.replica();
  const std::vector<int>& step_replicas = rt.step_replicas();
  const OwnershipPlan& plan = rt.plan();
  const std::string name = checkpoint_name(ctx.step);
  const std::string final_dir = root + "/" + name, tmp_dir = root + "/." + name + ".tmp";

  // 1. Rank 0 prepares an empty temporary directory (left over from a crashed attempt: removed).
  std::string error;
  if (me == 0) error = error_of([&] {
      if (ctx.check_lock) ctx.check_lock();
      make_dirs(root);
      if (!ctx.allow_rollback) {
        const std::optional<int64_t> newest = latest_step(root);
        TORCH_CHECK(!newest || *newest <= ctx.step, "checkpoint: '", root, "/latest' names step ", *newest,
                    ", newer than step ", ctx.step, " being written: refusing to move it backwards (another run writes "
                    "into this directory; to roll back on purpose, resume with --resume-from an earlier step)");
      }
      remove_flat_dir(tmp_dir);
      TORCH_CHECK(::mkdir(tmp_dir.c_str(), 0755) == 0, "checkpoint: cannot create '", tmp_dir, "': ", std::strerror(errno));
    });
  fail_together(comm, error, "checkpoint: preparing '" + tmp_dir + "'");

  // 2. Every rank writes what it stores, then its file's manifest.
  CheckpointRank record;
  record.rank = me;
  record.file = rank_file_name(me);
  record.sampler = ctx.sampler;
  FileManifest manifest;
  error = error_of([&] {
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (size_t i = 0; i < plan.shards().size(); ++i) {
      const MatrixShard& s = plan.shards()[i];
      const ShardSlice* mine = stored_slice(s, shard_rank);
      if (!mine) continue;
      TORCH_CHECK(!s.shape.empty(), "checkpoint: parameter '", s.name, "' is a scalar (not supported)");
      // Every tensor once: the parameter from replica 0, the state from the replica stepping it.
      const bool write_param = replica == 0;
      const bool write_state = replica == (step_replicas.empty() ? 0 : step_replicas[i]);
      const std::string rows = "|rows=" + std::to_string(mine->row_begin) + ":" + std::to_string(mine->row_begin + mine->rows);
      auto add = [&](const std::string& state, const at::Tensor& t) {
        const std::string tensor = s.name + (state.empty() ? "|param" : "|state." + state) + rows;
        tensors.emplace_back(tensor, t);
        record.tensors.push_back(CheckpointTensor{tensor, s.name, state, mine->row_begin, mine->rows});
      };
      if (write_param) add("", rt.local_param(s.name));
      if (!write_state) continue;
      CheckpointOptimizer opt{s.name, OptimizerKind::adamw, mine->row_begin, mine->rows, {}};
      if (TensorOptimizer* o = rt.optimizer(static_cast<int>(i))) {
        opt.kind = o->kind();
        opt.scalars = o->scalars();
        for (const auto& [k, t] : o->state())
          if (t.defined()) add(k, t);
      } else if (rt.steps_even_matrix(static_cast<int>(i))) {
        opt.kind = OptimizerKind::muon;  // the even-matrix Muon step keeps only the momentum, row-sharded
        if (at::Tensor& m = rt.even_matrix_step().momentum(static_cast<int>(i)); m.defined()) add("momentum_buffer", m);
      } else {
        continue;
      }
      record.optimizers.push_back(std::move(opt));
    }
    // No generator state: nothing random is drawn after initialisation (batches are a pure
    // function of seed, step and rank), and the process-global CPU generator is shared by ranks
    // that are threads, so it is no rank's state to save.
    write_safetensors(tmp_dir + "/" + record.file, tensors,
                      {{"format", "pt"}, {"mfsdp_rank", std::to_string(me)}, {"mfsdp_step", std::to_string(ctx.step)}},
                      WriteScope::own_directory);
    manifest = compute_manifest(tmp_dir, record.file);
  });
  if (ctx.after_rank_file) ctx.after_rank_file();

  // 3. Rank 0 gathers every rank's record, writes layout.json (checked by the strict reader
  //    first), commits the directory with one rename and moves `latest`.
  const std::string payload = error.empty() ? nlohmann::json{{"rank", to_json(record)}, {"manifest", to_json(manifest)}}.dump() : "";
  std::vector<std::string> payloads = allgather_strings(comm, error.empty() ? payload : "!" + error);
  for (size_t r = 0; r < payloads.size(); ++r)
    TORCH_CHECK(payloads[r].empty() || payloads[r][0] != '!', "checkpoint: writing '", tmp_dir, "' failed on rank ", r, ": ",
                payloads[r].substr(1));
  if (me == 0) error = error_of([&] {
      if (ctx.check_lock) ctx.check_lock();
      CheckpointLayout layout;
      layout.step = ctx.step;
      layout.torch_version = TORCH_VERSION;
      layout.placement = ctx.placement;
      layout.plan = std::shared_ptr<const OwnershipPlan>(&plan, [](const OwnershipPlan*) {});
      layout.model = ctx.model;
      layout.optimizers = ctx.optimizers;
      layout.precision = precision_to_json(rt.options().precision);
      layout.lr_schedule = ctx.lr_schedule;
      layout.mesh.replicas = rt.options().replicas;
      layout.mesh.step_mode = to_string(rt.options().step_mode);
      std::vector<nlohmann::json> ranks, manifests;
      for (const std::string& p : payloads) {
        nlohmann::json j = nlohmann::json::parse(p);
        ranks.push_back(j["rank"]);
        manifests.push_back(j["manifest"]);
      }
      const std::string text = layout_json(layout, ranks, manifests);
      parse_layout(text, tmp_dir + "/layout.json");  // what we commit must read back
      write_file_atomic(tmp_dir + "/layout.json", text, WriteScope::own_directory);
      fsync_path(tmp_dir);
      const std::string old = root + "/." + name + ".old";
      if (path_exists(final_dir)) {  // a checkpoint of this step that `latest` may not name (resumed run)
        remove_flat_dir(old);
        TORCH_CHECK(::rename(final_dir.c_str(), old.c_str()) == 0, "checkpoint: cannot move '", final_dir, "' aside: ",
                    std::strerror(errno));
      }
      TORCH_CHECK(::rename(tmp_dir.c_str(), final_dir.c_str()) == 0, "checkpoint: cannot rename '", tmp_dir, "' to '",
                  final_dir, "': ", std::strerror(errno));
      fsync_path(root);
      write_file_atomic(root + "/latest", latest_text(name, text), WriteScope::own_directory);
      fsync_path(root);
      remove_flat_dir(old);
    });
  fail_together(comm, error, "checkpoint: committing '" + final_dir + "'");
  return final_dir;
}

bool has_checkpoint(const std::string& root) { return path_exists(root + "/latest"); }

std::string resolve_checkpoint(const std::string& path) {
  if (path_exists(path + "/layout.json")) return path;
  if (path_exists(path + "/latest")) {
    const std::string latest = path + "/latest";
    const LatestRecord rec = parse_latest(read_file(latest, "checkpoint", 4096), latest);
    const std::string dir = path + "/" + rec.name;
    if (!path_exists(dir + "/layout.json")) {
      const std::vector<int64_t> steps = committed_steps(path);
      std::string valid;
      for (int64_t s : steps) valid += (valid.empty() ? "" : ", ") + step_dir_name(s);
      TORCH_CHECK(false, "checkpoint: '", latest, "' names '", rec.name, "', which ",
                  path_exists(dir) ? "has no layout.json" : "does not exist",
                  steps.empty() ? std::string("; the directory holds no committed checkpoint")
                                : "; committed checkpoints there: " + valid + " (resume one with --resume-from " + path + "/" +
                                      step_dir_name(steps.back()) + ")");
    }
    if (!rec.has_layout_crc32) {
      // A `latest` without its CRC is only an old (format 1) writer's; a sealed layout's must carry it.
      const CheckpointLayout named = read_layout(dir);
      TORCH_CHECK(named.format_version < 2, "checkpoint: '", latest, "' names '", rec.name, "' without its layout CRC, but that ",
                  "layout is sealed (format ", named.format_version, "): a `latest` of a sealed format must carry 'layout_crc32' ",
                  "(corrupted or hand-edited)");
    }
    if (rec.has_layout_crc32) {
      const std::string text = read_file(dir + "/layout.json", "checkpoint", int64_t{256} << 20);
      const uint32_t actual = crc32(text.data(), text.size());
      char want[9], got[9];
      std::snprintf(want, sizeof(want), "%08x", rec.layout_crc32);
      std::snprintf(got, sizeof(got), "%08x", actual);
      TORCH_CHECK(actual == rec.layout_crc32, "checkpoint: '", latest, "' names '", rec.name, "' with layout CRC-32 ", want,
                  ", but its layout.json has ", got, " (`latest` or that layout.json is corrupted, or was replaced)");
    }
    return dir;
  }
  TORCH_CHECK(path_exists(path), "checkpoint: '", path, "' does not exist");
  TORCH_CHECK(false, "checkpoint: '", path, "' is neither a checkpoint (no layout.json) nor a checkpoint directory (no latest)");
}

int64_t verify_checkpoint_files(const std::string& dir, const CheckpointLayout& layout, int part, int parts) {
  TORCH_CHECK(parts >= 1 && part >= 0 && part < parts, "verify_checkpoint_files: part ", part, " of ", parts);
  int64_t bytes = 0;
  for (size_t i = static_cast<size_t>(part); i < layout.ranks.size(); i += static_cast<size_t>(parts)) {
    const CheckpointRank& r = layout.ranks[i];
    VerifiedFile f(dir, layout.manifest_of(r.file));
    f.verify_all();
    const SafetensorsHeader& h = f.header();
    for (const CheckpointTensor& t : r.tensors) h.at(t.tensor);  // every recorded tensor is in the file
    if (!r.rng_tensor.empty()) h.at(r.rng_tensor);
    bytes += layout.manifest_of(r.file).bytes;
  }
  return bytes;
}

// ---- Reading -------------------------------------------------------------------------------

CheckpointSource::CheckpointSource(std::string dir) : CheckpointSource(dir, read_layout(dir)) {}
CheckpointSource::CheckpointSource(std::string dir, CheckpointLayout layout) : dir_(std::move(dir)), layout_(std::move(layout)) {}
CheckpointSource::~CheckpointSource() = default;

VerifiedFile& CheckpointSource::file(int rank) {
  auto it = files_.find(rank);
  if (it != files_.end()) return *it->second;
  const std::string& name = layout_.ranks.at(rank).file;
  auto f = std::make_unique<VerifiedFile>(dir_, layout_.manifest_of(name));
  return *files_.emplace(rank, std::move(f)).first->second;
}

int64_t CheckpointSource::bytes_read() const {
  int64_t n = 0;
  for (const auto& [_, f] : files_) n += f->bytes_read();
  return n;
}

int64_t CheckpointSource::bytes_total() const {
  int64_t n = 0;
  for (const FileManifest& m : layout_.manifest) n += m.bytes;
  return n;
}

at::Tensor CheckpointSource::rows(const std::string& param, const std::string& state, int64_t row_begin, int64_t rows) {
  const MatrixShard& s = layout_.plan->shard(param);
  std::vector<int64_t> shape;
  at::Tensor out;
  int64_t covered = 0;
  const std::string what = state.empty() ? "'" + param + "'" : "state '" + state + "' of '" + param + "'";
  for (const CheckpointRank& r : layout_.ranks) {
    for (const CheckpointTensor& t : r.tensors) {
      if (t.param != param || t.state != state) continue;
      const int64_t lo = std::max(row_begin, t.row_begin), hi = std::min(row_begin + rows, t.row_begin + t.rows);
      if (lo >= hi) continue;
      VerifiedFile& f = file(r.rank);
      const SafetensorsEntry& e = f.header().at(t.tensor);
      // A parameter's rows have the plan's shape; a state entry's rows are the parameter's (its
      // leading dimension), its trailing dimensions its own (per-slice state of experts), equal in
      // every piece.
      std::vector<int64_t> want = state.empty() || e.shape.empty() ? s.shape : e.shape;
      if (!state.empty() && out.defined()) want = out.sizes().vec();
      want[0] = t.rows;
      TORCH_CHECK(e.shape == want, "checkpoint: '", f.path(), "', tensor '", t.tensor, "' has shape ", shape_text(e.shape),
                  " but holds rows [", t.row_begin, ", ", t.row_begin + t.rows, ") of ", what, ", shape ", shape_text(want));
      TORCH_CHECK(!state.empty() || e.dtype == s.dtype, "checkpoint: '", f.path(), "', tensor '", t.tensor, "' is ",
                  safetensors_dtype(e.dtype), " but the plan says ", safetensors_dtype(s.dtype));
      at::Tensor piece = f.read_rows(t.tensor, lo - t.row_begin, hi - lo);
      if (!out.defined()) {
        shape = e.shape;
        shape[0] = rows;
        out = at::empty(shape, at::TensorOptions().dtype(piece.scalar_type()));
      }
      TORCH_CHECK(piece.scalar_type() == out.scalar_type(), "checkpoint: ", what, " has pieces of different dtypes");
      out.narrow(0, lo - row_begin, hi - lo).copy_(piece);
      covered += hi - lo;
    }
  }
  TORCH_CHECK(covered == rows, "checkpoint: '", dir_, "': only ", covered, " of rows [", row_begin, ", ", row_begin + rows,
              ") of ", what, " are in its rank files");
  return out;
}

std::optional<OptimizerStateEntry> CheckpointSource::optimizer_state(const std::string& param, int64_t row_begin, int64_t rows) {
  struct Source {
    const CheckpointRank* rank;
    const CheckpointOptimizer* opt;
    std::set<std::string> states;
  };
  std::vector<Source> sources;
  for (const CheckpointRank& r : layout_.ranks) {
    for (const CheckpointOptimizer& o : r.optimizers) {
      if (o.param != param) continue;
      Source src{&r, &o, {}};
      for (const CheckpointTensor& t : r.tensors)
        if (t.param == param && !t.state.empty()) src.states.insert(t.state);
      sources.push_back(std::move(src));
    }
  }
  if (sources.empty()) return std::nullopt;
  const OptimizerKind kind = sources[0].opt->kind;
  for (const Source& s : sources)
    TORCH_CHECK(s.opt->kind == kind, "checkpoint: '", dir_, "': '", param, "' is stepped by ", to_string(kind), " on rank ",
                sources[0].rank->rank, " but by ", to_string(s.opt->kind), " on rank ", s.rank->rank);
  const int64_t total = layout_.plan->shard(param).shape[0];
  OptimizerStateEntry out;
  out.kind = kind;
  // Experts keep per-slice state, whole experts in rows like the parameter's: cut and joined as rows.
  if (whole_matrix_state(kind) && layout_.plan->shard(param).kind != ParamKind::expert_matrix) {
    const Source& s = sources[0];
    TORCH_CHECK(sources.size() == 1 && s.opt->row_begin == 0 && s.opt->rows == total, "checkpoint: '", dir_, "': ", to_string(kind),
                " state of '", param, "' is split across ranks (it belongs to the whole matrix)");
    TORCH_CHECK(row_begin == 0 && rows == total, "checkpoint: '", param, "' has ", to_string(kind),
                " state of the whole matrix, but this plan stores rows [", row_begin, ", ", row_begin + rows,
                ") of it here (", to_string(kind), " needs the matrix whole on one rank)");
    out.scalars = s.opt->scalars;
    for (const CheckpointTensor& t : s.rank->tensors)
      if (t.param == param && !t.state.empty()) out.state[t.state] = file(s.rank->rank).read_tensor(t.tensor);
    return out;
  }
  // Element-wise state: assembled from every source slice overlapping the rows, which must agree
  // on the counters and on which state exists.
  const Source* first = nullptr;
  for (const Source& s : sources) {
    if (std::max(row_begin, s.opt->row_begin) >= std::min(row_begin + rows, s.opt->row_begin + s.opt->rows)) continue;
    if (!first) {
      first = &s;
      continue;
    }
    TORCH_CHECK(s.opt->scalars == first->opt->scalars && s.states == first->states, "checkpoint: '", dir_,
                "': the optimizer state of '", param, "' differs between rank ", first->rank->rank, " and rank ",
                s.rank->rank, " (counters or entries)");
  }
  TORCH_CHECK(first, "checkpoint: '", dir_, "': no rank holds optimizer state for rows [", row_begin, ", ", row_begin + rows,
              ") of '", param, "'");
  out.scalars = first->opt->scalars;
  for (const std::string& state : first->states) out.state[state] = this->rows(param, state, row_begin, rows);
  return out;
}

void check_same_model(const CheckpointLayout& layout, const OwnershipPlan& plan, const std::string& dir) {
  const OwnershipPlan& written = *layout.plan;
  for (const MatrixShard& s : plan.shards()) {
    TORCH_CHECK(written.has_shard(s.name), "checkpoint: '", dir, "' was written for a different model: it has no parameter '",
                s.name, "'");
    const MatrixShard& w = written.shard(s.name);
    TORCH_CHECK(w.shape == s.shape && w.dtype == s.dtype, "checkpoint: '", dir,
                "' was written for a different model: parameter '", s.name, "' is ", shape_text(w.shape), " ",
                safetensors_dtype(w.dtype), " there but ", shape_text(s.shape), " ", safetensors_dtype(s.dtype), " here");
  }
  for (const MatrixShard& w : written.shards())
    TORCH_CHECK(plan.has_shard(w.name), "checkpoint: '", dir, "' was written for a different model: its parameter '", w.name,
                "' is not in this model");
}

LoadReport load_checkpoint(const std::string& checkpoint, OwnerRuntime& rt, Communicator* world) {
  Communicator& comm = mesh_world(rt, world, "checkpoint");
  PhaseScope phase(comm, Phase::checkpoint);
  const int me = comm.rank();  // in the whole mesh
  const int shard_rank = rt.comm().rank();
  LoadReport report;
  report.checkpoint = checkpoint;
  // 1. Every file verified once in all, spread over the ranks (rank r: files r, r + W, ...), and
  //    every rank told the outcome before anything is applied: a checkpoint that fails anywhere
  //    is used nowhere, whatever this rank itself would read of it.
  std::optional<CheckpointLayout> layout;
  std::string error = error_of([&] {
    layout = read_layout(checkpoint);
    check_same_model(*layout, rt.plan(), checkpoint);
    report.bytes_verified = verify_checkpoint_files(checkpoint, *layout, me, comm.world_size());
  });
  fail_together(comm, error, "checkpoint: verifying '" + checkpoint + "'");
  // 2. What this rank stores.
  error = error_of([&] {
    CheckpointSource src(checkpoint, std::move(*layout));
    const CheckpointLayout& L = src.layout();
    const OwnershipPlan& plan = rt.plan();
    report.step = L.step;
    report.written_world_size = L.world_size();
    report.same_layout = L.plan->hash() == plan.hash() && L.mesh.replicas == rt.options().replicas &&
                         L.mesh.step_mode == to_string(rt.options().step_mode);
    report.bytes_total = src.bytes_total();
    // Same layout: the fast path, every tensor comes from this rank's own file (the loop below
    // reads nothing else); otherwise only the byte ranges of the rows this rank now stores.
    for (size_t i = 0; i < plan.shards().size(); ++i) {
      const MatrixShard& s = plan.shards()[i];
      const ShardSlice* mine = stored_slice(s, shard_rank);
      if (!mine) continue;
      at::Tensor local = rt.local_param(s.name);
      local.copy_(src.rows(s.name, "", mine->row_begin, mine->rows));
      TensorOptimizer* opt = rt.optimizer(static_cast<int>(i));
      const bool even = rt.steps_even_matrix(static_cast<int>(i));
      if (!opt && !even) continue;
      std::optional<OptimizerStateEntry> st = src.optimizer_state(s.name, mine->row_begin, mine->rows);
      const OptimizerKind want = opt ? opt->kind() : OptimizerKind::muon;
      if (!st) {
        TORCH_CHECK(L.step == 0, "checkpoint: '", checkpoint, "' was written after step ", L.step,
                    " but holds no optimizer state for '", s.name, "'");
        continue;
      }
      TORCH_CHECK(st->kind == want, "checkpoint: '", checkpoint, "' stepped '", s.name, "' with ", to_string(st->kind),
                  "; this run steps it with ", to_string(want), " (pass the same --optimizer)");
      for (auto& [_, t] : st->state) t = t.to(local.device());
      if (opt) {
        opt->load_state(st->state, st->scalars, local.sizes().vec());
        continue;
      }
      at::Tensor& momentum = rt.even_matrix_step().momentum(static_cast<int>(i));
      momentum = at::Tensor();
      for (const auto& [k, t] : st->state) {
        TORCH_CHECK(k == "momentum_buffer" && t.sizes() == local.sizes(), "checkpoint: '", checkpoint,
                    "': unexpected Muon state '", k, "' for the even rows of '", s.name, "'");
        momentum = t.to(local.scalar_type());
      }
    }
    // A generator tensor written by an earlier version (the process-global CPU generator) is
    // verified with its file in step 1 and not applied (see save_checkpoint).
    report.sampler = L.ranks[me < L.world_size() ? me : 0].sampler.dump();
    report.bytes_read = src.bytes_read();
  });
  fail_together(comm, error, "checkpoint: loading '" + checkpoint + "'");
  return report;
}

FullState read_full_state(const std::string& checkpoint, bool with_optimizer_state) {
  CheckpointSource src(checkpoint);
  verify_checkpoint_files(checkpoint, src.layout(), 0, 1);  // every byte, not only what is read below
  FullState out;
  out.step = src.layout().step;
  for (const MatrixShard& s : src.layout().plan->shards()) {
    out.params.emplace(s.name, src.rows(s.name, "", 0, s.shape[0]));
    if (!with_optimizer_state) continue;
    if (auto st = src.optimizer_state(s.name, 0, s.shape[0])) out.optimizers.emplace(s.name, std::move(*st));
  }
  out.layout = src.layout();
  return out;
}

void export_model(const std::string& checkpoint, const std::string& out) {
  FullState full = read_full_state(checkpoint, /*with_optimizer_state=*/false);
  std::vector<std::pair<std::string, at::Tensor>> tensors(full.params.begin(), full.params.end());
  write_safetensors(out, tensors,
                    {{"format", "pt"}, {"mfsdp_step", std::to_string(full.step)}});  // no path: equal states, equal files
}

bool inspect_checkpoint(const std::string& checkpoint, bool verify, std::string& report) {
  const CheckpointLayout L = read_layout(checkpoint);
  const OwnershipPlan& plan = *L.plan;
  std::ostringstream out;
  out << "checkpoint " << checkpoint << "\n"
      << "  format " << kCheckpointFormat << " v" << L.format_version << ", step " << L.step << ", torch "
      << L.torch_version << "\n"
      << "  placement " << L.placement << ", world size " << L.world_size()
      << (L.mesh.replicas > 1 ? " (HSDP: " + std::to_string(L.mesh.replicas) + " replica groups x " +
                                    std::to_string(plan.world_size()) + ", step mode " + L.mesh.step_mode + ")"
                              : std::string())
      << ", planner "
      << to_string(plan.meta().planner) << ", tail policy " << to_string(plan.meta().tail_policy) << ", plan hash "
      << plan.hash_hex() << "\n"
      << "  model " << L.model.dump() << "\n"
      << "  optimizers: matrix " << L.optimizers.value("matrix", std::string("?")) << ", other "
      << L.optimizers.value("other", std::string("?")) << "\n"
      << "  precision: masters " << L.precision.value("master_dtype", std::string("?")) << ", compute "
      << L.precision.value("param_dtype", std::string("?")) << ", reduce " << L.precision.value("reduce_dtype", std::string("?"))
      << (L.format_version < 3 ? " (format " + std::to_string(L.format_version) + ": recorded no policy; it ran fp32)" : std::string())
      << "\n";
  std::map<std::string, std::string> opt_kind;
  for (const CheckpointRank& r : L.ranks)
    for (const CheckpointOptimizer& o : r.optimizers) opt_kind[o.param] = to_string(o.kind);
  out << "  parameters (" << plan.shards().size() << "):\n";
  char line[512];
  for (const MatrixShard& s : plan.shards()) {
    std::string where;
    if (s.owned()) {
      where = "rank " + std::to_string(s.owner);
    } else {
      std::ostringstream slices;
      for (const ShardSlice& sl : s.slices)
        if (sl.rows > 0) slices << (slices.tellp() > 0 ? " " : "") << sl.rank << ":" << sl.row_begin << "+" << sl.rows;
      where = slices.str();
    }
    std::snprintf(line, sizeof(line), "    %-34s %-14s %-4s %-12s %-7s %s\n", s.name.c_str(), shape_text(s.shape).c_str(),
                  safetensors_dtype(s.dtype), to_string(s.role), opt_kind.count(s.name) ? opt_kind[s.name].c_str() : "-",
                  where.c_str());
    out << line;
  }
  out << "  files:\n";
  bool ok = true;
  for (const CheckpointRank& r : L.ranks) {
    const FileManifest& m = L.manifest_of(r.file);
    std::snprintf(line, sizeof(line), "    %-24s rank %-3d %10" PRId64 " bytes  crc32 %08x  %3zu tensors", r.file.c_str(), r.rank,
                  m.bytes, m.crc32, r.tensors.size());
    out << line;
    if (verify) {
      const std::string error = error_of([&] {
        CheckpointLayout one = L;
        one.ranks = {r};
        verify_checkpoint_files(checkpoint, one, 0, 1);
      });
      out << (error.empty() ? "  OK" : "  FAILED: " + error);
      ok = ok && error.empty();
    }
    out << "\n";
  }
  if (verify) out << (ok ? "all files verified\n" : "verification FAILED\n");
  report = out.str();
  return ok;
}

}  // namespace mfsdp
