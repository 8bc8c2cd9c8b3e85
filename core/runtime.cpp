#include "core/runtime.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include <fnmatch.h>

#include <cmath>
#include <numeric>

namespace mfsdp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

OwnerRuntime* runtime_of(AutogradContext* ctx) {
  return reinterpret_cast<OwnerRuntime*>(ctx->saved_data["runtime"].toInt());
}

// Forward: the unit's full parameters (the unit is already unsharded). Backward: every
// parameter's gradient exists, so the unit's reduction to owners starts here.
struct UnitGather : public torch::autograd::Function<UnitGather> {
  static variable_list forward(AutogradContext* ctx, at::Tensor anchor, int64_t runtime, int64_t unit) {
    ctx->saved_data["runtime"] = runtime;
    ctx->saved_data["unit"] = unit;
    return reinterpret_cast<OwnerRuntime*>(runtime)->unit(static_cast<int>(unit)).full_views();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    OwnerRuntime* rt = runtime_of(ctx);
    rt->queue_final_callback();
    rt->reduce_unit(static_cast<int>(ctx->saved_data["unit"].toInt()), grads);
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Identity on a unit's output; in backward it revives the unit before the unit's own backward.
struct PreBackward : public torch::autograd::Function<PreBackward> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, int64_t runtime, int64_t unit) {
    ctx->saved_data["runtime"] = runtime;
    ctx->saved_data["unit"] = unit;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    OwnerRuntime* rt = runtime_of(ctx);
    rt->queue_final_callback();
    rt->revive_unit(static_cast<int>(ctx->saved_data["unit"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

ParamGroup param_group_from_string(const std::string& spec) {
  ParamGroup g;
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = spec.find(':', start)) != std::string::npos; start = colon + 1)
    parts.push_back(spec.substr(start, colon - start));
  parts.push_back(spec.substr(start));
  g.pattern = parts[0];
  TORCH_CHECK(!g.pattern.empty(), "group '", spec, "': empty pattern (expected PATTERN:lr=X:wd=Y)");
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    TORCH_CHECK(eq != std::string::npos, "group '", spec, "': '", parts[i], "' is not key=value (lr or wd)");
    const std::string key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
    double v = 0;
    try {
      size_t used = 0;
      v = std::stod(value, &used);
      TORCH_CHECK(used == value.size(), "");
    } catch (...) {
      TORCH_CHECK(false, "group '", spec, "': ", key, " '", value, "' is not a number");
    }
    TORCH_CHECK(std::isfinite(v) && v >= 0, "group '", spec, "': ", key, " must be finite and >= 0, got ", value);
    if (key == "lr") g.lr = v;
    else if (key == "wd") g.weight_decay = v;
    else TORCH_CHECK(false, "group '", spec, "': unknown key '", key, "' (lr or wd)");
  }
  return g;
}

RuntimeOptions options_for(const RuntimeOptions& options, const std::string& name) {
  RuntimeOptions o = options;
  for (const ParamGroup& g : options.groups) {
    if (fnmatch(g.pattern.c_str(), name.c_str(), 0) != 0) continue;
    if (g.lr) o.muon.lr = o.adamw.lr = o.shampoo.lr = o.soap.lr = *g.lr;
    if (g.weight_decay) {
      o.muon.weight_decay = o.adamw.weight_decay = o.shampoo.weight_decay = o.soap.weight_decay = *g.weight_decay;
    }
    break;
  }
  return o;
}

void check_groups(const RuntimeOptions& options, const std::vector<std::string>& names) {
  for (const ParamGroup& g : options.groups) {
    bool any = false;
    for (const std::string& n : names) any = any || fnmatch(g.pattern.c_str(), n.c_str(), 0) == 0;
    TORCH_CHECK(any, "parameter group '", g.pattern, "' matches no parameter of the model");
  }
}

std::unique_ptr<TensorOptimizer> make_optimizer(const RuntimeOptions& all, const std::string& name, bool hidden_matrix,
                                                const std::vector<int64_t>& shape) {
  const RuntimeOptions options = options_for(all, name);
  if (!hidden_matrix) return make_adamw(options.adamw);
  switch (options.optimizer) {
    case OptimizerKind::muon: return make_muon(options.muon, shape);
    case OptimizerKind::shampoo: return make_shampoo(options.shampoo, shape);
    case OptimizerKind::soap: return make_soap(options.soap, shape);
    case OptimizerKind::adamw: return make_adamw(options.adamw);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown OptimizerKind");
}

const char* to_string(EvenMatrixStep step) { return step == EvenMatrixStep::allgather ? "allgather" : "alltoall"; }

OwnerRuntime::OwnerRuntime(const OwnershipPlan& plan, Communicator& comm, RuntimeOptions options,
                           const ParamMap& full_init)
    : plan_(plan), comm_(comm), options_(std::move(options)) {
  // Bad input first, before any collective: names, shapes and dtypes must match the plan.
  for (const MatrixShard& s : plan_.shards()) {
    auto it = full_init.find(s.name);
    TORCH_CHECK(it != full_init.end(), "runtime: rank ", comm_.rank(), ": the plan's parameter '", s.name,
                "' has no initial value");
    TORCH_CHECK(it->second.sizes() == at::IntArrayRef(s.shape) && it->second.scalar_type() == s.dtype, "runtime: rank ",
                comm_.rank(), ": initial value of '", s.name, "' is ", it->second.sizes(), " ", it->second.scalar_type(),
                " but the plan has ", at::IntArrayRef(s.shape), " ", c10::toString(s.dtype));
  }
  TORCH_CHECK(full_init.size() == plan_.shards().size(), "runtime: rank ", comm_.rank(), ": ", full_init.size(),
              " initial parameters for a plan of ", plan_.shards().size(), " (a parameter in no unit?)");
  {
    std::vector<std::string> names;
    for (const MatrixShard& s : plan_.shards()) names.push_back(s.name);
    check_groups(options_, names);
  }
  {
    PhaseScope phase(comm_, Phase::other);
    comm_.check_same_plan(plan_.hash());
  }
  for (int u = 0; u < static_cast<int>(plan_.units().size()); ++u) {
    units_.push_back(std::make_unique<Unit>(plan_, u, comm_, options_.device, options_.unshard));
    anchors_.push_back(at::zeros({}, at::TensorOptions().dtype(at::kFloat)).set_requires_grad(true));
  }
  optimizers_.resize(plan_.shards().size());
  reconstruct_.assign(plan_.shards().size(), false);
  reconstruct_buf_.resize(plan_.shards().size());
  reconstruct_muon_.resize(plan_.shards().size());
  for (size_t i = 0; i < plan_.shards().size(); ++i) {
    const MatrixShard& s = plan_.shards()[i];
    // A hidden matrix kept in even row shards under Muon: the FSDP2 reconstruction baseline.
    reconstruct_[i] = s.kind == ParamKind::hidden_matrix && s.role == Role::even_shard &&
                      options_.optimizer == OptimizerKind::muon;
    Unit& unit = *units_[s.unit];
    at::Tensor local = unit.local_param(static_cast<int>(i));
    if (!local.defined()) continue;
    const ShardSlice* mine = nullptr;
    for (const auto& sl : s.slices)
      if (sl.rank == comm_.rank()) mine = &sl;
    local.copy_(full_init.at(s.name).narrow(0, mine->row_begin, mine->rows));
    if (reconstruct_[i]) {  // stepped by the reconstruction or all-to-all Muon step
      reconstruct_muon_[i] = options_for(options_, s.name).muon;
      continue;
    }
    const bool hidden = s.kind == ParamKind::hidden_matrix;
    TORCH_CHECK(!hidden || s.role == Role::owned_matrix || options_.optimizer == OptimizerKind::adamw, "runtime: rank ",
                comm_.rank(), ": ", to_string(options_.optimizer), " needs hidden matrix '", s.name,
                "' whole on one rank, but the plan keeps it in even shards (reconstruct and alltoall placements run Muon "
                "or AdamW only)");
    optimizers_[i] = make_optimizer(options_, s.name, hidden && s.role == Role::owned_matrix, s.shape);
  }
}

OwnerRuntime::~OwnerRuntime() = default;

void OwnerRuntime::track_peak() { peak_gathered_ = std::max(peak_gathered_, gathered_bytes()); }

ParamMap OwnerRuntime::unshard(int u) {
  Unit& unit = *units_.at(u);
  if (unit.state() == UnitState::sharded) unit.unshard_async();  // else prefetched
  track_peak();
  unit.wait_fill();
  if (options_.prefetch && u + 1 < num_units() && units_[u + 1]->state() == UnitState::sharded) {
    units_[u + 1]->unshard_async();  // moves while unit u computes
    track_peak();
  }
  variable_list full = UnitGather::apply(anchors_[u], reinterpret_cast<int64_t>(this), static_cast<int64_t>(u));
  ParamMap params;
  for (size_t k = 0; k < unit.shards().size(); ++k) params.emplace(plan_.shards()[unit.shards()[k]].name, full[k]);
  return params;
}

at::Tensor OwnerRuntime::after_forward(int u, const at::Tensor& output) {
  Unit& unit = *units_.at(u);
  const bool backward_will_come = at::GradMode::is_enabled() && output.requires_grad();
  at::Tensor out = output;
  if (backward_will_come) out = PreBackward::apply(output, reinterpret_cast<int64_t>(this), static_cast<int64_t>(u));
  if (!backward_will_come) unit.reshard(/*keep_for_backward=*/false);
  else if (options_.reshard_after_forward) unit.reshard(/*keep_for_backward=*/true);
  if (backward_will_come) forward_order_.push_back(u);
  return out;
}

void OwnerRuntime::revive_unit(int u) {
  Unit& unit = *units_.at(u);
  if (unit.state() == UnitState::pinned) {
    unit.revive_async();
    track_peak();
  }
  unit.wait_fill();  // a prefetched revive completes here
  if (!options_.prefetch) return;
  // Backward visits units in reverse forward order: start reviving the one before u.
  for (size_t k = 1; k < forward_order_.size(); ++k) {
    if (forward_order_[k] != u) continue;
    Unit& previous = *units_[forward_order_[k - 1]];
    if (previous.state() == UnitState::pinned) {
      previous.revive_async();
      track_peak();
    }
    break;
  }
}

void OwnerRuntime::reduce_unit(int u, const std::vector<at::Tensor>& full_grads) {
  units_.at(u)->reduce_to_owner(full_grads, options_.reduce);
  reduce_order_.push_back(u);
}

void OwnerRuntime::queue_final_callback() {
  if (callback_queued_) return;
  callback_queued_ = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
}

void OwnerRuntime::finish_backward() {
  callback_queued_ = false;
  for (int u : reduce_order_) units_[u]->finish_reduction();
  reduce_order_.clear();
  forward_order_.clear();
  for (auto& unit : units_) {
    TORCH_CHECK(unit->state() == UnitState::sharded, "runtime: rank ", comm_.rank(), ": unit '", unit->name(),
                "' is ", to_string(unit->state()), " at the end of backward (did the loss depend on it?)");
  }
  // Non-finite gradients: each rank checks what it stores; one all-reduce tells every rank the
  // first offending parameter of every rank, so all ranks fail or skip together.
  int64_t first_bad = 0;
  for (size_t i = 0; i < plan_.shards().size() && first_bad == 0; ++i) {
    at::Tensor g = units_[plan_.shards()[i].unit]->local_grad(static_cast<int>(i));
    if (g.defined() && !at::isfinite(g).all().item<bool>()) first_bad = static_cast<int64_t>(i) + 1;
  }
  at::Tensor flags = at::zeros({comm_.world_size()}, at::TensorOptions().dtype(at::kLong));
  flags[comm_.rank()] = first_bad;
  {
    PhaseScope phase(comm_, Phase::grad_reduce);
    at::Tensor on_device = flags.to(comm_.control_device());
    comm_.allreduce_sum(on_device)->wait();
    flags = on_device.cpu();
  }
  pending_report_ = StepReport{};
  for (int r = 0; r < comm_.world_size(); ++r) {
    const int64_t bad = flags[r].item<int64_t>();
    if (bad > 0) {
      pending_report_.non_finite_parameter = plan_.shards()[bad - 1].name;
      break;
    }
  }
}

StepReport OwnerRuntime::step() {
  PhaseScope phase(comm_, Phase::optimizer_step);
  for (auto& unit : units_) {
    TORCH_CHECK(unit->state() == UnitState::sharded, "runtime: rank ", comm_.rank(), ": step() while unit '",
                unit->name(), "' is ", to_string(unit->state()), " (run backward to completion first)");
  }
  StepReport report = pending_report_;
  if (!report.non_finite_parameter.empty()) {
    TORCH_CHECK(options_.non_finite == NonFinitePolicy::skip, "runtime: rank ", comm_.rank(),
                ": non-finite gradient in parameter '", report.non_finite_parameter,
                "'; the step was not taken (use the skip policy to skip such steps)");
    report.skipped = true;
    return report;
  }
  std::vector<int> even_matrices;
  for (size_t i = 0; i < plan_.shards().size(); ++i) {
    if (reconstruct_[i]) {
      if (options_.even_matrix_step == EvenMatrixStep::alltoall) even_matrices.push_back(static_cast<int>(i));
      else reconstruct_muon_step(static_cast<int>(i));
      continue;
    }
    if (!optimizers_[i]) continue;
    Unit& unit = *units_[plan_.shards()[i].unit];
    at::Tensor param = unit.local_param(static_cast<int>(i));
    optimizers_[i]->step(param, unit.local_grad(static_cast<int>(i)));
  }
  if (!even_matrices.empty()) alltoall_muon_step(even_matrices);
  return report;
}

at::Tensor OwnerRuntime::muon_update_input(int i) {
  Unit& unit = *units_[plan_.shards()[i].unit];
  at::Tensor grad = unit.local_grad(i);
  if (!grad.defined()) return grad;
  const MuonOptions& o = options_.muon;
  at::Tensor& buf = reconstruct_buf_[i];
  if (!buf.defined()) buf = at::zeros_like(grad);
  buf.lerp_(grad, 1 - o.momentum);
  return o.nesterov ? grad.lerp(buf, o.momentum) : buf.clone();
}

// The all-to-all baseline. Round k handles matrices k*W .. k*W+W-1 of `shards`; matrix k*W+j is
// assigned to rank j. Every rank sends its rows of each round matrix to that matrix's rank (one
// uneven all-to-all), the assigned rank runs Newton–Schulz on the whole matrix once, and a second
// all-to-all returns to every rank its rows of each update.
void OwnerRuntime::alltoall_muon_step(const std::vector<int>& shards) {
  const MuonOptions& o = options_.muon;
  const int W = comm_.world_size(), me = comm_.rank();
  auto rows_of = [&](const MatrixShard& s, int rank) -> const ShardSlice& {
    for (const ShardSlice& sl : s.slices)
      if (sl.rank == rank) return sl;
    TORCH_INTERNAL_ASSERT(false, "no slice of ", s.name, " for rank ", rank);
  };
  const c10::ScalarType dtype = plan_.shards()[shards[0]].dtype;
  const at::TensorOptions opts = units_[plan_.shards()[shards[0]].unit]->segment().options();
  for (size_t start = 0; start < shards.size(); start += W) {
    const int n = static_cast<int>(std::min<size_t>(W, shards.size() - start));
    std::vector<at::Tensor> inputs(n);
    std::vector<int64_t> send(W, 0), recv(W, 0);
    for (int j = 0; j < n; ++j) {
      const MatrixShard& s = plan_.shards()[shards[start + j]];
      TORCH_CHECK(s.dtype == dtype, "runtime: all-to-all Muon needs one dtype for every even matrix ('", s.name, "' is ",
                  c10::toString(s.dtype), ", not ", c10::toString(dtype), ")");
      inputs[j] = muon_update_input(shards[start + j]);
      send[j] = rows_of(s, me).rows * s.shape[1];
    }
    const MatrixShard* mine = me < n ? &plan_.shards()[shards[start + me]] : nullptr;
    for (int r = 0; r < W && mine; ++r) recv[r] = rows_of(*mine, r).rows * mine->shape[1];
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : inputs)
      if (t.defined()) flat.push_back(t.reshape({-1}));
    at::Tensor out_rows = at::empty({std::accumulate(recv.begin(), recv.end(), int64_t{0})}, opts);
    at::Tensor in_rows = flat.empty() ? at::empty({0}, opts) : at::cat(flat);
    if (W > 1) comm_.alltoall(out_rows, in_rows, recv, send)->wait();
    else out_rows = in_rows;

    // The assigned matrix, whole (rows in rank order are rows in order), orthogonalised once.
    // Updates travel in Newton–Schulz's output dtype (bf16), as the optimizer produces them.
    const at::TensorOptions update_opts = opts.dtype(at::kBFloat16);
    at::Tensor back_in = at::empty({0}, update_opts);
    if (mine) {
      at::Tensor full = at::empty(mine->shape, opts);
      int64_t cursor = 0;
      for (int r = 0; r < W; ++r) {
        const ShardSlice& sl = rows_of(*mine, r);
        TORCH_INTERNAL_ASSERT(sl.rows == 0 || sl.row_begin * mine->shape[1] == cursor, "even slices out of rank order");
        full.narrow(0, sl.row_begin, sl.rows).view({-1}).copy_(out_rows.narrow(0, cursor, recv[r]));
        cursor += recv[r];
      }
      back_in = newton_schulz(full, o).contiguous().view({-1});  // rank r's rows are contiguous, in rank order
      TORCH_INTERNAL_ASSERT(back_in.scalar_type() == at::kBFloat16, "Newton–Schulz output is not bf16");
    }
    at::Tensor back_out = at::empty({std::accumulate(send.begin(), send.end(), int64_t{0})}, update_opts);
    if (W > 1) comm_.alltoall(back_out, back_in, send, recv)->wait();
    else back_out = back_in;
    int64_t cursor = 0;
    for (int j = 0; j < n; ++j) {
      if (send[j] == 0) continue;
      const int i = shards[start + j];
      const MatrixShard& s = plan_.shards()[i];
      const MuonOptions& mo = reconstruct_muon_[i];
      at::Tensor param = units_[s.unit]->local_param(i);
      param.mul_(1 - mo.lr * mo.weight_decay);
      param.add_(back_out.narrow(0, cursor, send[j]).view(param.sizes()),
                 -muon_adjusted_lr(mo.lr, mo.adjust_lr_fn, s.shape[0], s.shape[1]));
      cursor += send[j];
    }
  }
}

// The reconstruction baseline (stock FSDP2 + Muon): momentum stays row-sharded; the Nesterov input
// of every rank's rows is all-gathered into the full matrix (a weight-sized all-gather in the
// optimizer step), Newton–Schulz runs redundantly on every rank, each rank keeps its rows.
void OwnerRuntime::reconstruct_muon_step(int i) {
  const MatrixShard& s = plan_.shards()[i];
  Unit& unit = *units_[s.unit];
  const MuonOptions& o = reconstruct_muon_[i];
  const int W = comm_.world_size();
  const int64_t rows = s.shape[0], cols = s.shape[1], chunk = (rows + W - 1) / W;
  at::Tensor param = unit.local_param(i), grad = unit.local_grad(i);
  at::Tensor padded = at::zeros({chunk, cols}, unit.segment().options());
  int64_t my_rows = 0, my_begin = 0;
  if (param.defined()) {
    padded.narrow(0, 0, grad.size(0)).copy_(muon_update_input(i));
    my_rows = grad.size(0);
    for (const ShardSlice& sl : s.slices)
      if (sl.rank == comm_.rank()) my_begin = sl.row_begin;
  }
  at::Tensor gathered = at::empty({W * chunk, cols}, padded.options());
  comm_.allgather(gathered, padded)->wait();
  at::Tensor update = newton_schulz(gathered.narrow(0, 0, rows), o);
  if (my_rows == 0) return;
  param.mul_(1 - o.lr * o.weight_decay);
  param.add_(update.narrow(0, my_begin, my_rows), -muon_adjusted_lr(o.lr, o.adjust_lr_fn, rows, cols));
}

at::Tensor OwnerRuntime::local_param(const std::string& name) {
  const MatrixShard& s = plan_.shard(name);
  const int i = static_cast<int>(&s - plan_.shards().data());
  return units_[s.unit]->local_param(i);
}

at::Tensor OwnerRuntime::local_grad(const std::string& name) {
  const MatrixShard& s = plan_.shard(name);
  const int i = static_cast<int>(&s - plan_.shards().data());
  return units_[s.unit]->local_grad(i);
}

ParamMap OwnerRuntime::gather_full_params() {
  PhaseScope phase(comm_, Phase::other);
  ParamMap out;
  for (auto& unit : units_) {
    unit->unshard();
    std::vector<at::Tensor> views = unit->full_views();
    for (size_t k = 0; k < views.size(); ++k) {
      out.emplace(plan_.shards()[unit->shards()[k]].name, views[k].to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
    }
    unit->reshard(/*keep_for_backward=*/false);
  }
  return out;
}

int64_t OwnerRuntime::optimizer_state_bytes() const {
  int64_t n = 0;
  for (const auto& b : reconstruct_buf_)
    if (b.defined()) n += static_cast<int64_t>(b.nbytes());
  for (const auto& o : optimizers_)
    if (o) n += o->state_bytes();
  return n;
}

int64_t OwnerRuntime::resident_bytes() const {
  int64_t n = optimizer_state_bytes();
  for (const auto& u : units_) n += 2 * u->segment_bytes();
  return n;
}

int64_t OwnerRuntime::gathered_bytes() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u->gathered_bytes();
  return n;
}

}  // namespace mfsdp
